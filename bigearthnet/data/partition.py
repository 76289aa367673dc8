"""How a split is cut among ranks and an epoch into steps: the formulas, free of TensorFlow
(the batch-size study and the elastic controller use them on login nodes).

Partition: rank ``r`` of ``n`` owns the contiguous range ``[r*N//n, (r+1)*N//n)`` of the
split's ``N`` samples. Steps: every rank takes the same number of steps per epoch (each step
is an allreduce), enough batches for the largest part. Shuffling: a new permutation of the
rank's part each epoch, from ``(seed, epoch, rank)``.
"""

from __future__ import annotations

import math

import numpy as np


def rank_range(total: int, rank: int, size: int) -> tuple[int, int]:
    """[start, stop) of rank's contiguous part of ``total`` samples."""
    return rank * total // size, (rank + 1) * total // size


def steps_per_epoch(total: int, size: int, batch_size: int) -> int:
    """Steps every rank takes per epoch: enough batches for the largest part."""
    largest = math.ceil(total / size)
    return max(1, math.ceil(largest / batch_size))


def epoch_order(part_len: int, seed: int, epoch: int, rank: int, shuffle: bool) -> np.ndarray:
    """Positions 0..part_len-1 in this epoch's order (a permutation when shuffling)."""
    if not shuffle:
        return np.arange(part_len)
    return np.random.default_rng([seed, epoch, rank]).permutation(part_len)


def split_batches(order: np.ndarray, steps: int) -> list[np.ndarray]:
    """``steps`` consecutive, non-empty slices of ``order`` whose sizes differ by <= 1."""
    if len(order) < steps:
        raise ValueError(
            f"this rank holds {len(order)} samples, fewer than the {steps} steps of an epoch; "
            "use a larger batch size or fewer ranks"
        )
    return np.array_split(order, steps)


def epoch_plan(
    total: int, *, world_size: int, batch_size: int, max_steps: int | None = None
) -> tuple[int, int | None]:
    """(steps per epoch, samples per rank and epoch or None for the whole part) of a
    fixed-size run: enough batches for the largest part, or ``max_steps`` when that is fewer
    (a capped epoch trains on the first steps x batch samples of its shuffled order)."""
    steps = steps_per_epoch(total, world_size, batch_size)
    if max_steps and max_steps < steps:
        return max_steps, max_steps * batch_size
    return steps, None


def updates_per_epoch(steps: int, passes_per_update: int) -> int:
    """Optimizer updates in an epoch of ``steps`` batches, ``passes_per_update`` per update."""
    return math.ceil(steps / passes_per_update)
