"""The evaluation report's files, written by rank 0, each atomically (see
:mod:`bigearthnet.evaluation.evaluate` for what each holds): ``metrics.json``, ``per_class.csv``,
``predictions.h5``, ``thresholds.json``; and the table printed at the end."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from bigearthnet.core.util import atomic_path, atomic_write_json, write_csv
from bigearthnet.evaluation import metrics

PER_CLASS_FIELDS = ("class", "index", "support", "precision", "recall", "f1", "ap")


@dataclass
class Predictions:
    """Scores of a whole split, rows in manifest order."""

    names: list[str]
    labels: np.ndarray  # (N, C) uint8
    scores: np.ndarray  # (N, C) float32 sigmoid


def write_outputs(
    out_dir: Path,
    report: dict,
    predictions: Predictions,
    thresholds: np.ndarray | None,
) -> None:
    """Rank 0: the report files but the plots, each written atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_dir / "metrics.json", report)
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


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def format_table(report: dict, run_dir: Path) -> str:
    """Headline metrics, then one line per class."""
    threshold = report["threshold"]
    shown = f"{threshold:g}" if isinstance(threshold, float) else "per class (tuned on val)"
    lines = [
        f"evaluation of {run_dir} ({report['model']}, checkpoint {report['checkpoint']}, "
        f"epoch {report['epoch']}) on {report['split']}: {report['count']} patches, "
        f"{report['world_size']} rank(s), threshold {shown}",
        "  " + "  ".join(f"{k} {_number(report[k])}" for k in ("micro_f1", "macro_f1")),
        "  " + "  ".join(f"{k} {_number(report[k])}" for k in ("samples_f1", "weighted_f1")),
        "  "
        + "  ".join(
            f"{k} {_number(report[k])}"
            for k in ("micro_precision", "micro_recall", "macro_precision", "macro_recall")
        ),
        "  " + "  ".join(f"{k} {_number(report[k])}" for k in ("micro_map", "macro_map")),
        f"  {'class':<48} {'support':>7} {'precision':>9} {'recall':>7} {'f1':>7} {'ap':>7}",
    ]
    for row in report["per_class"]:
        name = row["class"] if len(row["class"]) <= 48 else row["class"][:45] + "..."
        lines.append(
            f"  {name:<48} {row['support']:>7d} {row['precision']:>9.4f} {row['recall']:>7.4f} "
            f"{row['f1']:>7.4f} {_number(row['ap']):>7}"
        )
    return "\n".join(lines)
