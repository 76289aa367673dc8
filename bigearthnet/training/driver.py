"""The one epoch driver: the loop over epochs that fixed-size and elastic training both run.

Given a replica, an epoch source (:mod:`bigearthnet.training.sources`: the rank partition,
or the elastic global order) and a :class:`~bigearthnet.formats.position.Position`, it
runs epochs of :func:`~bigearthnet.training.loop.train_epoch` and
:class:`~bigearthnet.training.epoch_end.EpochEnd` until ``--epochs``, ``--target-f1`` or
``--early-stopping-patience`` or stop votes end it. Per epoch:

* the steps, from the position (a resumed epoch continues where it stopped);
* a stop every rank agreed on inside the epoch: rank 0 checkpoints the position, every rank
  raises :class:`~bigearthnet.core.errors.RequeueRequested` (exit 3);
* the epoch end (BatchNorm, validation, history row, checkpoints, efficiency);
* a stop voted on the last step or during validation: the epoch is saved, exit 3 before the
  next one; ``--target-f1`` reached, or ``--select-metric`` not improved for
  ``--early-stopping-patience`` validations: done.

What a kind of run adds goes through :class:`RunHooks`: elastic training commits its state
after steps and epochs (:mod:`bigearthnet.training.elastic`); fixed-size training adds
nothing. Either way a rank that ends mid-run ends the others with
:class:`~bigearthnet.core.distributed.PeerLost` (one line each, exit 1).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from bigearthnet.core import distributed
from bigearthnet.core.config import TrainConfig
from bigearthnet.core.errors import RequeueRequested
from bigearthnet.core.progress import progress_bar
from bigearthnet.formats.history import HistoryRow
from bigearthnet.formats.position import Position
from bigearthnet.formats.run_status import RunStatus
from bigearthnet.training.epoch_end import EpochEnd
from bigearthnet.training.loop import EpochOutcome, train_epoch
from bigearthnet.training.outputs import RunOutputs
from bigearthnet.training.replica import Replica, StepResult
from bigearthnet.training.sources import EpochSource

log = distributed.log


class RunHooks:
    """What a kind of run does around the driver's loop; fixed-size runs add nothing."""

    def after_step(self, position: Position, result: StepResult) -> None:
        """After every step, with the position it reached."""

    def after_epoch(self, position: Position, *, ended: bool) -> None:
        """After an epoch was saved, with the position of the next one's start; ``ended``:
        the run is over (``--target-f1`` reached) though epochs remain."""


class EpochDriver:
    """Runs the epochs of one training, whatever cuts them."""

    def __init__(
        self,
        cfg: TrainConfig,
        replica: Replica,
        source: EpochSource,
        outputs: Callable[[], RunOutputs | None],
        hooks: RunHooks | None = None,
    ) -> None:
        self.cfg, self.replica, self.source, self.outputs = cfg, replica, source, outputs
        self.hooks = hooks or RunHooks()
        self.epoch_end = EpochEnd(cfg, replica, source, outputs)

    def run(self, position: Position) -> HistoryRow | None:
        """Train from ``position`` to the end; the last epoch's history row (None when
        there was no epoch left to train)."""
        row = None
        while position.epoch < self.cfg.epochs:
            started = time.perf_counter()
            outcome = self._steps(position)
            if outcome.stopped:
                self.stop_inside_epoch(outcome.position)
            summary = self.epoch_end.finish(outcome, started=started)
            row, position = summary.row, outcome.position.next_epoch()
            ending = run_ending(self.cfg, row, summary.since_best)
            if ending is not None:  # recorded before the hook, whose commit may reset a world
                self.write_status(*ending, epoch=position.epoch)
            self.hooks.after_epoch(position, ended=ending is not None)
            if ending is not None:
                return row
            if (outcome.stop_after or summary.stop_voted) and position.epoch < self.cfg.epochs:
                distributed.barrier()  # rank 0's epoch checkpoint is on disk
                raise RequeueRequested(f"stopped after epoch {position.epoch}; rerun resumes")
        self.write_status("finished", f"{self.cfg.epochs} epochs done", epoch=position.epoch)
        return row

    def write_status(self, state: str, reason: str, *, epoch: int) -> None:
        """Rank 0 records how the run ended (``RUN/status.json``)."""
        outputs = self.outputs()
        if outputs is not None:
            outputs.write_status(RunStatus(state, epoch, reason))

    def _steps(self, position: Position) -> EpochOutcome:
        steps = self.source.steps_per_epoch()
        enabled = self.cfg.progress and distributed.is_root()
        desc = f"epoch {position.epoch + 1}/{self.cfg.epochs}"
        with progress_bar(
            steps, desc=desc, unit="step", enabled=enabled, initial=position.step, leave=False
        ) as bar:

            def advance(loss: float) -> None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", refresh=False)

            return train_epoch(
                self.replica,
                self.source.batches(position),
                position=position,
                seed=self.cfg.seed,
                progress=advance,
                after_step=self.hooks.after_step,
            )

    def stop_inside_epoch(self, position: Position) -> None:
        """Every rank agreed to stop at ``position``: rank 0 saves it, then all raise."""
        self.save_position(position)
        distributed.barrier()  # nobody exits before rank 0's checkpoint is on disk
        raise RequeueRequested(
            f"stopped in epoch {position.epoch + 1} after step {position.step}; rerun resumes"
        )

    def save_position(self, position: Position) -> None:
        """Rank 0 checkpoints ``position`` inside its epoch (a no-op on other ranks, and at
        an epoch's start, whose checkpoint the previous epoch end wrote)."""
        outputs = self.outputs()
        if outputs is None or not position.mid_epoch:
            return
        outputs.save_mid_epoch(self.replica.trackables, self.epoch_end.record(position))
        log.info(
            "checkpointed epoch %d at step %d (%d samples)",
            position.epoch + 1,
            position.step,
            position.consumed,
        )


def run_ending(cfg: TrainConfig, row: HistoryRow, since_best: int) -> tuple[str, str] | None:
    """(state, reason) when the run ends before ``--epochs`` after this row: the target
    reached, or no improvement for ``--early-stopping-patience`` validations; else None."""
    if reached_target(cfg, row):
        return "target", f"validation micro-F1 reached --target-f1 {cfg.target_f1:g}"
    patience = cfg.early_stopping_patience
    if patience and since_best >= patience:
        reason = (
            f"{cfg.select_metric} did not improve for {since_best} validations "
            f"(--early-stopping-patience {patience}); best: epoch {row.epoch - since_best}"
        )
        log.info("early stop after epoch %d: %s", row.epoch, reason)
        return "early_stop", reason
    return None


def reached_target(cfg: TrainConfig, row: HistoryRow) -> bool:
    """Whether ``--target-f1`` is met (the same on every rank: the scores come from
    allreduced counts), logged once when it is."""
    if cfg.target_f1 is None or row.val_micro_f1 < cfg.target_f1:
        return False
    log.info(
        "validation micro-F1 %.4f reached --target-f1 %g after epoch %d: done",
        row.val_micro_f1,
        cfg.target_f1,
        row.epoch,
    )
    return True
