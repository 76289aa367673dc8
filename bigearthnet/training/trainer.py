"""Data-parallel training of a fixed-size world: every rank one replica and its own part of
the data (:class:`~bigearthnet.training.sources.PartitionSource`), gradients averaged every
step (:mod:`bigearthnet.training.replica`), the epochs run by the one epoch driver
(:mod:`bigearthnet.training.driver`), rank 0 writing the run's outputs
(:mod:`bigearthnet.training.outputs`).

A run folder with checkpoints resumes: rank 0 restores the newest readable checkpoint,
every rank receives its weights by broadcast and its :class:`~bigearthnet.formats.
position.Position` (epoch, step, losses so far), so model, optimizer (the LR schedule
position), epoch, step and history all continue. A stop requested by Slurm's warning is
voted on in the step's allreduce: every rank stops after the same step, rank 0 checkpoints,
and :class:`~bigearthnet.core.errors.RequeueRequested` tells the command to exit 3.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from bigearthnet.core import distributed
from bigearthnet.core.config import TrainConfig
from bigearthnet.core.dense_head import with_pixel_head
from bigearthnet.core.errors import InputError
from bigearthnet.data.normalization import model_inputs
from bigearthnet.formats.checkpoints import CheckpointRecord
from bigearthnet.formats.history import HistoryRow
from bigearthnet.formats.manifest import Manifest, read_manifest
from bigearthnet.formats.position import Position
from bigearthnet.training.driver import EpochDriver
from bigearthnet.training.initial import initial_weights, keep_start
from bigearthnet.training.outputs import RunOutputs
from bigearthnet.training.replica import Replica
from bigearthnet.training.schedules import LRSchedule
from bigearthnet.training.sources import EpochSource, PartitionSource

__all__ = ["Trainer", "build_replica", "length_note", "make_schedule"]
log = distributed.log


def make_schedule(cfg: TrainConfig, *, world_size: int, updates_per_epoch: int) -> LRSchedule:
    """The LR schedule of ``cfg`` for a world of ``world_size`` ranks: linear scaling by the
    batch plan's scale (ranks x backward passes: the global batch over one rank's), or with
    --lr-scaling adascale the base LR's schedule (the replica multiplies it by the gain it
    measures). ``--warmup-steps`` is turned into epochs of this world's updates."""
    warmup = cfg.effective_warmup_epochs
    if cfg.warmup_steps is not None:
        warmup = min(cfg.warmup_steps / max(updates_per_epoch, 1), float(cfg.epochs))
    return LRSchedule(
        base_lr=cfg.lr,
        world_size=1 if cfg.lr_scaling == "adascale" else cfg.batch_plan(world_size).scale,
        steps_per_epoch=updates_per_epoch,
        total_epochs=cfg.epochs,
        warmup_epochs=warmup,
        kind=cfg.schedule,
        min_lr=cfg.min_lr,
        step_epochs=tuple(cfg.step_epochs) if cfg.step_epochs else None,
        gamma=cfg.gamma,
    )


def length_note(
    cfg: TrainConfig, past: TrainConfig | None, position: Position, source: EpochSource
) -> str | None:
    """What a resume with another ``--epochs`` than the run's so far does (None when the
    length is the run's): it trains on, and its LR schedule is refitted to the new count, so
    the LR at this point is not the one the old length would have given (a finished cosine
    run extended rises again from --min-lr: a warm restart)."""
    if past is None or past.epochs == cfg.epochs:
        return None
    sizes = {"world_size": distributed.size(), "updates_per_epoch": source.updates_per_epoch()}
    before = make_schedule(dataclasses.replace(cfg, epochs=past.epochs), **sizes)
    now = make_schedule(cfg, **sizes)
    at = position.epoch + position.step / max(source.steps_per_epoch(), 1)
    return (
        f"--epochs {cfg.epochs}, was {past.epochs}: the run trains on after {at:g} epochs "
        f"(history.csv's planned_epochs keeps each epoch's); its {cfg.schedule} LR schedule "
        f"is refitted to {cfg.epochs} epochs: the LR here is {now.lr_at_epoch(at):.4g}, where "
        f"the {past.epochs}-epoch schedule gave {before.lr_at_epoch(at):.4g}"
    )


def build_replica(cfg: TrainConfig, manifest: Manifest, source: EpochSource) -> Replica:
    """This rank's replica for the data of ``manifest`` and the world of the moment, from
    ``--init-weights`` (resolved here, once) or random weights; its inputs normalised as
    those weights expect, else by the shards' statistics (a resumed run takes its
    checkpoint's record instead, once restored)."""
    schedule = make_schedule(
        cfg, world_size=distributed.size(), updates_per_epoch=source.updates_per_epoch()
    )
    start = initial_weights(cfg, manifest)
    inputs = start.inputs if start is not None else model_inputs(manifest, cfg.labels)
    return Replica(cfg, inputs=inputs, schedule=schedule, start=start)


class Trainer:
    """Fixed-size training: set up data, replica and outputs; :meth:`run` trains."""

    def __init__(self, cfg: TrainConfig, command: list[str] | None = None) -> None:
        self.manifest = read_manifest(cfg.data)
        self.cfg = cfg = with_pixel_head(keep_start(cfg), self.manifest.map_count("train"))
        self.source = PartitionSource(cfg, self.manifest)
        self.replica = build_replica(cfg, self.manifest, self.source)
        root = distributed.is_root()
        self.outputs = (
            RunOutputs(cfg, self.manifest.data_id, command, self.manifest.bands) if root else None
        )
        self.driver = EpochDriver(cfg, self.replica, self.source, lambda: self.outputs)

    @property
    def model(self) -> tf.keras.Model:
        return self.replica.model

    def run(self) -> HistoryRow | None:
        """Train to ``cfg.epochs`` (resuming if possible); returns the last history row."""
        try:
            return self.driver.run(self._resume_or_start())
        except tf.errors.OpError as err:
            lost = distributed.peer_lost(err)
            if lost is None:
                raise
            raise lost from None

    def _resume_or_start(self) -> Position:
        """Rank 0 picks the checkpoint (if any); every rank ends with rank 0's state and
        the position training continues at."""
        record: CheckpointRecord | None = None
        error = None
        try:
            if self.outputs is not None:
                self.outputs.prepare()
                record = self.outputs.resume(self.replica.trackables)
        except (InputError, OSError) as err:  # locked, incompatible, unreadable checkpoint
            error = err
        distributed.raise_if_any_failed(error, "preparing the run folder")
        record = distributed.broadcast_object(record, name="resume_record")
        self.replica.broadcast_state()
        if record is not None and record.inputs is not None:
            self.replica.use_inputs(record.inputs)
        position = self.source.resume_at(record)
        if record is not None:
            log.info(
                "resumed from %s at epoch %d step %d (of %d epochs)",
                record.folder,
                position.epoch,
                position.step,
                self.cfg.epochs,
            )
            if self.outputs is not None:
                note = length_note(self.cfg, self.outputs.past, position, self.source)
                if note:
                    log.warning("%s", note)
        return position
