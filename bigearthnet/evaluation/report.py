"""The evaluation report's files, written by rank 0, each atomically (see
:mod:`bigearthnet.evaluation.evaluate` for what each holds): ``metrics.json``, ``per_class.csv``,
``predictions.h5``, ``thresholds.json``; and the table printed at the end."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError
from bigearthnet.core.util import atomic_path, atomic_write_json, write_csv
from bigearthnet.evaluation import metrics
from bigearthnet.formats import run_folder

PER_CLASS_FIELDS = ("class", "index", "support", "precision", "recall", "f1", "ap")


@dataclass
class Predictions:
    """Scores of a whole split, rows in manifest order."""

    names: list[str]
    labels: np.ndarray  # (N, C) uint8
    scores: np.ndarray  # (N, C) float32 sigmoid


@dataclass(frozen=True)
class ClassScores:
    """One class's row of metrics.json."""

    name: str
    support: int
    precision: float
    recall: float
    f1: float
    ap: float | None  # None: no positive in the split


@dataclass(frozen=True)
class EvalSummary:
    """What an evaluation folder says of a checkpoint (read back by exports and reports)."""

    folder: Path
    split: str
    epoch: int | None
    checkpoint_path: str
    checkpoint_digest: str | None  # formats.checkpoints.digest (None: older evaluations)
    count: int
    micro_f1: float
    macro_f1: float
    micro_map: float | None
    macro_map: float | None
    micro_precision: float
    micro_recall: float
    macro_precision: float
    macro_recall: float
    macro_classes: int | None  # classes the macro averages ran over (None: older files)
    threshold: float | None  # None: per-class thresholds (``tuned_thresholds``)
    tuned_thresholds: tuple[float, ...] | None
    per_class: tuple[ClassScores, ...]


def read_metrics(eval_dir: Path) -> EvalSummary:
    """``metrics.json`` (and ``thresholds.json`` if tuned) of an evaluation folder."""
    path = eval_dir / run_folder.METRICS
    try:
        body = json.loads(path.read_text())
        tuned = None
        if (eval_dir / "thresholds.json").is_file():
            tuned = tuple(json.loads((eval_dir / "thresholds.json").read_text())["thresholds"])
        threshold = body["threshold"]
        return EvalSummary(
            folder=eval_dir,
            split=body["split"],
            epoch=body.get("epoch"),
            checkpoint_path=body["checkpoint_path"],
            checkpoint_digest=body.get("checkpoint_digest"),
            count=int(body["count"]),
            **{key: body[key] for key in _HEADLINE},
            macro_classes=body.get("macro_classes"),
            threshold=float(threshold) if isinstance(threshold, (int, float)) else None,
            tuned_thresholds=tuned,
            per_class=tuple(
                ClassScores(
                    row["class"],
                    row["support"],
                    row["precision"],
                    row["recall"],
                    row["f1"],
                    row["ap"],
                )
                for row in body["per_class"]
            ),
        )
    except OSError as err:
        raise InputError(f"{path}: unreadable: {err.strerror or err}") from None
    except (ValueError, KeyError, TypeError) as err:
        raise InputError(f"{path}: not an evaluation's metrics ({err!r})") from None


_HEADLINE = (
    "micro_f1", "macro_f1", "micro_map", "macro_map",
    "micro_precision", "micro_recall", "macro_precision", "macro_recall",
)  # fmt: skip


def write_outputs(
    out_dir: Path,
    report: dict,
    predictions: Predictions,
    thresholds: np.ndarray | None,
) -> None:
    """Rank 0: the report files but the plots, each written atomically, ``metrics.json``
    last: its presence says the evaluation folder is complete (an export trusts it)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    clear_metrics(out_dir)
    write_csv(out_dir / "per_class.csv", PER_CLASS_FIELDS, per_class_rows(report))
    write_predictions(out_dir / "predictions.h5", predictions, report)
    if thresholds is not None:
        atomic_write_json(
            out_dir / "thresholds.json",
            {
                "tuned_on": "val",
                "grid": metrics.DEFAULT_GRID.tolist(),
                "classes": report["classes"],
                "thresholds": [float(t) for t in thresholds],
            },
        )
    atomic_write_json(out_dir / run_folder.METRICS, report)


def clear_metrics(out_dir: Path) -> None:
    """Remove an older ``metrics.json``: it must not vouch for a folder being rewritten."""
    (out_dir / run_folder.METRICS).unlink(missing_ok=True)


def per_class_rows(report: dict) -> list[dict]:
    """The rows of per_class.csv (an AP that cannot be computed is an empty cell)."""
    return [
        {k: "" if row[k] is None else row[k] for k in PER_CLASS_FIELDS}
        for row in report["per_class"]
    ]


def write_predictions(path: Path, predictions: Predictions, report: dict) -> None:
    """names, scores and labels, so anyone can recompute every metric."""
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("names", data=predictions.names, dtype=h5py.string_dtype("utf-8"))
        f.create_dataset("scores", data=predictions.scores.astype(np.float32))
        f.create_dataset("labels", data=predictions.labels.astype(np.uint8))
        f.attrs["classes"] = report["classes"]
        f.attrs["split"] = report["split"]
        f.attrs["threshold"] = report["threshold"]
        f.attrs["checkpoint"] = report["checkpoint_path"]


def read_predictions(path: Path) -> Predictions:
    """``predictions.h5`` as :func:`write_predictions` wrote it."""
    try:
        with h5py.File(path, "r") as f:
            names = [n.decode() if isinstance(n, bytes) else str(n) for n in f["names"][:]]
            return Predictions(names, f["labels"][:], f["scores"][:])
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


def card_comparison(report: dict) -> list[str]:
    """The four card metrics of a 19-class evaluation beside reBEN's card, with the gap;
    [] for a 43-class one (the card has none)."""
    if len(report["classes"]) != 19:
        return []
    lines = [
        "  beside reBEN's ResNet-50 S1+S2 card (its 119,825 test patches, threshold 0.5; "
        f"this run: bands {constants.band_config_name(report.get('bands') or constants.BANDS)}"
        f", {report['count']} {report['split']} patches):"
    ]
    for key, card in REBEN_CARD.items():
        mine = report[key]
        gap = "" if mine is None else f"{mine - card:+.4f}"
        lines.append(f"    {key:<10} {format_score(mine):>8}  card {card:.2f}  gap {gap}")
    return lines


def format_table(report: dict, run_dir: Path) -> str:
    """Headline metrics, then one line per class."""
    threshold = report["threshold"]
    shown = f"{threshold:g}" if isinstance(threshold, float) else "per class (tuned on val)"
    lines = [
        f"evaluation of {run_dir} ({report['model']}, checkpoint {report['checkpoint']}, "
        f"epoch {report['epoch']}) on {report['split']}: {report['count']} patches, "
        f"{report['world_size']} rank(s), threshold {shown}",
        "  " + "  ".join(f"{k} {format_score(report[k])}" for k in ("micro_f1", "macro_f1")),
        "  " + "  ".join(f"{k} {format_score(report[k])}" for k in ("samples_f1", "weighted_f1")),
        "  "
        + "  ".join(
            f"{k} {format_score(report[k])}"
            for k in ("micro_precision", "micro_recall", "macro_precision", "macro_recall")
        ),
        "  " + "  ".join(f"{k} {format_score(report[k])}" for k in ("micro_map", "macro_map")),
        f"  macro averages over the {report['macro_classes']} of {len(report['classes'])} "
        "classes with positives in the split",
        f"  {'class':<48} {'support':>7} {'precision':>9} {'recall':>7} {'f1':>7} {'ap':>7}",
    ]
    for row in report["per_class"]:
        name = row["class"] if len(row["class"]) <= 48 else row["class"][:45] + "..."
        lines.append(
            f"  {name:<48} {row['support']:>7d} {row['precision']:>9.4f} {row['recall']:>7.4f} "
            f"{row['f1']:>7.4f} {format_score(row['ap']):>7}"
        )
    return "\n".join(lines + card_comparison(report))
