"""Distributed evaluation of a trained run: every rank predicts, rank 0 reports.

Each rank rebuilds the model from the checkpoint pointer (model name, class count) and
``RUN/config.yaml``, restores the weights, and predicts its own disjoint, contiguous part
of the split (``RankData``, shards verified, no shuffling). Sigmoid scores, labels and
patch names are gathered to every rank in rank order, i.e. in manifest order whatever the
number of ranks. The gathered count must equal the manifest's count of the split and the
names must be unique: every sample is scored exactly once, or the evaluation fails.

Rank 0 computes the report with :func:`bigearthnet.metrics.full_report` (scikit-learn),
shares it with the other ranks (so :func:`evaluate_run` returns the same dict everywhere)
and writes, each file atomically, to ``OUT`` (default ``RUN/eval-<split>/``):

=================== =====================================================================
metrics.json        headline metrics, threshold(s), split, checkpoint, epoch, world_size,
                    per_class list
per_class.csv       class, index, support, precision, recall, f1, ap
predictions.h5      names, scores (float32 sigmoid), labels (uint8), attribute ``classes``:
                    enough to recompute every number above
thresholds.json     per-class thresholds tuned on the val split (``tune_thresholds`` only)
f1_per_class.png    per-class F1 bars with the micro and macro F1
pr_curves.png       precision-recall curves per class and pooled (micro)
training_curves.png loss, validation F1 and learning rate from RUN/history.csv (if any)
=================== =====================================================================

Images are normalised with the band statistics of the run's *training* data (what the
model learned on), falling back to the evaluated data's manifest when the training data
is gone. :func:`load_model` and :class:`LoadedModel` are shared with ``bigearthnet.maps``.
The report's files are written by :mod:`bigearthnet.report`, its figures drawn by
:mod:`bigearthnet.plots`, both on rank 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

import models
from bigearthnet import checkpoints, constants, distributed, metrics, runlock
from bigearthnet.checkpoints import CheckpointError, CheckpointRecord
from bigearthnet.config import ConfigError, TrainConfig, load_run_config
from bigearthnet.data import RankData, band_stats, normalize
from bigearthnet.errors import RequeueRequested
from bigearthnet.history import HistoryRow, read_history
from bigearthnet.plots import (
    draw_plots,
    plot_f1_per_class,
    plot_pr_curves,
    plot_training_curves,
    write_plots,
)
from bigearthnet.report import Predictions, format_table, write_outputs
from bigearthnet.shards import Manifest, ShardError, read_manifest

log = distributed.log
CONFIG_FILE = "config.yaml"


class EvaluationError(RuntimeError):
    """The gathered predictions do not cover the split exactly once (a bug, not bad input)."""


# --------------------------------------------------------------------------- the model


@dataclass
class LoadedModel:
    """A restored classifier with everything needed to score uint16 image batches."""

    model: tf.keras.Model
    record: CheckpointRecord  # the checkpoint pointer
    prefix: Path  # checkpoint prefix the weights came from
    config: TrainConfig  # RUN/config.yaml
    mean: np.ndarray
    std: np.ndarray
    _predict: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Batches of different sizes (the last one) should not each trace a new graph.
        self._predict = tf.function(self._scores, reduce_retracing=True)

    @property
    def num_classes(self) -> int:
        return self.record.num_classes

    @property
    def class_names(self) -> list[str]:
        return list(constants.CLASS_SETS[self.num_classes])

    @property
    def epoch(self) -> int | None:
        return self.record.epoch

    def _scores(self, images: tf.Tensor) -> tf.Tensor:
        x = normalize(images, self.mean, self.std)  # exactly the training normalisation
        return tf.sigmoid(tf.cast(self.model(x, training=False), tf.float32))

    def predict(self, images: np.ndarray) -> np.ndarray:
        """(N, 120, 120, 12) uint16 -> (N, C) float32 sigmoid scores."""
        if len(images) == 0:
            return np.zeros((0, self.num_classes), dtype=np.float32)
        return self._predict(tf.convert_to_tensor(images)).numpy()


def resolve_checkpoint(
    run_dir: Path, spec: str, config: TrainConfig
) -> tuple[Path, CheckpointRecord]:
    """Checkpoint prefix and pointer record of ``spec``: 'best', 'latest' or a path."""
    if spec in checkpoints.TAGS:
        record = checkpoints.read_pointer(run_dir, spec)
        if record is None:
            raise CheckpointError(
                f"{checkpoints.checkpoint_dir(run_dir)}: no '{spec}' checkpoint "
                "(has training finished an epoch?)"
            )
        return checkpoints.prefix(run_dir, record), record
    path = Path(spec)
    prefix = path / "ckpt" if path.is_dir() else path
    if not Path(f"{prefix}.index").is_file():
        raise CheckpointError(
            f"{spec}: not a checkpoint (no {prefix.name}.index); use best, latest, "
            "a checkpoint folder or its ckpt prefix"
        )
    return prefix, _record_of_folder(prefix.parent, config)


def _record_of_folder(folder: Path, config: TrainConfig) -> CheckpointRecord:
    """The pointer naming ``folder`` if there is one, else what the run's config says."""
    if folder.parent.name == checkpoints.CKPT_DIR:
        for tag in checkpoints.TAGS:
            try:
                record = checkpoints.read_pointer(folder.parent.parent, tag)
            except CheckpointError:
                continue
            if record is not None and record.folder == folder.name:
                return record
    # A copied or renamed checkpoint folder: the run's configuration says what was trained.
    return CheckpointRecord(
        epoch=0, model=config.model, num_classes=config.labels, folder=folder.name
    )


def check_label_set(record: CheckpointRecord, config: TrainConfig) -> None:
    """CheckpointError unless the checkpoint's class count is the run's label set."""
    classes, wanted = record.num_classes, config.labels
    if classes not in constants.CLASS_SETS:
        raise CheckpointError(f"checkpoint {record.folder} has {classes} classes, not 19 or 43")
    if classes != wanted:
        raise CheckpointError(
            f"checkpoint {record.folder} has {classes} classes but the run's label set is {wanted}"
        )


def check_data_labels(record: CheckpointRecord, manifest: Manifest, data_dir: Path) -> None:
    """CheckpointError unless the data holds labels of the checkpoint's class set."""
    classes, offered = record.num_classes, manifest.label_sets
    if classes not in offered:
        raise CheckpointError(
            f"checkpoint {record.folder} has {classes} classes but {data_dir} holds only "
            f"{'/'.join(map(str, offered))}-class labels"
        )


def training_band_stats(
    config: TrainConfig, fallback: Manifest | None
) -> tuple[np.ndarray, np.ndarray]:
    """Band mean/std of the run's training data (what the model learned on)."""
    try:
        return band_stats(read_manifest(config.data))
    except ShardError:
        log.warning(
            "training data %s unavailable: normalising with the evaluated data's statistics",
            config.data,
        )
        return band_stats(fallback)


def load_model(
    run_dir: str | Path, checkpoint: str = "best", manifest: Manifest | None = None
) -> LoadedModel:
    """Rebuild the run's model from its checkpoint pointer and restore the weights.

    ``manifest`` (of the data to score) is the fallback source of band statistics when
    the run's training data is gone. Raises ConfigError or CheckpointError.
    """
    run_dir = Path(run_dir)
    config = load_run_config(run_dir)
    prefix, record = resolve_checkpoint(run_dir, checkpoint, config)
    check_label_set(record, config)
    model = models.get_model(record.model, record.input_shape, record.num_classes)
    # partial: the checkpoint also holds the optimizer and epoch, which inference ignores.
    checkpoints.restore_path(prefix, {"model": model}, partial=True)
    mean, std = training_band_stats(config, manifest)
    return LoadedModel(model, record, prefix, config, mean, std)


# --------------------------------------------------------------------------- prediction


def predict_part(
    loaded: LoadedModel,
    part: RankData,
    batch_size: int,
    stop: Callable[[], bool] | None = None,
) -> Predictions:
    """This rank's part of a split, scored in order (no shuffling). With ``stop``
    (collective): before each batch every rank votes whether to stop (a time-limit warning
    during train.py's final evaluation), and all raise RequeueRequested together."""
    steps = math.ceil(len(part) / batch_size)
    batches = iter(part.batches(steps, epoch=0, seed=0, shuffle=False) if steps else [])
    rounds = steps
    if stop is not None:  # parts differ by a sample: the same number of votes on every rank
        rounds = int(
            distributed.allgather(np.array([steps]), name=f"eval_steps_{part.split}").max()
        )
    scores = [np.zeros((0, loaded.num_classes), dtype=np.float32)]
    labels = [np.zeros((0, loaded.num_classes), dtype=np.uint8)]
    for _ in range(rounds):
        if stop is not None and _any_rank_stops(stop(), part.split):
            raise RequeueRequested(
                f"stopped while scoring the {part.split} split (training is complete and "
                "checkpointed); the rerun only evaluates"
            )
        batch = next(batches, None)
        if batch is not None:
            scores.append(loaded.predict(batch[0]))
            labels.append(batch[1])
    return Predictions(part.names(), np.concatenate(labels), np.concatenate(scores))


def _any_rank_stops(mine: bool, split: str) -> bool:
    """Collective: whether some rank was asked to stop."""
    return bool(distributed.allreduce_sum(np.array([float(mine)]), name=f"eval_stop_{split}")[0])


def gather(mine: Predictions, split: str) -> Predictions:
    """Collective: every rank's predictions concatenated in rank order, on every rank."""
    # Horovod: allgather in rank order = manifest order, whatever the number of ranks.
    names = distributed.allgather_object(mine.names, name=f"eval_names_{split}")
    return Predictions(
        [name for rank_names in names for name in rank_names],
        distributed.allgather(mine.labels.astype(np.uint8), name=f"eval_labels_{split}"),
        distributed.allgather(mine.scores.astype(np.float32), name=f"eval_scores_{split}"),
    )


def check_coverage(predictions: Predictions, manifest: Manifest, split: str) -> None:
    """EvaluationError unless every sample of the split was scored exactly once."""
    expected = manifest.count(split)
    counts = {len(predictions.names), len(predictions.labels), len(predictions.scores)}
    unique = len(set(predictions.names))
    if counts != {expected} or unique != expected:
        raise EvaluationError(
            f"{split}: gathered {sorted(counts)} rows ({unique} distinct names) over "
            f"{distributed.size()} rank(s), but the manifest counts {expected} samples"
        )


def predict_split(
    loaded: LoadedModel,
    part: RankData,
    manifest: Manifest,
    batch_size: int,
    stop: Callable[[], bool] | None = None,
) -> Predictions:
    """Collective: the whole split scored over all ranks, checked for exact coverage."""
    gathered = gather(predict_part(loaded, part, batch_size, stop), part.split)
    check_coverage(gathered, manifest, part.split)
    return gathered


# --------------------------------------------------------------------------- the run


@dataclass
class EvalSetup:
    """Everything an evaluation needs, prepared (and checked) on every rank."""

    loaded: LoadedModel
    data_dir: Path
    manifest: Manifest
    parts: dict[str, RankData]
    threshold: float
    batch_size: int


def prepare(
    run_dir: Path,
    data_dir: str | Path | None,
    splits: list[str],
    checkpoint: str,
    threshold: float | None,
    batch_size: int | None,
) -> EvalSetup:
    """Read config, data and checkpoint; raises ConfigError/ShardError/CheckpointError."""
    config = load_run_config(run_dir)
    threshold = float(config.threshold if threshold is None else threshold)
    if not 0.0 < threshold < 1.0:
        raise ConfigError(f"--threshold must be inside (0, 1), got {threshold}")
    batch_size = int(config.batch_size if batch_size is None else batch_size)
    if batch_size < 1:
        raise ConfigError(f"--batch-size must be a positive integer, got {batch_size}")
    for split in splits:
        if split not in constants.SPLITS:
            raise ConfigError(f"unknown split {split!r}; use one of {', '.join(constants.SPLITS)}")
    data_dir = Path(data_dir or config.data)
    manifest = read_manifest(data_dir)
    loaded = load_model(run_dir, checkpoint, manifest)
    check_data_labels(loaded.record, manifest, data_dir)
    rank, size = distributed.rank(), distributed.size()
    parts = {
        split: RankData(
            data_dir,
            manifest,
            split,
            labels=loaded.num_classes,
            rank=rank,
            size=size,
            cache="none",
            verify=True,
        )
        for split in splits
    }
    return EvalSetup(loaded, data_dir, manifest, parts, threshold, batch_size)


def evaluate_run(
    run_dir: str | Path,
    data_dir: str | Path | None = None,
    split: str = "test",
    checkpoint: str = "best",
    out: str | Path | None = None,
    threshold: float | None = None,
    batch_size: int | None = None,
    tune_thresholds: bool = False,
    stop: Callable[[], bool] | None = None,
) -> dict:
    """Collective: evaluate a checkpoint of ``run_dir`` on ``split``; returns the metrics.

    Every rank of the job must call it. ``data_dir``, ``threshold`` and ``batch_size``
    default to the run's config.yaml. With ``tune_thresholds`` per-class thresholds are
    chosen on the val split and applied to ``split``. Rank 0 writes the report to ``out``
    (default ``RUN/eval-<split>/``); every rank returns the same dict. Raises ConfigError,
    ShardError or CheckpointError on bad input (on every rank), EvaluationError when the
    split is not covered exactly once. ``stop``: asked before each batch (every rank
    votes); when it says so on some rank, all raise RequeueRequested and nothing is written.
    """
    run_dir = Path(run_dir)
    splits = [split, "val"] if tune_thresholds and split != "val" else [split]
    setup, error = None, None
    try:
        if out is None and distributed.is_root():  # writes into the run folder: one writer
            runlock.acquire(run_dir)
        setup = prepare(run_dir, data_dir, splits, checkpoint, threshold, batch_size)
    except (ValueError, OSError) as err:  # ConfigError, ShardError, CheckpointError, h5py
        error = err
    distributed.raise_if_any_failed(error, "preparing evaluation")
    assert setup is not None  # raise_if_any_failed raised on every rank otherwise
    scored = {
        name: predict_split(setup.loaded, part, setup.manifest, setup.batch_size, stop)
        for name, part in setup.parts.items()
    }
    predictions, history = scored[split], read_history(run_dir)
    report, thresholds = None, None
    if distributed.is_root():
        if tune_thresholds:
            if split == "val":
                log.warning("thresholds tuned and reported on val: optimistic numbers")
            thresholds = metrics.tune_thresholds(scored["val"].labels, scored["val"].scores)
        report = build_report(setup, predictions, split, checkpoint, thresholds)
        out_dir = Path(out) if out else run_dir / f"eval-{split}"
        write_outputs(out_dir, report, predictions, thresholds)
        write_plots(out_dir, draw_plots(_renderers(report, predictions, setup, history)))
        log.info("evaluation report written to %s", out_dir)
        print(format_table(report, run_dir))
    # Horovod: only rank 0 computed the report; broadcast it so every rank returns the same.
    return distributed.broadcast_object(report, name="eval_report")


def _renderers(report: dict, predictions: Predictions, setup, history: list[HistoryRow]) -> dict:
    """The report's plots, by file name (drawn on rank 0: a few seconds, once per run)."""
    names = setup.loaded.class_names
    return {
        "pr_curves.png": lambda: plot_pr_curves(predictions.labels, predictions.scores, names),
        "training_curves.png": lambda: plot_training_curves(history) if history else None,
        "f1_per_class.png": lambda: plot_f1_per_class(report),
    }
    return report


def build_report(
    setup: EvalSetup,
    predictions: Predictions,
    split: str,
    checkpoint: str,
    thresholds: np.ndarray | None,
) -> dict:
    """metrics.full_report plus where the numbers come from."""
    loaded = setup.loaded
    threshold = setup.threshold if thresholds is None else thresholds
    report = metrics.full_report(
        predictions.labels, predictions.scores, threshold, loaded.class_names
    )
    report.update(
        split=split,
        checkpoint=checkpoint,
        checkpoint_path=str(loaded.prefix),
        epoch=loaded.epoch,
        world_size=distributed.size(),
        model=loaded.record.model,
        data=str(setup.data_dir),
        thresholds_tuned_on="val" if thresholds is not None else None,
    )
    return report
