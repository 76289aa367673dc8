"""Which samples each step of an epoch trains on: the two ways of cutting an epoch.

* :class:`RankPartition` (fixed-size runs): every rank owns a fixed, disjoint part of the
  split (:class:`~bigearthnet.data.rank_data.RankData`), shuffled per epoch, cut into the same
  number
  of steps on every rank. A position inside an epoch is a step count.
* :class:`GlobalOrder` (elastic runs): every epoch visits one permutation of the whole split,
  seeded by (seed, epoch) only, so it does not depend on the world size; each step takes the
  next ``batch x size`` samples and every rank trains on its slice. A position is the number
  of samples of that order consumed, so after a resize the rest of the epoch is simply cut
  for the new size: no sample is skipped or repeated.

Both yield :class:`StepBatch` items, which the one training loop (:mod:`bigearthnet.training.loop`)
consumes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from bigearthnet.core.batch import BatchPlan
from bigearthnet.core.errors import ConfigError
from bigearthnet.data.partition import partition_takes, rank_range
from bigearthnet.data.rank_data import RankData


@dataclass(frozen=True)
class StepBatch:
    """One step's batch on this rank and where it stands in the epoch."""

    images: tf.Tensor  # uint16 (b, 120, 120, 12)
    labels: tf.Tensor  # uint8 (b, classes)
    step: int  # 0-based index of the step in the epoch
    last: bool  # the epoch's last step
    apply: bool  # the optimizer updates after this step (gradient accumulation boundary)
    taken: int  # samples of the epoch this step consumes on all ranks together


class RankPartition:
    """A fixed-size run's epochs: this rank's part, ``steps`` batches per epoch."""

    def __init__(
        self, data: RankData, plan: BatchPlan, *, seed: int, max_steps: int | None = None
    ) -> None:
        self.data, self.plan, self.seed = data, plan, seed
        self.steps = plan.steps(data.total, max_steps)
        # A capped epoch trains on the first steps x batch samples of each rank's order.
        self.limit = self.steps * plan.per_rank if self.steps < plan.steps(data.total) else None
        if len(data) < self.steps:
            raise ConfigError(
                f"rank {data.rank} holds {len(data)} training samples but an epoch has "
                f"{self.steps} steps; use a larger --batch-size or fewer ranks"
            )
        # What each step takes over all ranks: the same count on every rank.
        self.takes = partition_takes(data.total, plan, self.steps, self.limit)

    @property
    def updates_per_epoch(self) -> int:
        return self.plan.updates(self.steps)

    def batches(self, epoch: int, *, start_step: int = 0) -> Iterator[StepBatch]:
        source = self.data.dataset(
            steps=self.steps,
            epoch=epoch,
            seed=self.seed,
            shuffle=True,
            start_step=start_step,
            limit=self.limit,
            batch_size=self.plan.per_rank,
        )
        for step, (images, labels) in enumerate(source, start=start_step):
            last = step == self.steps - 1
            yield StepBatch(
                images,
                labels,
                step=step,
                last=last,
                apply=(step + 1) % self.plan.passes == 0 or last,
                taken=self.takes[step],
            )


def step_slices(order: np.ndarray, consumed: int, batch_size: int, size: int):
    """(samples taken, one position array per rank) for the step after ``consumed``: a full
    step, or the rest of the epoch where the remainder rule says
    (:meth:`~bigearthnet.core.batch.BatchPlan.step_take`)."""
    take = BatchPlan(batch_size, size).step_take(len(order) - consumed)
    return take, np.array_split(order[consumed : consumed + take], size)


class GlobalOrder:
    """An elastic run's epochs: one global order of the whole split, cut per world size."""

    def __init__(self, data: RankData, *, batch_size: int, seed: int) -> None:
        if data.total != len(data):
            raise ValueError("GlobalOrder needs the whole split (RankData of rank 0 of 1)")
        self.data, self.batch_size, self.seed = data, batch_size, seed

    def steps(self, world_size: int) -> int:
        """Steps of a whole epoch in a world of ``world_size`` (the plan's count, which
        merges a remainder smaller than the world into the last full step, as here)."""
        return BatchPlan(self.batch_size, world_size).steps(len(self.data))

    def batches(
        self, epoch: int, *, consumed: int, step: int, rank: int, size: int
    ) -> Iterator[StepBatch]:
        """The epoch's steps after ``consumed`` samples (``step`` steps) for this world."""
        total = len(self.data)
        order = np.random.default_rng([self.seed, epoch]).permutation(total)
        while consumed < total:
            take, parts = step_slices(order, consumed, self.batch_size, size)
            mine = parts[rank]
            if len(mine) == 0:
                # The world grew with fewer samples left than ranks: rather than an empty
                # batch (a NaN mean loss), re-use one sample of rank 0's slice.
                mine = parts[0][:1]
            images, labels = self.data.take(np.sort(mine))
            consumed += take
            yield StepBatch(
                tf.convert_to_tensor(images),
                tf.convert_to_tensor(labels),
                step=step,
                last=consumed >= total,
                apply=True,
                taken=take,
            )
            step += 1


def validation_slices(total: int, *, batch_size: int, rank: int, size: int) -> list[np.ndarray]:
    """This rank's contiguous slice of a split for the current world size, in batches."""
    start, stop = rank_range(total, rank, size)
    return [np.arange(lo, min(lo + batch_size, stop)) for lo in range(start, stop, batch_size)]
