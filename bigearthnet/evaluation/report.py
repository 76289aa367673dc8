"""The evaluation report's files, written by rank 0, each atomically (see
:mod:`bigearthnet.evaluation.evaluate` for what each holds): ``metrics.json``, ``per_class.csv``,
``predictions.h5``, ``thresholds.json``, with the dense head ``pixel_per_class.csv`` and
``pixel_confusion.csv`` (:mod:`bigearthnet.formats.pixel_eval`); and the table printed at the
end."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError
from bigearthnet.core.util import atomic_path, atomic_write_json, write_csv
from bigearthnet.evaluation import metrics
from bigearthnet.evaluation.pixel_metrics import pixel_rows
from bigearthnet.evaluation.summary import THRESHOLDS_FILE, EvalSummary, write_metrics
from bigearthnet.formats import pixel_eval, run_folder
from bigearthnet.formats.pixel_eval import PIXEL_CONFUSION, PIXEL_PER_CLASS

PREDICTIONS_FILE = "predictions.h5"
PER_CLASS_FILE = "per_class.csv"
PIXEL_CLASS_COUNTS = "pixel_class_counts"  # predictions.h5's dataset of the dense head's
PER_CLASS_FIELDS = ("class", "index", "support", "precision", "recall", "f1", "ap")


@dataclass
class Predictions:
    """Scores of a whole split, rows in manifest order."""

    names: list[str]
    labels: np.ndarray  # (N, C) uint8
    scores: np.ndarray  # (N, C) float32 sigmoid
    class_pixels: np.ndarray | None = None  # (N, 19) the dense head's pixels of each class


def write_outputs(
    out_dir: Path,
    summary: EvalSummary,
    predictions: Predictions,
    thresholds: np.ndarray | None,
    confusions: dict[str, np.ndarray] | None = None,
) -> None:
    """Rank 0: the report files but the plots, each written atomically, ``metrics.json``
    last: its presence says the evaluation folder is complete (an export trusts it). With
    ``confusions`` (the dense head's pixel counts by reference) the pixel files, which are
    removed otherwise: every file in the folder is of its evaluation."""
    out_dir.mkdir(parents=True, exist_ok=True)
    clear_metrics(out_dir)
    write_csv(out_dir / PER_CLASS_FILE, PER_CLASS_FIELDS, per_class_rows(summary))
    if confusions:
        pixel_eval.write_confusions(out_dir, constants.CLASSES_19, confusions)
        pixel_eval.write_pixel_classes(out_dir, pixel_rows(confusions))
        if summary.pixel is not None:  # metrics.json vouches for the files beside it
            files = pixel_eval.file_digests(out_dir)
            summary = dataclasses.replace(
                summary, pixel=dataclasses.replace(summary.pixel, files=files)
            )
    else:
        for name in (PIXEL_CONFUSION, PIXEL_PER_CLASS):
            (out_dir / name).unlink(missing_ok=True)
    write_predictions(out_dir / PREDICTIONS_FILE, predictions, summary)
    if thresholds is not None:
        atomic_write_json(
            out_dir / THRESHOLDS_FILE,
            {
                "tuned_on": "val",
                "grid": metrics.DEFAULT_GRID.tolist(),
                "classes": summary.classes,
                "thresholds": [float(t) for t in thresholds],
            },
        )
    write_metrics(out_dir, summary)


def clear_metrics(out_dir: Path) -> None:
    """Remove an older ``metrics.json``: it must not vouch for a folder being rewritten."""
    (out_dir / run_folder.METRICS).unlink(missing_ok=True)


def per_class_rows(summary: EvalSummary) -> list[dict]:
    """The rows of per_class.csv (an AP that cannot be computed is an empty cell)."""
    return [
        {k: "" if v is None else v for k, v in row.to_json().items()} for row in summary.per_class
    ]


def write_predictions(path: Path, predictions: Predictions, summary: EvalSummary) -> None:
    """names, scores and labels, so anyone can recompute every metric."""
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("names", data=predictions.names, dtype=h5py.string_dtype("utf-8"))
        f.create_dataset("scores", data=predictions.scores.astype(np.float32))
        f.create_dataset("labels", data=predictions.labels.astype(np.uint8))
        if predictions.class_pixels is not None:
            f.create_dataset(PIXEL_CLASS_COUNTS, data=predictions.class_pixels.astype(np.int32))
        body = summary.to_json()
        f.attrs["classes"] = body["classes"]
        f.attrs["split"] = summary.split
        f.attrs["threshold"] = body["threshold"]
        f.attrs["checkpoint"] = summary.checkpoint_path


def read_predictions(path: Path) -> Predictions:
    """``predictions.h5`` as :func:`write_predictions` wrote it."""
    try:
        with h5py.File(path, "r") as f:
            names = [n.decode() if isinstance(n, bytes) else str(n) for n in f["names"][:]]
            pixels = f[PIXEL_CLASS_COUNTS][:] if PIXEL_CLASS_COUNTS in f else None
            return Predictions(names, f["labels"][:], f["scores"][:], pixels)
    except (OSError, KeyError) as err:
        raise InputError(f"{path}: not an evaluation's predictions ({err})") from None


def format_score(value: float | None) -> str:
    """A score to 4 decimals, n/a where it could not be computed (an AP without positives)."""
    return "n/a" if value is None else f"{value:.4f}"


# The test scores of reBEN's published ResNet-50 on Sentinel-1 + Sentinel-2 (BigEarthNet
# v2.0, 19 classes, the 119,825-patch test split, threshold 0.5; the BIFOLD/RSiM model card
# of resnet50-all-v0.2.0): what a user compares a run with first.
REBEN_CARD: dict[str, float] = {
    "macro_map": 0.70,
    "micro_map": 0.86,
    "macro_f1": 0.64,
    "micro_f1": 0.77,
}


def card_comparison(summary: EvalSummary) -> list[str]:
    """The four card metrics of a 19-class evaluation beside reBEN's card, with the gap;
    [] for a 43-class one (the card has none)."""
    if len(summary.per_class) != 19:
        return []
    bands = constants.band_config_name(summary.bands or constants.BANDS)
    lines = [
        "  beside reBEN's ResNet-50 S1+S2 card (its 119,825 test patches, threshold 0.5; "
        f"this run: bands {bands}, {summary.count} {summary.split} patches):"
    ]
    for key, card in REBEN_CARD.items():
        mine = getattr(summary, key)
        gap = "" if mine is None else f"{mine - card:+.4f}"
        lines.append(f"    {key:<10} {format_score(mine):>8}  card {card:.2f}  gap {gap}")
    return lines


def format_table(summary: EvalSummary, run_dir: Path) -> str:
    """Headline metrics, then one line per class."""
    s = summary
    shown = f"{s.threshold:g}" if s.threshold is not None else "per class (tuned on val)"

    def scores(*keys: str) -> str:
        return "  " + "  ".join(f"{k} {format_score(getattr(s, k))}" for k in keys)

    lines = [
        f"evaluation of {run_dir} ({s.model}, checkpoint {s.checkpoint}, epoch {s.epoch}) on "
        f"{s.split}: {s.count} patches, {s.world_size} rank(s), threshold {shown}",
        scores("micro_f1", "macro_f1"),
        scores("samples_f1", "weighted_f1"),
        scores("micro_precision", "micro_recall", "macro_precision", "macro_recall"),
        scores("micro_map", "macro_map"),
        f"  macro averages over the {s.macro_classes} of {len(s.per_class)} classes with "
        "positives in the split",
        f"  the best constant answer (the k most frequent classes for every patch): micro_f1 "
        f"{format_score(s.constant_micro_f1)}",
        f"  {'class':<48} {'support':>7} {'precision':>9} {'recall':>7} {'f1':>7} {'ap':>7}",
    ]
    for row in s.per_class:
        name = row.name if len(row.name) <= 48 else row.name[:45] + "..."
        lines.append(
            f"  {name:<48} {row.support:>7d} {row.precision:>9.4f} {row.recall:>7.4f} "
            f"{row.f1:>7.4f} {format_score(row.ap):>7}"
        )
    return "\n".join(lines + pixel_lines(summary) + card_comparison(summary))


def pixel_lines(summary: EvalSummary) -> list[str]:
    """The dense head's figures, for the table ([] for a model without it)."""
    pixel = summary.pixel
    if pixel is None:
        return []
    lines = []
    for against, f in pixel.against.items():
        what = "the reference maps" if against == pixel_eval.REFERENCE else "the truth"
        lines.append(
            f"  dense head against {what}: {f.count:,} labelled pixels, overall accuracy "
            f"{format_score(f.overall_accuracy)}, mIoU {format_score(f.miou)} over "
            f"{f.miou_classes} classes"
        )
    lines.append(
        f"  the two heads' classes per patch agree: micro_f1 "
        f"{format_score(pixel.agreement_micro_f1)}, the same set in "
        f"{100 * pixel.agreement_exact:.1f} % of patches; the dense head's classes against "
        f"the labels: micro_f1 {format_score(pixel.classes_micro_f1)}"
    )
    return lines
