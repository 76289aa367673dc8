"""Distributed evaluation of a trained run: every rank predicts, rank 0 reports.

Each rank loads the run (:mod:`bigearthnet.inference.trained_run`) and predicts its own
disjoint, contiguous part
of the split (``RankData``, shards verified, no shuffling). Sigmoid scores, labels and
patch names are gathered to every rank in rank order, i.e. in manifest order whatever the
number of ranks. The gathered count must equal the manifest's count of the split and the
names must be unique: every sample is scored exactly once, or the evaluation fails.

Rank 0 computes the report with :func:`bigearthnet.evaluation.metrics.full_report` (scikit-learn),
shares it with the other ranks (so :func:`evaluate_run` returns the same dict everywhere)
and writes, each file atomically, to ``OUT`` (default ``RUN/eval-<split>/``):

=================== =====================================================================
metrics.json        headline metrics, threshold(s), split, checkpoint, epoch, world_size,
                    per_class list
per_class.csv       class, index, support, precision, recall, f1, ap
predictions.h5      names, scores (float32 sigmoid), labels (uint8), attribute ``classes``:
                    enough to recompute every number above; with the dense head also
                    pixel_class_counts (int32 (N, 19): its pixels of each class per patch)
thresholds.json     per-class thresholds tuned on the val split (``tune_thresholds`` only)
f1_per_class.png    per-class F1 bars with the micro and macro F1
pr_curves.png       precision-recall curves per class and pooled (micro)
training_curves.png loss, validation F1 and learning rate from RUN/history.csv (if any)
=================== =====================================================================

A model with the dense head is also scored per pixel (:mod:`bigearthnet.evaluation.
pixel_evaluation`): metrics.json's pixel keys, ``pixel_per_class.csv``,
``pixel_confusion.csv`` and ``pixel_confusion.png``.

The report's files are written by :mod:`bigearthnet.evaluation.report`, its figures drawn by
:mod:`bigearthnet.evaluation.plots`, both on rank 0, into a folder of evaluate.py's own
(:func:`claim_report_folder`: its mark ``.bigearthnet-evaluate``); an ``OUT`` of other
files is refused before the model loads.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bigearthnet.core import constants, distributed, runlock
from bigearthnet.core.config import ConfigError, load_run_config
from bigearthnet.core.errors import EvaluationError, RequeueRequested
from bigearthnet.core.folders import claim_folder
from bigearthnet.data.rank_data import RankData
from bigearthnet.evaluation import metrics
from bigearthnet.evaluation.options import EvalOptions, evaluation_data
from bigearthnet.evaluation.pixel_evaluation import (
    PixelScorer,
    check_pixel_coverage,
    pixel_scorer,
    pixel_summary,
)
from bigearthnet.evaluation.plots import (
    F1_PLOT,
    PIXEL_CONFUSION_PLOT,
    PLOTS,
    PR_CURVES_PLOT,
    TRAINING_PLOT,
    draw_plots,
    plot_f1_per_class,
    plot_pixel_confusion,
    plot_pr_curves,
    plot_training_curves,
    write_plots,
)
from bigearthnet.evaluation.report import (
    PER_CLASS_FILE,
    PREDICTIONS_FILE,
    Predictions,
    clear_metrics,
    format_table,
    write_outputs,
)
from bigearthnet.evaluation.summary import THRESHOLDS_FILE, EvalSummary, summary_of
from bigearthnet.formats import checkpoints, run_folder
from bigearthnet.formats.history import HistoryRow, read_history
from bigearthnet.formats.manifest import Manifest
from bigearthnet.formats.pixel_eval import PIXEL_CONFUSION, PIXEL_PER_CLASS, REFERENCE
from bigearthnet.inference.predictor import check_bands
from bigearthnet.inference.trained_run import LoadedModel, check_data_labels, load_model

log = distributed.log


# --------------------------------------------------------------------------- prediction


def predict_part(
    loaded: LoadedModel,
    part: RankData,
    batch_size: int,
    stop: Callable[[], bool] | None = None,
    scorer: PixelScorer | None = None,
) -> Predictions:
    """This rank's part of a split, scored in order (no shuffling); with ``scorer`` (the
    dense head) each batch's pixels too, in the same forward pass. With ``stop``
    (collective): before each batch every rank votes whether to stop (a time-limit warning
    during train.py's final evaluation), and all raise RequeueRequested together."""
    steps = math.ceil(len(part) / batch_size)
    batches = iter(part.batches(steps, epoch=0, seed=0, shuffle=False) if steps else [])
    rounds = steps
    if stop is not None:  # parts differ by a sample: the same number of votes on every rank
        rounds = int(
            distributed.allgather(np.array([steps]), name=f"eval_steps_{part.split}").max()
        )
    names, done = part.names(), 0
    scores = [np.zeros((0, loaded.num_classes), dtype=np.float32)]
    labels = [np.zeros((0, loaded.num_classes), dtype=np.uint8)]
    pixels = [np.zeros((0, len(constants.CLASSES_19)), dtype=np.int32)]
    for _ in range(rounds):
        if stop is not None and _any_rank_stops(stop(), part.split):
            raise RequeueRequested(
                f"stopped while scoring the {part.split} split (training is complete and "
                "checkpointed); the rerun only evaluates"
            )
        batch = next(batches, None)
        if batch is None:
            continue
        if scorer is None:
            scores.append(loaded.predict(batch.images))
        else:
            batch_scores, counts = scorer.score(batch, names[done : done + len(batch.labels)])
            scores.append(batch_scores)
            pixels.append(counts)
        labels.append(batch.labels)
        done += len(batch.labels)
    class_pixels = np.concatenate(pixels) if scorer is not None else None
    return Predictions(names, np.concatenate(labels), np.concatenate(scores), class_pixels)


def _any_rank_stops(mine: bool, split: str) -> bool:
    """Collective: whether some rank was asked to stop."""
    return bool(distributed.allreduce_sum(np.array([float(mine)]), name=f"eval_stop_{split}")[0])


def gather(mine: Predictions, split: str) -> Predictions:
    """Collective: every rank's predictions concatenated in rank order, on every rank."""
    # Horovod: allgather in rank order = manifest order, whatever the number of ranks.
    names = distributed.allgather_object(mine.names, name=f"eval_names_{split}")
    pixels = mine.class_pixels  # the same on every rank: None without the dense head
    return Predictions(
        [name for rank_names in names for name in rank_names],
        distributed.allgather(mine.labels.astype(np.uint8), name=f"eval_labels_{split}"),
        distributed.allgather(mine.scores.astype(np.float32), name=f"eval_scores_{split}"),
        None if pixels is None else distributed.allgather(pixels, name=f"eval_pixels_{split}"),
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
    scorer: PixelScorer | None = None,
) -> Predictions:
    """Collective: the whole split scored over all ranks, checked for exact coverage."""
    gathered = gather(predict_part(loaded, part, batch_size, stop, scorer), part.split)
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
    scorer: PixelScorer | None = None  # the dense head's, on the first split


def prepare(
    run_dir: Path,
    data_dir: str | Path | None,
    splits: list[str],
    checkpoint: str,
    threshold: float | None,
    batch_size: int | None,
    stats_from: str | Path | None = None,
) -> EvalSetup:
    """Read config, data and checkpoint; raises ConfigError/ShardError/CheckpointError.
    With the dense head the first of ``splits`` is read with its reference maps."""
    config, data_dir, manifest = evaluation_data(run_dir, data_dir)
    threshold = float(config.threshold if threshold is None else threshold)
    if not 0.0 < threshold < 1.0:
        raise ConfigError(f"--threshold must be inside (0, 1), got {threshold}")
    batch_size = int(config.batch_size if batch_size is None else batch_size)
    if batch_size < 1:
        raise ConfigError(f"--batch-size must be a positive integer, got {batch_size}")
    for split in splits:
        if split not in constants.SPLITS:
            raise ConfigError(f"unknown split {split!r}; use one of {', '.join(constants.SPLITS)}")
    loaded = load_model(run_dir, checkpoint, stats_from)
    check_data_labels(loaded.record, manifest, data_dir)
    check_bands(loaded, manifest.bands, f"shards {data_dir}")
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
            maps=split == splits[0] and loaded.has_dense_head and manifest.has_maps,
        )
        for split in splits
    }
    scorer = None
    if loaded.has_dense_head:
        scorer = pixel_scorer(loaded, manifest, parts[splits[0]].names())
    return EvalSetup(loaded, data_dir, manifest, parts, threshold, batch_size, scorer)


REPORT_MARK = ".bigearthnet-evaluate"


def claim_report_folder(out_dir: Path) -> None:
    """Make ``out_dir`` a report folder of evaluate.py (its mark inside), or check that it
    is one: absent, empty, marked, or (made before marks) holding only the report's files.
    A folder of anything else is refused in one line naming it (the report's files would
    mix with, and overwrite, the user's)."""
    own = (run_folder.METRICS, PER_CLASS_FILE, PREDICTIONS_FILE, THRESHOLDS_FILE, *PLOTS,
           PIXEL_CONFUSION, PIXEL_PER_CLASS)  # fmt: skip
    claim_folder(out_dir, mark=REPORT_MARK, made_by="evaluate.py", option="--out",
                 own_names=own)  # fmt: skip


def evaluate_run(opts: EvalOptions, stop: Callable[[], bool] | None = None) -> EvalSummary:
    """Collective: evaluate a checkpoint of ``opts.run_dir`` on ``opts.split``; returns the
    metrics.

    Every rank of the job must call it. With ``tune_thresholds`` per-class thresholds are
    chosen on the val split and applied to the split. Rank 0 writes the report to
    ``opts.out`` (default ``RUN/eval-<split>/``); every rank returns the same record. Raises
    ConfigError, ShardError or CheckpointError on bad input (on every rank), EvaluationError
    when the split is not covered exactly once. ``stop``: asked before each batch (every rank
    votes); when it says so on some rank, all raise RequeueRequested and nothing is written.
    """
    split, checkpoint, out, tune_thresholds = (
        opts.split,
        opts.checkpoint,
        opts.out,
        opts.tune_thresholds,
    )
    run_dir = Path(opts.run_dir)
    splits = [split, "val"] if tune_thresholds and split != "val" else [split]
    setup, error = None, None
    try:
        load_run_config(run_dir)  # a mistyped folder is refused before a lock is made in it
        if out is None and distributed.is_root():  # writes into the run folder: one writer
            runlock.acquire(run_dir)
        out_dir = Path(out) if out else run_folder.eval_dir(run_dir, split)
        if distributed.is_root() and out_dir.exists():  # before the work, not after it
            claim_report_folder(out_dir)
        setup = prepare(run_dir, opts.data, splits, checkpoint, opts.threshold, opts.batch_size,
                        opts.stats_from)  # fmt: skip
    except (ValueError, OSError) as err:  # ConfigError, ShardError, CheckpointError, h5py
        error = err
    distributed.raise_if_any_failed(error, "preparing evaluation")
    assert setup is not None  # raise_if_any_failed raised on every rank otherwise
    scored = {
        name: predict_split(
            setup.loaded,
            part,
            setup.manifest,
            setup.batch_size,
            stop,
            setup.scorer if name == split else None,
        )  # fmt: skip
        for name, part in setup.parts.items()
    }
    confusions = setup.scorer.summed(split) if setup.scorer is not None else {}
    if REFERENCE in confusions:
        check_pixel_coverage(confusions[REFERENCE], setup.manifest, split)
    predictions, history = scored[split], read_history(run_dir)
    summary, thresholds = None, None
    if distributed.is_root():
        if tune_thresholds:
            if split == "val":
                log.warning("thresholds tuned and reported on val: optimistic numbers")
            thresholds = metrics.tune_thresholds(scored["val"].labels, scored["val"].scores)
        summary = build_report(setup, predictions, split, checkpoint, thresholds, confusions)
        claim_report_folder(out_dir)  # made only now: a failed evaluation leaves none
        clear_metrics(out_dir)  # then plots, files, and metrics.json last
        renderers = _renderers(summary, predictions, setup, history, confusions)
        write_plots(out_dir, draw_plots(renderers))
        write_outputs(out_dir, summary, predictions, thresholds, confusions)
        log.info("evaluation report written to %s", out_dir)
        print(format_table(summary, run_dir))
    # Horovod: only rank 0 computed the report; broadcast it so every rank returns the same.
    return distributed.broadcast_object(summary, name="eval_report")


def _renderers(
    summary: EvalSummary,
    predictions: Predictions,
    setup,
    history: list[HistoryRow],
    confusions: dict[str, np.ndarray],
) -> dict:
    """The report's plots, by file name (drawn on rank 0: a few seconds, once per run)."""
    names = setup.loaded.class_names
    return {
        PR_CURVES_PLOT: lambda: plot_pr_curves(predictions.labels, predictions.scores, names),
        TRAINING_PLOT: lambda: plot_training_curves(history) if history else None,
        F1_PLOT: lambda: plot_f1_per_class(summary),
        PIXEL_CONFUSION_PLOT: lambda: plot_pixel_confusion(confusions) if confusions else None,
    }


def build_report(
    setup: EvalSetup,
    predictions: Predictions,
    split: str,
    checkpoint: str,
    thresholds: np.ndarray | None,
    confusions: dict[str, np.ndarray] | None = None,
) -> EvalSummary:
    """metrics.full_report plus where the numbers come from; with the dense head its
    figures (``confusions``: each reference's pixel counts, summed over ranks)."""
    loaded = setup.loaded
    threshold = setup.threshold if thresholds is None else thresholds
    report = metrics.full_report(
        predictions.labels, predictions.scores, threshold, loaded.class_names
    )
    pixel = None
    if predictions.class_pixels is not None and setup.scorer is not None:
        predicted = metrics.predict(predictions.scores, threshold)
        pixel = pixel_summary(confusions or {}, predictions.class_pixels, predicted,
                              predictions.labels, setup.scorer.truth_path)  # fmt: skip
    return summary_of(
        report,
        split=split,
        checkpoint=checkpoint,
        checkpoint_path=str(loaded.prefix),
        checkpoint_digest=checkpoints.digest(loaded.prefix),
        epoch=loaded.epoch,
        world_size=distributed.size(),
        model=loaded.record.model,
        bands=list(loaded.bands),
        data=str(setup.data_dir),
        pixel=pixel,
    )
