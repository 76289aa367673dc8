"""The evaluation report's figures, drawn on rank 0 with matplotlib's Agg canvas (no
pyplot, no GUI): per-class F1, precision-recall curves and the training curves."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import numpy as np

from bigearthnet.core.util import atomic_path, first_line
from bigearthnet.evaluation.summary import EvalSummary
from bigearthnet.formats.history import HistoryRow

log = logging.getLogger("bigearthnet")
# PR curves are step functions (as sklearn draws them)
STEPS: dict[str, Any] = {"drawstyle": "steps-post"}


def write_plots(out_dir: Path, plots: dict[str, bytes]) -> None:
    """Rank 0: the rendered PNGs, each written atomically."""
    for name, png in plots.items():
        with atomic_path(out_dir / name) as tmp:
            tmp.write_bytes(png)


def save_figure(fig, path: Path) -> None:
    """Render a matplotlib Figure with the Agg canvas (no pyplot, no GUI) atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(png_bytes(fig))


def png_bytes(fig) -> bytes:
    """A matplotlib Figure rendered to PNG with the Agg canvas (no pyplot, no GUI)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


PLOTS = ("pr_curves.png", "training_curves.png", "f1_per_class.png")  # in drawing order


def draw_plots(renderers: dict) -> dict[str, bytes]:
    """Rank 0: run the renderers (name -> function returning PNG bytes, or None for no plot);
    a plot that fails is left out with a warning: a figure must never cost the metrics."""
    drawn: dict[str, bytes] = {}
    for name, draw in renderers.items():
        try:
            png = draw()
        except Exception as err:  # noqa: BLE001
            log.warning("plot %s not drawn: %s: %s", name, type(err).__name__, first_line(err))
            continue
        if png is not None:
            drawn[name] = png
    return drawn


def _short(name: str, width: int = 40) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def plot_f1_per_class(summary: EvalSummary) -> bytes:
    from matplotlib.figure import Figure

    rows = summary.per_class
    fig = Figure(figsize=(8, 1.5 + 0.28 * len(rows)))
    ax = fig.add_subplot()
    positions = np.arange(len(rows))
    ax.barh(positions, [r.f1 for r in rows], color="tab:blue")
    ax.set_yticks(positions, [f"{_short(r.name)} ({r.support})" for r in rows])
    ax.invert_yaxis()  # class 0 at the top, as in the tables
    ax.axvline(summary.micro_f1, color="tab:red", ls="--", label="micro F1")
    ax.axvline(summary.macro_f1, color="tab:green", ls=":", label="macro F1")
    ax.set_xlim(0, 1)
    ax.set_xlabel("F1 (class support in brackets)")
    ax.set_title(f"per-class F1 on {summary.split} ({summary.count} patches)")
    ax.legend(loc="lower right")
    return png_bytes(fig)


def plot_pr_curves(labels: np.ndarray, scores: np.ndarray, classes: list[str]) -> bytes:
    from matplotlib.figure import Figure
    from sklearn.metrics import average_precision_score, precision_recall_curve

    truth = labels > 0
    fig = Figure(figsize=(11, 7))
    ax = fig.add_subplot()
    colours = [f"C{i % 10}" for i in range(len(classes))]
    for c in np.flatnonzero(truth.any(axis=0)):
        precision, recall, _ = precision_recall_curve(truth[:, c], scores[:, c])
        ap = average_precision_score(truth[:, c], scores[:, c])
        style = "-" if c < 10 else "--" if c < 20 else ":"  # 10 colours, 19 or 43 classes
        label = f"{_short(classes[c], 32)} (AP {ap:.2f})"
        ax.plot(recall, precision, color=colours[c], ls=style, lw=1, label=label, **STEPS)
    if truth.any():
        precision, recall, _ = precision_recall_curve(truth.ravel(), scores.ravel())
        ap = average_precision_score(truth.ravel(), scores.ravel())
        ax.plot(recall, precision, color="black", lw=2.5, label=f"micro (AP {ap:.2f})", **STEPS)
    ax.set(xlim=(0, 1), ylim=(0, 1.02), xlabel="recall", ylabel="precision")
    ax.set_title("precision-recall curves (classes with positives)")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7)
    return png_bytes(fig)


def plot_training_curves(history: list[HistoryRow]) -> bytes:
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    epochs = [row.epoch for row in history]
    fig = Figure(figsize=(13, 4))
    panels = (
        (("loss", "val_loss"), "loss (binary cross-entropy)"),
        (("val_micro_f1", "val_macro_f1"), "validation F1"),
        (("lr",), "learning rate at epoch end"),
    )
    for i, (keys, title) in enumerate(panels, start=1):
        ax = fig.add_subplot(1, 3, i)
        for key in keys:
            values = [getattr(row, key) for row in history]
            ax.plot(epochs, values, marker="o", ms=3, label=key)
        ax.set(title=title, xlabel="epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend()
    return png_bytes(fig)
