"""The evaluation report's figures, drawn on rank 0 with matplotlib's Agg canvas (no
pyplot, no GUI): per-class F1, precision-recall curves, the training curves and, with the
dense head, the pixel confusion matrix. The run page shows the same figures. Class names
are never cut: F1 bars wrap them, and the PR curves are small multiples (a panel per class,
titled with its name and AP) rather than 19 or 43 curves told apart by colour in one
legend."""

from __future__ import annotations

import io
import logging
import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.util import atomic_path, first_line
from bigearthnet.evaluation.pixel_metrics import pixel_scores
from bigearthnet.evaluation.summary import EvalSummary
from bigearthnet.formats.history import HistoryRow

log = logging.getLogger("bigearthnet")
# PR curves are step functions (as sklearn draws them)
STEPS: dict[str, Any] = {"drawstyle": "steps-post"}
MAX_CURVE_POINTS = 400  # per PR curve: the shape intact, a page and a PNG small
PR_COLUMNS = 5  # panels per row of the PR figure
PR_TITLE_WIDTH = 30  # characters per line of a panel's class name
NAME_WIDTH = 48  # characters per line of a class name beside its F1 bar


def write_plots(out_dir: Path, plots: dict[str, bytes]) -> None:
    """Rank 0: the rendered PNGs, each written atomically; a plot not drawn this time is
    removed, so every plot in an evaluation folder is of its evaluation (the run page
    shows them as they are)."""
    for name in PLOTS:
        if name not in plots:
            (out_dir / name).unlink(missing_ok=True)
    for name, png in plots.items():
        with atomic_path(out_dir / name) as tmp:
            tmp.write_bytes(png)


def save_figure(fig, path: Path, *, title: str | None = None) -> None:
    """Render a matplotlib Figure with the Agg canvas (no pyplot, no GUI) atomically;
    ``title`` also goes in the PNG's Title text field."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(png_bytes(fig, title=title))


def png_bytes(fig, *, title: str | None = None) -> bytes:
    """A matplotlib Figure rendered to PNG with the Agg canvas (no pyplot, no GUI)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    metadata = {"Title": title} if title else None
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata=metadata)
    return buf.getvalue()


PR_CURVES_PLOT = "pr_curves.png"
TRAINING_PLOT = "training_curves.png"
F1_PLOT = "f1_per_class.png"
PIXEL_CONFUSION_PLOT = "pixel_confusion.png"
PLOTS = (PR_CURVES_PLOT, TRAINING_PLOT, F1_PLOT, PIXEL_CONFUSION_PLOT)  # in drawing order
# what the dense head was scored against, as the confusion figure's panels say it
AGAINST_WORDS = {"reference": "the reference maps", "truth": "the truth"}


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


def _wrapped(name: str, width: int) -> str:
    """A class name in full, on as many lines of ``width`` characters as it needs."""
    return "\n".join(textwrap.wrap(name, width, break_on_hyphens=False)) or name


def f1_per_class_figure(summary: EvalSummary):
    """Per-class F1 as bars, classes in index order with their support, full names."""
    from matplotlib.figure import Figure

    rows = summary.per_class
    labels = [_wrapped(f"{r.name} ({r.support})", NAME_WIDTH) for r in rows]
    lines = sum(label.count("\n") + 1 for label in labels)
    fig = Figure(figsize=(9, 1.2 + 0.2 * lines + 0.08 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    positions = np.arange(len(rows))
    bars = ax.barh(positions, [r.f1 for r in rows], color="tab:blue")
    ax.bar_label(bars, fmt="%.2f", padding=2, fontsize=7)  # a zero F1 shows as 0.00, not nothing
    ax.set_yticks(positions, labels, fontsize=8)
    ax.invert_yaxis()  # class 0 at the top, as in the tables
    ax.axvline(summary.micro_f1, color="tab:red", ls="--", label="micro F1")
    ax.axvline(summary.macro_f1, color="tab:green", ls=":", label="macro F1")
    ax.set_xlim(0, 1)
    ax.set_xlabel("F1 (class support in brackets)")
    ax.set_title(f"per-class F1 on {summary.split} ({summary.count} patches)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.06 * 9 / fig.get_figheight()), ncol=2)
    return fig


def plot_f1_per_class(summary: EvalSummary) -> bytes:
    return png_bytes(f1_per_class_figure(summary))


def pr_curves_figure(labels: np.ndarray, scores: np.ndarray, classes: list[str]):
    """Small multiples: the pooled (micro) curve first, then one panel per class titled
    with its full name, AP and positives, the micro curve in grey behind it for reference.
    One curve per panel needs no palette and no legend, so 19 or 43 classes stay readable."""
    from matplotlib.figure import Figure
    from sklearn.metrics import average_precision_score

    truth = labels > 0
    panels = len(classes) + 1
    rows = math.ceil(panels / PR_COLUMNS)
    fig = Figure(figsize=(2.6 * PR_COLUMNS, 2.35 * rows))
    axes = fig.subplots(rows, PR_COLUMNS, squeeze=False).ravel()
    pooled = _pr_curve(truth.ravel(), scores.ravel()) if truth.any() else None
    if pooled is not None:
        ap = average_precision_score(truth.ravel(), scores.ravel())
        axes[0].plot(*pooled, color="black", lw=1.6, **STEPS)
        axes[0].set_title(f"all classes pooled (micro)\nAP {ap:.2f}", fontsize=8)
    for c, name in enumerate(classes):
        ax, positives = axes[c + 1], int(truth[:, c].sum())
        if pooled is not None:
            ax.plot(*pooled, color="0.75", lw=1, **STEPS)
        if positives:
            ap = average_precision_score(truth[:, c], scores[:, c])
            ax.plot(*_pr_curve(truth[:, c], scores[:, c]), color="tab:blue", lw=1.3, **STEPS)
            note = f"AP {ap:.2f}, {positives:,} positives"
        else:
            note = "no positives in this split"
        ax.set_title(f"{c}. {_wrapped(name, PR_TITLE_WIDTH)}\n{note}", fontsize=8)
    for ax in axes[panels:]:
        ax.set_axis_off()
    for index, ax in enumerate(axes[:panels]):
        # three ticks: enough to read a panel, and ticks are most of the drawing time
        ax.set(xlim=(0, 1), ylim=(0, 1.02), xticks=(0, 0.5, 1), yticks=(0, 0.5, 1))
        ax.tick_params(labelsize=7, labelleft=index % PR_COLUMNS == 0,
                       labelbottom=index >= panels - PR_COLUMNS)  # fmt: skip
    # Fixed spacing: constrained layout would triple the drawing time of 20-44 panels.
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.5 / fig.get_figheight(),
                        top=1 - 1.0 / fig.get_figheight(), hspace=0.7, wspace=0.12)  # fmt: skip
    fig.supxlabel("recall", fontsize=9)
    fig.supylabel("precision", fontsize=9)
    fig.suptitle("Precision-recall per class (blue) over the pooled micro curve (grey)")
    return fig


def plot_pr_curves(labels: np.ndarray, scores: np.ndarray, classes: list[str]) -> bytes:
    return png_bytes(pr_curves_figure(labels, scores, classes))


def _pr_curve(truth: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(recall, precision) of one curve, thinned to at most MAX_CURVE_POINTS points: a
    split of 120,000 patches gives as many thresholds, far more than a panel can show."""
    from sklearn.metrics import precision_recall_curve

    precision, recall, _ = precision_recall_curve(truth, scores)
    if len(recall) > MAX_CURVE_POINTS:
        keep = np.unique(np.linspace(0, len(recall) - 1, MAX_CURVE_POINTS).round().astype(int))
        precision, recall = precision[keep], recall[keep]
    return recall, precision


def pixel_confusion_figure(confusions: dict[str, np.ndarray]):
    """A panel per reference: each of its classes' pixels (rows) shared out over the
    classes the dense head predicts (columns), in % of the row: the diagonal is the
    recall; a class without reference pixels is an empty row. Cells of 1 % and more say
    their share."""
    from matplotlib.figure import Figure

    classes = constants.CLASSES_19
    fig = Figure(figsize=(7.2 * len(confusions) + 2.6, 7.4), layout="constrained")
    axes = fig.subplots(1, len(confusions), squeeze=False).ravel()
    for index, (ax, (against, confusion)) in enumerate(zip(axes, confusions.items())):
        counts = np.asarray(confusion, dtype=np.float64)
        rows = counts.sum(axis=1, keepdims=True)
        share = 100 * np.divide(counts, rows, out=np.zeros_like(counts), where=rows > 0)
        image = ax.imshow(share, cmap="Blues", vmin=0, vmax=100)
        for (r, c), value in np.ndenumerate(share):
            if value >= 1:
                ax.text(c, r, f"{value:.0f}", ha="center", va="center", fontsize=5.5,
                        color="white" if value > 60 else "black")  # fmt: skip
        ticks = np.arange(len(classes))
        names = [_wrapped(f"{i}. {name}", PR_TITLE_WIDTH) for i, name in enumerate(classes)]
        ax.set_yticks(ticks, names if index == 0 else [str(i) for i in ticks], fontsize=6)
        ax.set_xticks(ticks, [str(i) for i in ticks], fontsize=6)
        scores = pixel_scores(counts)
        shown = (
            f", overall accuracy {scores.overall_accuracy:.2f}, mIoU {scores.miou:.2f}"
            if scores.overall_accuracy is not None and scores.miou is not None
            else ""
        )
        ax.set_title(f"against {AGAINST_WORDS.get(against, against)}\n"
                     f"{scores.pixel_count:,} labelled pixels{shown}", fontsize=9)  # fmt: skip
        ax.set(xlabel="class predicted by the dense head", ylabel="class of the reference")
    fig.colorbar(image, ax=axes.tolist(), shrink=0.6, label="% of the reference class's pixels")
    return fig


def plot_pixel_confusion(confusions: dict[str, np.ndarray]) -> bytes:
    return png_bytes(pixel_confusion_figure(confusions))


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
