"""One definition of the batch: what ``--batch-size`` means and every number derived from it.

``--batch-size`` is **per rank**: in every step each rank trains on that many samples, but
the last step of an epoch, which takes what is left. ``--backward-passes-per-step P``
accumulates P such steps before each optimizer update. So, for a world of ``n`` ranks:

* samples per step, all ranks: ``batch_size x n``
* the global batch (samples per optimizer update): ``batch_size x n x P``
* the scale of the linear LR rule and AdaScale's bound: ``n x P`` (global batch / batch)
* steps per epoch: ``ceil(N / (batch_size x n))`` for a split of ``N`` samples, but that a
  remainder too small to give every rank a sample (fewer than ``n``) joins the last full
  step; the same count for fixed-size and elastic runs, and the samples of an epoch add up
  to ``N``.

Free of TensorFlow: the batch-size study and the elastic controller use it on login nodes,
training, the LR schedules and the history use it on the ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bigearthnet.core.errors import ConfigError


@dataclass(frozen=True)
class BatchPlan:
    """The batch of a run in a world of ``world_size`` ranks."""

    per_rank: int  # --batch-size: samples per rank and step
    world_size: int = 1
    passes: int = 1  # --backward-passes-per-step: steps per optimizer update

    @classmethod
    def for_global(cls, global_batch: int, world_size: int, passes: int = 1) -> BatchPlan:
        """The plan whose global batch is ``global_batch`` (a batch-size study's point);
        ConfigError when the ranks and passes do not divide it."""
        per_rank, rest = divmod(global_batch, world_size * passes)
        if rest or per_rank < 1:
            raise ConfigError(
                f"a global batch of {global_batch} cannot be split over {world_size} rank(s) "
                f"x {passes} pass(es): choose a multiple of {world_size * passes}"
            )
        return cls(per_rank, world_size, passes)

    @property
    def per_step(self) -> int:
        """Samples one step trains on over all ranks."""
        return self.per_rank * self.world_size

    @property
    def global_batch(self) -> int:
        """Samples per optimizer update over all ranks and passes."""
        return self.per_step * self.passes

    @property
    def scale(self) -> int:
        """How many times one rank's batch an update averages over: the linear LR rule's
        factor and the upper bound of AdaScale's gain."""
        return self.world_size * self.passes

    def steps(self, total: int, max_steps: int | None = None) -> int:
        """Steps of an epoch over ``total`` samples (at most ``max_steps``, a capped epoch):
        the steps :meth:`step_take` cuts it into."""
        full, rest = divmod(total, self.per_step)
        steps = full if full and self._joins(rest) else full + 1
        return min(steps, max_steps) if max_steps else steps

    def step_take(self, remaining: int) -> int:
        """Samples the next step takes over all ranks with ``remaining`` left in the epoch:
        a full step, or all that is left when what would remain joins it."""
        take = min(self.per_step, remaining)
        return remaining if self._joins(remaining - take) else take

    def _joins(self, rest: int) -> bool:
        """The remainder rule: ``rest`` samples after a step join it when they are too few to
        give every rank a sample (so no rank ever trains on an empty batch)."""
        return rest < self.world_size

    def updates(self, steps: int) -> int:
        """Optimizer updates in an epoch of ``steps`` steps (a last partial accumulation
        updates too)."""
        return math.ceil(steps / self.passes)

    def too_large_for(self, total: int) -> str | None:
        """Why this batch cannot be trained on a split of ``total`` samples (a global batch
        larger than the split: every epoch would be one update of fewer samples, never this
        batch), or None when it can."""
        if self.global_batch <= total:
            return None
        return (
            f"a global batch of {self.global_batch:,} ({self.per_rank} per rank x "
            f"{self.world_size} rank(s) x {self.passes} pass(es)) is larger than the "
            f"{total:,} training samples: every epoch would be one update on {total:,}"
        )

    def epoch_samples(self, total: int, max_steps: int | None = None) -> int:
        """Samples an epoch trains on over all ranks: the split, or what a cap leaves."""
        if max_steps and max_steps < self.steps(total):
            return min(total, max_steps * self.per_step)
        return total
