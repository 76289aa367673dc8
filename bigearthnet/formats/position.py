"""Where a training stands: the one record that the replica's driver, the checkpoint's
pointer (:mod:`bigearthnet.formats.checkpoints`) and the elastic state all carry."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Position:
    """Where training stands: the epoch it is in (= epochs completed) and, inside it, the
    steps taken, the samples consumed over all ranks and their losses (so a resumed epoch
    reports its whole mean). The replica's driver, the checkpoint and the elastic state all
    carry this one record."""

    epoch: int = 0
    step: int = 0
    consumed: int = 0
    loss_sum: float = 0.0
    loss_steps: int = 0

    @property
    def mid_epoch(self) -> bool:
        return self.step > 0 or self.consumed > 0

    @property
    def mean_loss(self) -> float:
        return self.loss_sum / self.loss_steps if self.loss_steps else float("nan")

    def after_step(self, *, taken: int, loss: float) -> Position:
        """The position after one more step of ``taken`` samples (over all ranks)."""
        return dataclasses.replace(
            self,
            step=self.step + 1,
            consumed=self.consumed + taken,
            loss_sum=self.loss_sum + loss,
            loss_steps=self.loss_steps + 1,
        )

    def epoch_start(self) -> Position:
        """The start of this position's epoch (a position that cannot be mapped)."""
        return Position(epoch=self.epoch)

    def next_epoch(self) -> Position:
        return Position(epoch=self.epoch + 1)

    @classmethod
    def from_record(cls, raw: dict) -> Position:
        """The record's position; pointers of elastic runs written before Position (theirs in
        ``elastic``) still resume."""
        elastic = raw.get("elastic") or {}
        return cls(
            epoch=int(raw.get("epoch", 0)),
            step=int(elastic.get("batch", raw.get("step") or 0)),
            consumed=int(elastic.get("consumed", raw.get("consumed") or 0)),
            loss_sum=float(elastic.get("loss_sum", raw.get("loss_sum") or 0.0)),
            loss_steps=int(elastic.get("loss_steps", raw.get("loss_steps") or 0)),
        )
