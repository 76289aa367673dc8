"""After an epoch's steps, collectively: BatchNorm statistics, validation over all ranks, the
history row with the gradient noise scale, rank 0's outputs (history, best and latest
checkpoints, TensorBoard) and the efficiency report. Fixed-size and elastic runs run the
same code, through the epoch driver (:mod:`bigearthnet.training.driver`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bigearthnet.core import distributed
from bigearthnet.core.config import TrainConfig
from bigearthnet.core.errors import RunFailed
from bigearthnet.formats.checkpoints import CheckpointRecord, CheckpointWriteError
from bigearthnet.formats.history import HistoryRow
from bigearthnet.formats.position import Position
from bigearthnet.training.efficiency import efficiency_line, efficiency_report
from bigearthnet.training.gns import noise_report, verdict
from bigearthnet.training.loop import EpochOutcome, Validation, validate
from bigearthnet.training.outputs import RunOutputs
from bigearthnet.training.replica import Replica
from bigearthnet.training.selection import validations_since_best
from bigearthnet.training.sources import EpochSource

log = distributed.log


@dataclass(frozen=True)
class EpochSummary:
    """What an epoch ended with, the same on every rank."""

    row: HistoryRow
    stop_voted: bool  # a stop request reached some rank by the end of validation
    since_best: int = 0  # validations since --select-metric last improved (rank 0's count)


class EpochEnd:
    """The epoch end of one run; ``outputs`` answers rank 0's writer (None elsewhere; which
    process is rank 0 may change with an elastic resize)."""

    def __init__(
        self,
        cfg: TrainConfig,
        replica: Replica,
        source: EpochSource,
        outputs: Callable[[], RunOutputs | None],
    ) -> None:
        self.cfg, self.replica, self.source, self.outputs = cfg, replica, source, outputs

    def finish(self, outcome: EpochOutcome, *, started: float) -> EpochSummary:
        """Collective: BatchNorm statistics, then validate the epoch of ``outcome`` and save
        it as done."""
        epoch = outcome.position.epoch
        batchnorm = self._batchnorm_statistics(epoch)
        val = validate(self.replica, self.source.val_batches(), threshold=self.cfg.threshold)
        seconds = time.perf_counter() - started
        row = self._history_row(epoch, outcome, val, seconds)
        since_best = self._save(outcome.position.next_epoch(), row)
        self._efficiency(epoch, outcome, seconds, batchnorm)
        return EpochSummary(row=row, stop_voted=val.stop, since_best=since_best)

    def record(
        self,
        position: Position,
        *,
        row: HistoryRow | None = None,
    ) -> CheckpointRecord:
        """The checkpoint pointer of the replica's state at ``position`` (with the epoch's
        validation scores at an epoch's end)."""
        return CheckpointRecord(
            model=self.cfg.model,
            num_classes=self.replica.num_classes,
            position=position,
            order=self.source.order,
            steps_per_epoch=self.source.steps_per_epoch(),
            world_size=distributed.size(),
            input_shape=self.replica.input_shape,
            bands=self.replica.bands,
            inputs=self.replica.inputs,
            dense_head=self.replica.dense_head,
            val_micro_f1=None if row is None else row.val_micro_f1,
            val_macro_f1=None if row is None else row.val_macro_f1,
            val_micro_map=None if row is None else row.val_micro_map,
            val_macro_map=None if row is None else row.val_macro_map,
        )

    def _batchnorm_statistics(self, epoch: int) -> dict[str, float]:
        """Precise BN from this rank's share of training samples, else the moving averages
        averaged over ranks; what it took (samples 0: the moving averages)."""
        bn_started = time.perf_counter()
        if self.cfg.freeze_backbone:  # a frozen backbone keeps its statistics too
            return {"samples": 0, "seconds": 0.0}
        if self.cfg.precise_bn_samples:
            samples = self.replica.recompute_batchnorm(self.source.bn_batches(epoch))
        else:
            self.replica.average_batchnorm_statistics()
            samples = 0
        return {"samples": samples, "seconds": time.perf_counter() - bn_started}

    def _history_row(
        self, epoch: int, outcome: EpochOutcome, val: Validation, seconds: float
    ) -> HistoryRow:
        times = outcome.times
        total_samples = distributed.allreduce_sum(np.array([times.samples]), "samples")[0]
        busy = max(times.wait + times.step, 1e-9)
        row = HistoryRow(
            epoch=epoch + 1,
            lr=self.replica.lr_at_epoch(epoch + 1),
            loss=outcome.mean_loss,
            val_loss=val.loss,
            val_micro_f1=val.micro_f1,
            val_macro_f1=val.macro_f1,
            val_micro_map=val.micro_map,
            val_macro_map=val.macro_map,
            samples_per_s=total_samples / busy,
            data_wait_fraction=times.wait / busy,
            seconds=seconds,
            world_size=distributed.size(),
            global_batch=self.source.global_batch(),
            # optimizer updates: the epoch's steps in accumulation groups (the plan's rule)
            steps=self.cfg.batch_plan(distributed.size()).updates(outcome.position.loss_steps),
            samples=outcome.position.consumed,
            planned_epochs=self.cfg.epochs,
        )
        pixels = val.pixels
        if pixels is not None:
            row = dataclasses.replace(row, val_pixel_accuracy=pixels.overall_accuracy,
                                      val_pixel_miou=pixels.miou)  # fmt: skip
        return self._with_noise_scale(row)

    def _with_noise_scale(self, row: HistoryRow) -> HistoryRow:
        """The row with the run's gradient noise scale so far, logged beside the batch (the
        estimate is the same on every rank: it comes from allreduced norms)."""
        if not self.cfg.gns:
            return row
        estimate = self.replica.noise.estimate()
        if estimate is not None:
            row = dataclasses.replace(
                row,
                gns_b_simple=estimate.b_simple,
                gns_grad_sq=estimate.grad_sq,
                gns_trace=estimate.trace,
            )
        log.info("%s", verdict(row.gns_b_simple, row.global_batch or 0))
        return row

    def _save(self, done: Position, row: HistoryRow) -> int:
        """Rank 0 writes the history (the row first) and the epoch's checkpoints; a failed
        write (disk full) stops every rank here. Returns, on every rank, the validations
        since --select-metric last improved (from rank 0's whole history: a resumed or
        resized run counts as if it had never stopped)."""
        error, since_best = None, 0
        outputs = self.outputs()
        if outputs is not None:
            history = outputs.history(through_epoch=row.epoch - 1) + [row]
            since_best = validations_since_best(history, self.cfg.select_metric)
            try:
                outputs.save_epoch(self.replica.trackables, self.record(done, row=row), history)
                outputs.write_noise_points(self.replica.noise.take_points())
            except CheckpointWriteError as err:
                error = err
        distributed.raise_if_any_failed(error, "saving the epoch", others=RunFailed)
        if not self.cfg.early_stopping_patience:
            return 0
        return int(distributed.broadcast_object(since_best, name="since_best"))

    def _efficiency(
        self, epoch: int, outcome: EpochOutcome, seconds: float, batchnorm: dict[str, float]
    ) -> None:
        """Per-rank time split gathered to rank 0 -> RUN/efficiency.json (POP metrics)."""
        t = outcome.times
        mine = np.array([[t.step, t.wait, t.samples, seconds, t.compute, t.comm]])
        table = distributed.allgather(mine, name="efficiency")
        outputs = self.outputs()
        if outputs is not None:
            report = dataclasses.replace(
                efficiency_report(table, epoch + 1, measured_comm=self.cfg.comm_timing),
                gradient_noise=noise_report(self.replica.noise, enabled=self.cfg.gns),
                precise_bn=batchnorm,
            )
            outputs.write_efficiency(report)
            log.info("%s", efficiency_line(report))
