"""How a split is cut among ranks and an epoch into steps: the formulas, free of TensorFlow
(the batch-size study and the elastic controller use them on login nodes). What a batch is
and how many steps an epoch has is :class:`~bigearthnet.core.batch.BatchPlan`'s, and only
its.

Partition: rank ``r`` of ``n`` owns the contiguous range ``[r*N//n, (r+1)*N//n)`` of the
split's ``N`` samples. Steps: every rank takes the plan's number of steps per epoch (each
step is an allreduce), ``--batch-size`` samples each but the last, which takes what is
left. Shuffling: a new permutation of the rank's part each epoch, from ``(seed, epoch,
rank)``.
"""

from __future__ import annotations

import numpy as np

from bigearthnet.core.batch import BatchPlan
from bigearthnet.core.errors import ConfigError


def rank_range(total: int, rank: int, size: int) -> tuple[int, int]:
    """[start, stop) of rank's contiguous part of ``total`` samples."""
    return rank * total // size, (rank + 1) * total // size


def epoch_order(part_len: int, seed: int, epoch: int, rank: int, shuffle: bool) -> np.ndarray:
    """Positions 0..part_len-1 in this epoch's order (a permutation when shuffling)."""
    if not shuffle:
        return np.arange(part_len)
    return np.random.default_rng([seed, epoch, rank]).permutation(part_len)


def batch_sizes(count: int, steps: int, batch_size: int | None) -> list[int]:
    """The sizes of the ``steps`` batches ``count`` samples are cut into: ``batch_size`` each
    and the rest in the last (a last batch that would be empty borrows from the one before:
    no rank ever takes an empty step). ``batch_size`` None: near-equal batches."""
    if count < steps:
        raise ConfigError(
            f"this rank holds {count} samples, fewer than the {steps} steps of an epoch; "
            "use a larger batch size or fewer ranks"
        )
    if batch_size is None:
        return [len(part) for part in np.array_split(np.arange(count), steps)]
    sizes = [batch_size] * (steps - 1) + [count - batch_size * (steps - 1)]
    for i in range(steps - 1, 0, -1):
        if sizes[i] < 1:
            sizes[i - 1] -= 1 - sizes[i]
            sizes[i] = 1
    return sizes


def split_batches(order: np.ndarray, steps: int, batch_size: int | None = None) -> list[np.ndarray]:
    """``order`` cut into ``steps`` consecutive, non-empty batches (:func:`batch_sizes`)."""
    bounds = np.cumsum(batch_sizes(len(order), steps, batch_size))[:-1]
    return np.split(order, bounds)


def partition_takes(total: int, plan: BatchPlan, steps: int, limit: int | None = None) -> list[int]:
    """Samples each step of a fixed-size epoch takes over all ranks (every rank cuts its
    part, or its first ``limit`` samples, as :func:`split_batches` does): what the run's
    position and history count, adding up to the split (or the capped epoch)."""
    takes = np.zeros(steps, dtype=np.int64)
    for rank in range(plan.world_size):
        start, stop = rank_range(total, rank, plan.world_size)
        count = stop - start if limit is None else min(stop - start, limit)
        takes += np.asarray(batch_sizes(count, steps, plan.per_rank))
    return [int(t) for t in takes]
