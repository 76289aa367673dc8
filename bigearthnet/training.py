"""Data-parallel training of a fixed-size world: every rank one replica and its own part of
the data, gradients averaged every step (:mod:`bigearthnet.replica`), the one loop of
:mod:`bigearthnet.loop`, rank 0 writing the run's outputs (:mod:`bigearthnet.run_outputs`).

Per epoch: the steps, then BatchNorm statistics averaged over ranks, validation over all
ranks from summed TP/FP/FN counts, and rank 0 writes the history row, the latest checkpoint
(and the best by validation micro-F1), TensorBoard scalars and ``efficiency.json``. A run
folder with checkpoints resumes: model, optimizer (so the LR schedule position), epoch, step
and history all continue. A stop requested by Slurm's warning is voted on in the step's
allreduce: every rank stops after the same step, rank 0 checkpoints, and
:class:`~bigearthnet.errors.RequeueRequested` tells the driver to exit 3.

:class:`EpochEnd` is what fixed-size and elastic training (:mod:`bigearthnet.elastic`) share
after the steps of an epoch.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import tensorflow as tf

from bigearthnet import distributed
from bigearthnet.batching import RankPartition
from bigearthnet.checkpoints import CheckpointRecord, CheckpointWriteError
from bigearthnet.config import TrainConfig
from bigearthnet.data import (
    SAMPLE_BYTES,
    RankData,
    band_stats,
    cache_problem,
    memory_available,
)
from bigearthnet.efficiency import efficiency_line, efficiency_report
from bigearthnet.errors import ConfigError, InputError, RequeueRequested, RunFailed
from bigearthnet.gns import noise_report, verdict
from bigearthnet.history import HistoryRow
from bigearthnet.loader import (
    CacheChoice,
    accelerator,
    accelerator_free_bytes,
    choose_cache,
    loader_threads,
)
from bigearthnet.loop import EpochOutcome, TrainingError, train_epoch, validate
from bigearthnet.precise_bn import per_rank, sample_positions
from bigearthnet.replica import Replica
from bigearthnet.run_outputs import RunOutputs
from bigearthnet.schedules import LRSchedule
from bigearthnet.shards import IMAGE_SHAPE, Manifest, ShardError, read_manifest

__all__ = [
    "EpochEnd",
    "RequeueRequested",
    "Trainer",
    "TrainingError",
    "make_schedule",
    "precise_bn_batches",
]
log = distributed.log
SPLITS_USED = ("train", "val")  # what training reads (test: the final evaluation)


def make_schedule(cfg: TrainConfig, *, world_size: int, updates_per_epoch: int) -> LRSchedule:
    """The LR schedule of ``cfg`` for a world of ``world_size`` ranks: linear scaling, or
    with --lr-scaling adascale the base LR's schedule (the replica multiplies it by the
    gain it measures)."""
    return LRSchedule(
        base_lr=cfg.lr,
        world_size=1 if cfg.lr_scaling == "adascale" else world_size,
        steps_per_epoch=updates_per_epoch,
        total_epochs=cfg.epochs,
        warmup_epochs=cfg.effective_warmup_epochs,
        kind=cfg.schedule,
        min_lr=cfg.min_lr,
        step_epochs=tuple(cfg.step_epochs) if cfg.step_epochs else None,
        gamma=cfg.gamma,
    )


def choose_rank_cache(cfg: TrainConfig, *, samples_per_rank: int) -> CacheChoice:
    """Where this rank's images live for the run (``--cache``), logged with the reason;
    ConfigError when the cache asked for cannot be had."""
    device = accelerator()
    choice = choose_cache(
        cfg.cache,
        part_bytes=samples_per_rank * SAMPLE_BYTES,
        host_problem=cache_problem(samples_per_rank, distributed.local_size(), memory_available()),
        device=device,
        device_free=accelerator_free_bytes() if device else None,
    )
    level = logging.WARNING if choice.fell_back else logging.INFO
    log.log(level, "cache: %s on %s (%s)", choice.kind, choice.device, choice.reason)
    return choice


def open_splits(
    cfg: TrainConfig, manifest: Manifest, *, rank: int, size: int, cache: CacheChoice
) -> tuple[RankData, RankData]:
    """This rank's part of the train and val splits (``size`` 1: the whole splits)."""
    threads = loader_threads(cfg.loader_threads, ranks_on_node=distributed.local_size())
    train, val = (
        RankData(
            cfg.data,
            manifest,
            split,
            labels=cfg.labels,
            rank=rank,
            size=size,
            cache=cache.kind,
            device=cache.device,
            threads=threads,
            verify=cfg.verify_data,
        )
        for split in SPLITS_USED
    )
    return train, val


class EpochEnd:
    """After an epoch's steps: BatchNorm statistics, validation, the history row, rank 0's
    outputs and the efficiency report - the same for fixed-size and elastic runs."""

    def __init__(self, cfg: TrainConfig, replica: Replica, outputs: RunOutputs | None) -> None:
        self.cfg, self.replica, self.outputs = cfg, replica, outputs
        self._batchnorm: dict[str, float] = {}  # this epoch's BatchNorm statistics: cost
        self.stop_voted = False  # a stop request reached some rank by the end of validation

    def finish(
        self,
        *,
        epoch: int,
        outcome: EpochOutcome,
        val_batches: Iterable[tuple],
        bn_batches: Iterable[tuple],
        started: float,
        history: list[HistoryRow],
        steps_per_epoch: int,
        global_batch: int,
    ) -> HistoryRow:
        """Collective: BatchNorm statistics (precise BN from ``bn_batches``, this rank's
        share of training batches, else the moving averages averaged over ranks), then
        validate ``epoch`` (0-based) and save it; returns its history row."""
        bn_started = time.perf_counter()
        if self.cfg.precise_bn_samples:
            bn_samples = self.replica.recompute_batchnorm(bn_batches)
        else:
            self.replica.average_batchnorm_statistics()
            bn_samples = 0
        self._batchnorm = {"samples": bn_samples, "seconds": time.perf_counter() - bn_started}
        val = validate(self.replica, val_batches, threshold=self.cfg.threshold)
        self.stop_voted = val.stop
        seconds = time.perf_counter() - started
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
            samples_per_s=total_samples / busy,
            data_wait_fraction=times.wait / busy,
            seconds=seconds,
            world_size=distributed.size(),
            global_batch=global_batch,
        )
        row = self._with_noise_scale(row)
        history.append(row)
        self.replica.epoch.assign(epoch + 1)
        self.replica.step.assign(0)
        error = None
        if self.outputs is not None:
            record = self.record(
                epochs_done=epoch + 1,
                steps_per_epoch=steps_per_epoch,
                val_micro_f1=row.val_micro_f1,
                val_macro_f1=row.val_macro_f1,
            )
            try:
                self.outputs.save_epoch(self.replica.trackables, record, history)
                self.outputs.write_noise_points(self.replica.noise.take_points())
            except CheckpointWriteError as err:  # disk full: every rank stops here
                error = err
        distributed.raise_if_any_failed(error, "saving the epoch", others=RunFailed)
        self._efficiency(epoch, outcome, seconds)
        return row

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

    def record(self, *, epochs_done: int, steps_per_epoch: int, **extra) -> CheckpointRecord:
        """The checkpoint pointer of the replica's current state."""
        return CheckpointRecord(
            epoch=epochs_done,
            model=self.cfg.model,
            num_classes=self.replica.num_classes,
            steps_per_epoch=steps_per_epoch,
            world_size=distributed.size(),
            input_shape=IMAGE_SHAPE,
            **extra,
        )

    def _efficiency(self, epoch: int, outcome: EpochOutcome, seconds: float) -> None:
        """Per-rank time split gathered to rank 0 -> RUN/efficiency.json (POP metrics)."""
        t = outcome.times
        mine = np.array([[t.step, t.wait, t.samples, seconds, t.compute, t.comm]])
        table = distributed.allgather(mine, name="efficiency")
        if self.outputs is not None:
            report = efficiency_report(table, epoch + 1, measured_comm=self.cfg.comm_timing)
            report["gradient_noise"] = noise_report(self.replica.noise, enabled=self.cfg.gns)
            report["precise_bn"] = self._batchnorm  # samples 0: the moving averages
            self.outputs.write_efficiency(report)
            log.info("%s", efficiency_line(report))


def precise_bn_batches(
    data: RankData, cfg: TrainConfig, *, epoch: int, rank: int, size: int
) -> Iterator[tuple]:
    """This rank's share of ``--precise-bn-samples`` training samples, in batches: from its
    own part (fixed-size runs: ``rank`` 0 of ``size`` 1 of that part) or, elastic, its deal
    of the whole split."""
    share = per_rank(cfg.precise_bn_samples, size=distributed.size())
    positions = sample_positions(
        len(data), per_rank=share, rank=rank, size=size, seed=cfg.seed, epoch=epoch
    )
    for start in range(0, len(positions), cfg.batch_size):
        yield data.take(positions[start : start + cfg.batch_size])


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


class Trainer:
    """Fixed-size training: set up data, replica and outputs; :meth:`run` trains."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        rank, size = distributed.rank(), distributed.size()
        self.manifest = read_manifest(cfg.data)
        error = None
        try:
            part = sum(math.ceil(self.manifest.count(s) / size) for s in SPLITS_USED)
            cache = choose_rank_cache(cfg, samples_per_rank=part)
            self.train_data, self.val_data = open_splits(
                cfg, self.manifest, rank=rank, size=size, cache=cache
            )
        except (ConfigError, ShardError, OSError) as err:
            error = err
        distributed.raise_if_any_failed(error, "loading data")
        self.plan = RankPartition(
            self.train_data,
            batch_size=cfg.batch_size,
            world_size=size,
            seed=cfg.seed,
            passes_per_update=cfg.backward_passes_per_step,
            max_steps=cfg.max_steps_per_epoch,
        )
        self.steps = self.plan.steps
        schedule = make_schedule(
            cfg, world_size=size, updates_per_epoch=self.plan.updates_per_epoch
        )
        mean, std = band_stats(self.manifest)
        self.replica = Replica(
            cfg, num_classes=cfg.labels, band_mean=mean, band_std=std, schedule=schedule
        )
        self.outputs = RunOutputs(cfg, self.manifest.data_id) if distributed.is_root() else None
        self.epoch_end = EpochEnd(cfg, self.replica, self.outputs)

    @property
    def model(self) -> tf.keras.Model:
        return self.replica.model

    def run(self) -> HistoryRow | None:
        """Train to ``cfg.epochs`` (resuming if possible); returns the last history row.
        A rank that ends mid-run ends the others with :class:`~bigearthnet.distributed.
        PeerLost` (one line each, exit 1), not a traceback or a hang."""
        try:
            return self._run()
        except tf.errors.OpError as err:
            lost = distributed.peer_lost(err)
            if lost is None:
                raise
            raise lost from None

    def _run(self) -> HistoryRow | None:
        start_epoch, start_step, losses_before = self._resume_or_start()
        history = self.outputs.history(through_epoch=start_epoch) if self.outputs else []
        row = history[-1] if history else None
        global_batch = self.cfg.batch_size * distributed.size() * self.cfg.backward_passes_per_step
        for epoch in range(start_epoch, self.cfg.epochs):
            started = time.perf_counter()
            first = start_step if epoch == start_epoch else 0
            with progress_bar(self.cfg, epoch=epoch, total=self.steps, done=first) as bar:
                outcome = train_epoch(
                    self.replica,
                    self.plan.batches(epoch, start_step=first),
                    epoch=epoch,
                    seed=self.cfg.seed,
                    losses_before=losses_before if first else None,
                    progress=bar,
                )
            if outcome.stopped_at is not None:
                self._stop_in_epoch(epoch, outcome)
            row = self.epoch_end.finish(
                epoch=epoch,
                outcome=outcome,
                val_batches=self._val_batches(),
                bn_batches=precise_bn_batches(
                    self.train_data, self.cfg, epoch=epoch, rank=0, size=1
                ),
                started=started,
                history=history,
                steps_per_epoch=self.steps,
                global_batch=global_batch,
            )
            # A stop voted on the last step or during validation: the epoch is saved, stop
            # before the next one (after the last epoch the final evaluation votes again).
            if (outcome.stop_after or self.epoch_end.stop_voted) and epoch + 1 < self.cfg.epochs:
                distributed.barrier()  # rank 0's epoch checkpoint is on disk
                raise RequeueRequested(f"stopped after epoch {epoch + 1}; rerun resumes")
            if reached_target(self.cfg, row):
                break
        return row

    def _val_batches(self) -> Iterable[tuple]:
        """This rank's validation batches (its fixed part of the split)."""
        steps = math.ceil(len(self.val_data) / self.cfg.batch_size)
        if not steps:
            return []
        return self.val_data.batches(steps, epoch=0, seed=0, shuffle=False)

    def _stop_in_epoch(self, epoch: int, outcome: EpochOutcome) -> None:
        """Every rank agreed to stop after ``outcome.stopped_at`` steps: save, raise."""
        done = outcome.stopped_at or 0
        self.replica.step.assign(done)
        if self.outputs is not None:
            # The epoch's losses so far, so that the resumed run reports the whole epoch's mean.
            record = self.epoch_end.record(
                epochs_done=epoch,
                step=done,
                steps_per_epoch=self.steps,
                loss_sum=float(np.sum(outcome.losses)),
                loss_steps=len(outcome.losses),
            )
            self.outputs.save_mid_epoch(self.replica.trackables, record)
            log.info("checkpointed epoch %d step %d/%d", epoch + 1, done, self.steps)
        distributed.barrier()  # nobody exits before rank 0's checkpoint is on disk
        raise RequeueRequested(f"stopped at epoch {epoch + 1} step {done}; rerun resumes")

    def _resume_or_start(self) -> tuple[int, int, list[float]]:
        """Rank 0 picks the checkpoint (if any); every rank ends with rank 0's state.
        Returns (epoch, step in it, the losses of the steps done)."""
        record, error = None, None
        try:
            if self.outputs is not None:
                self.outputs.prepare()
                record = self.outputs.resume(self.replica.trackables)
        except (InputError, OSError) as err:  # locked, incompatible, unreadable checkpoint
            error = err
        distributed.raise_if_any_failed(error, "preparing the run folder")
        record = distributed.broadcast_object(record, name="resume_record")
        self.replica.broadcast_state()
        start, step = int(self.replica.epoch.numpy()), int(self.replica.step.numpy())
        losses: list[float] = []
        if record is None:
            return start, step, losses
        if step and record.loss_steps:
            losses = [float(record.loss_sum or 0.0) / record.loss_steps] * record.loss_steps
        if step and record.steps_per_epoch != self.steps:
            # Another world size or batch size: the saved position in the epoch means
            # nothing in the new partition, so that epoch starts over.
            log.warning(
                "steps per epoch changed (%s -> %d): epoch %d starts over",
                record.steps_per_epoch,
                self.steps,
                start + 1,
            )
            step, losses = 0, []
        log.info(
            "resumed from %s at epoch %d step %d (of %d epochs)",
            record.folder,
            start,
            step,
            self.cfg.epochs,
        )
        return start, step, losses


class progress_bar:
    """A tqdm bar of an epoch's steps on rank 0 (``--progress``); a callable taking each
    step's loss, or None elsewhere."""

    def __init__(self, cfg: TrainConfig, *, epoch: int, total: int, done: int) -> None:
        self._bar = None
        if cfg.progress and distributed.is_root():
            from tqdm import tqdm

            self._bar = tqdm(
                total=total,
                initial=done,
                desc=f"epoch {epoch + 1}/{cfg.epochs}",
                unit="step",
                dynamic_ncols=True,
                leave=False,
            )

    def __enter__(self) -> Callable[[float], None] | None:
        return self._update if self._bar is not None else None

    def _update(self, loss: float) -> None:
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(loss=f"{loss:.4f}", refresh=False)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
