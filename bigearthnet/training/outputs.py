"""What a training run leaves in its folder, written by rank 0 only.

``RUN/``: ``config.yaml`` (the resolved options), ``checkpoints/`` (latest every epoch, best
by validation micro-F1, mid-epoch ones on a requeue; see :mod:`bigearthnet.formats.checkpoints`),
``history.csv`` (:mod:`bigearthnet.formats.history`), ``efficiency.json``, ``tensorboard/``,
``status.json`` once it ended (:mod:`bigearthnet.formats.run_status`) and, for elastic runs,
``elastic_events.csv``. Every file is written atomically; the history row of an
epoch is written before its checkpoint, so a kill in between leaves a row the resume drops
(it keeps rows up to the checkpoint's epoch) rather than a finished epoch without its row.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import tensorflow as tf

from bigearthnet.core import distributed, recipe, runlock
from bigearthnet.core.config import TrainConfig, load_run_config, save_yaml
from bigearthnet.core.constants import describe_bands
from bigearthnet.core.dense_head import resume_note
from bigearthnet.core.errors import ConfigError, InputError
from bigearthnet.evaluation.report import format_score
from bigearthnet.formats import checkpoints, elastic_log, run_folder
from bigearthnet.formats.checkpoints import CheckpointRecord
from bigearthnet.formats.efficiency import EfficiencyReport, write_efficiency
from bigearthnet.formats.elastic_log import ElasticEvent
from bigearthnet.formats.history import HistoryRow, read_history, write_history
from bigearthnet.formats.run_command import append_command
from bigearthnet.formats.run_status import RunStatus, clear_status, write_status
from bigearthnet.training.gns import NoiseEstimate
from bigearthnet.training.selection import is_new_best

log = logging.getLogger("bigearthnet")  # the ranks' logger (rank 0 alone writes)
# elastic events: "resize" (the world re-formed: old -> new size), "hosts removed"/"hosts
# changed" (discovery's news, before the reset; new_size unknown then).
TENSORBOARD_SCALARS = (
    "lr",
    "loss",
    "val_loss",
    "val_micro_f1",
    "val_macro_f1",
    "val_pixel_accuracy",
    "val_pixel_miou",
    "samples_per_s",
    "data_wait_fraction",
    "seconds",
    "global_batch",
    "gns_b_simple",
    "gns_grad_sq",
    "gns_trace",
)


class RunOutputs:
    """Rank 0's writer of one run folder (the other ranks never call it)."""

    def __init__(
        self,
        cfg: TrainConfig,
        data_id: str,
        command: list[str] | None = None,
        bands: tuple[str, ...] | None = None,
    ) -> None:
        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        self.data_id = data_id  # manifest.Manifest.data_id of --data: in every checkpoint
        self.bands = bands  # the channels of --data (None: not checked)
        self.command = command  # the command line that started this process, if known
        # the options the run in this folder was made with (its config.yaml), once a
        # checkpoint to resume was found; None for a fresh start
        self.past: TrainConfig | None = None
        self._writer: Any = None  # the TensorBoard writer, opened with the first epoch

    def prepare(self) -> None:
        """Lock the folder for this process (RunLocked when another holds it), clear it
        (``--no-resume``). A folder that is not a training run's (a published classifier,
        an export) is refused first (:func:`~bigearthnet.formats.run_folder.
        check_training_folder`)."""
        run_folder.check_training_folder(self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        runlock.acquire(self.run_dir, force_unlock=self.cfg.force_unlock)  # first: one writer
        if not self.cfg.resume:
            checkpoints.clear(self.run_dir)
            # The controller's decisions too: they explain this folder's history, no other.
            for name in (
                run_folder.HISTORY,
                run_folder.EFFICIENCY,
                run_folder.ELASTIC_EVENTS,
                run_folder.ELASTIC_DECISIONS,
                run_folder.COMMANDS,
            ):
                (self.run_dir / name).unlink(missing_ok=True)

    def resume(self, trackables: dict) -> CheckpointRecord | None:
        """Restore the newest readable checkpoint into ``trackables`` (falling back past a
        damaged one); its record, or None when the run starts fresh. The options are saved
        once the checkpoint is accepted: a refused resume leaves RUN/config.yaml as it was."""
        record = None
        if self.cfg.resume:
            record = checkpoints.restore_latest(
                self.run_dir, trackables, check=self._check_compatible
            )
        if record is not None:
            # Read now, not after an epoch has trained: a damaged history stops the start.
            self.history(through_epoch=record.epoch)
        save_yaml(self.cfg, self.run_dir / run_folder.CONFIG)
        if self.command:
            append_command(self.run_dir, self.command, distributed.size())
        clear_status(self.run_dir)  # this run has not ended yet
        return record

    def _check_compatible(self, record: CheckpointRecord) -> None:
        """A run folder cannot switch model or label set and resume, nor its recipe, nor end
        before the epochs it trained, nor - unless ``--allow-new-data`` - the shards it was
        trained on."""
        for key, saved, wanted in (
            ("model", record.model, self.cfg.model),
            ("labels", record.num_classes, self.cfg.labels),
        ):
            if saved != wanted:
                raise ConfigError(
                    f"{self.run_dir}: holds a run with {key}={saved}, not {wanted}; "
                    "use another --run-dir, or --no-resume to start this one over"
                )
        if self.bands is not None and record.bands != self.bands:
            # No flag makes this resumable, and --no-resume would delete the checkpoints.
            raise ConfigError(
                f"{self.run_dir}: checkpoint {record.folder} takes bands "
                f"{describe_bands(record.bands)} but --data {self.cfg.data} holds "
                f"{describe_bands(self.bands)}: another band configuration cannot resume this "
                "run; train it in another --run-dir"
            )
        self._check_recipe()
        if record.epoch > self.cfg.epochs:
            raise ConfigError(
                f"{self.run_dir}: checkpoint {record.folder} has trained {record.epoch} epochs, "
                f"more than --epochs {self.cfg.epochs}: give --epochs {record.epoch} or more "
                "to resume it (its history keeps every epoch)"
            )
        if record.data_id is None or record.data_id == self.data_id:
            return  # the same shards (or a checkpoint from before data ids: unknown)
        what = (
            f"{self.run_dir}: checkpoint {record.folder} was trained on {record.data} "
            f"(shards {record.data_id}), but --data {self.cfg.data} holds other shards "
            f"({self.data_id})"
        )
        if not self.cfg.allow_new_data:
            raise ConfigError(f"{what}; --allow-new-data resumes on them anyway")
        log.warning("%s: resuming on them (--allow-new-data)", what)

    def _check_recipe(self) -> None:
        """ConfigError when the options given change the recipe the run's epochs were trained
        with (its config.yaml; a folder without one has no recorded recipe): a resume would
        mix two recipes, and config.yaml would relabel the old epochs with the new one."""
        if self.past is None and (self.run_dir / run_folder.CONFIG).is_file():
            self.past = load_run_config(self.run_dir)
        found = [] if self.past is None else recipe.changes(self.past, self.cfg)
        if found:
            assert self.past is not None  # found only against a past config
            raise ConfigError(
                f"{self.run_dir}: holds a run trained with another recipe "
                f"({recipe.listed(found)}): resuming would mix two recipes in one run"
                f"{resume_note(self.past, self.cfg)}; use another --run-dir "
                f"(--init-weights {self.run_dir} starts there from this run's best weights), "
                "or --no-resume to start this one over"
            )

    def _stamped(self, record: CheckpointRecord) -> CheckpointRecord:
        """``record`` naming the data it was trained on."""
        return dataclasses.replace(record, data=str(self.cfg.data), data_id=self.data_id)

    def history(self, *, through_epoch: int) -> list[HistoryRow]:
        """The rows of epochs 1..``through_epoch`` as the file holds them: read every epoch
        (a small CSV), because in elastic runs another process may have written the last
        rows since this one did."""
        if not through_epoch:
            return []
        rows = read_history(self.run_dir, through_epoch=through_epoch)
        if len(rows) < through_epoch:  # rows are written before their checkpoint: never fewer
            path = self.run_dir / run_folder.HISTORY
            raise InputError(
                f"{path}: {len(rows)} epoch row(s), but the checkpoint is at epoch "
                f"{through_epoch}: the history was cut or replaced; restore it, or start the "
                "run afresh in another folder"
            )
        return rows

    def save_epoch(
        self, trackables: dict, record: CheckpointRecord, history: list[HistoryRow]
    ) -> None:
        """The outputs of a finished epoch: history, best and latest checkpoints, scalars."""
        row = history[-1]
        write_history(self.run_dir, history)
        record = self._stamped(record)
        if is_new_best(history, self.cfg.select_metric):
            checkpoints.save(self.run_dir, "best", trackables, record)
        checkpoints.save(self.run_dir, "latest", trackables, record)
        self._tensorboard(row)
        log.info(
            "epoch %d/%d: loss %.4f val_loss %.4f val micro-F1 %.4f macro-F1 %.4f "
            "micro-mAP %s macro-mAP %s, %.0f samples/s, data wait %.1f%%, %.1f s",
            row.epoch,
            self.cfg.epochs,
            row.loss,
            row.val_loss,
            row.val_micro_f1,
            row.val_macro_f1,
            format_score(row.val_micro_map),
            format_score(row.val_macro_map),
            row.samples_per_s,
            100 * row.data_wait_fraction,
            row.seconds,
        )
        if row.val_pixel_accuracy is not None:
            log.info("epoch %d/%d: dense head val pixel OA %s mIoU %s", row.epoch,
                     self.cfg.epochs, format_score(row.val_pixel_accuracy),
                     format_score(row.val_pixel_miou))  # fmt: skip

    def save_mid_epoch(self, trackables: dict, record: CheckpointRecord) -> None:
        """A checkpoint inside an epoch (all ranks agreed to stop there)."""
        checkpoints.save(self.run_dir, "latest", trackables, self._stamped(record))

    def write_status(self, status: RunStatus) -> None:
        write_status(self.run_dir, status)

    def write_efficiency(self, report: EfficiencyReport) -> None:
        write_efficiency(self.run_dir, report)

    def append_event(
        self,
        *,
        event: str,
        old_size: int,
        new_size: int | None,
        epoch: int,
        consumed: int,
        batch: int,
    ) -> None:
        """One elastic event (a resize, a change of hosts) as a row of ``elastic_events.csv``."""
        elastic_log.append_event(
            self.run_dir, ElasticEvent(event, old_size, new_size, epoch, consumed, batch)
        )

    def write_noise_points(self, points: list[tuple[int, NoiseEstimate]]) -> None:
        """The noise scale every few updates, to TensorBoard (x axis: updates averaged)."""
        with self._tensorboard_writer().as_default():
            for update, estimate in points:
                tf.summary.scalar("gns/b_simple", estimate.b_simple, step=update)
                tf.summary.scalar("gns/grad_sq", estimate.grad_sq, step=update)
                tf.summary.scalar("gns/trace", estimate.trace, step=update)
        self._tensorboard_writer().flush()

    def _tensorboard_writer(self) -> Any:
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(str(self.run_dir / run_folder.TENSORBOARD))
        return self._writer

    def _tensorboard(self, row: HistoryRow) -> None:
        values = dataclasses.asdict(row)
        with self._tensorboard_writer().as_default():
            for key in TENSORBOARD_SCALARS:
                if values.get(key) is not None:
                    tf.summary.scalar(key, float(values[key]), step=row.epoch)
        self._tensorboard_writer().flush()
