"""The evaluation's figures name every class in full: a PR panel per class (no legend to cut,
no palette to tell apart) and F1 bars labelled with the whole name."""

from __future__ import annotations

import numpy as np

from bigearthnet.core.constants import CLASSES_19
from bigearthnet.evaluation import plots
from bigearthnet.evaluation.summary import ClassScores, EvalSummary


def _titles(figure) -> list[str]:
    return [ax.get_title().replace("\n", " ") for ax in figure.axes if ax.axison]


def test_pr_figure_has_a_panel_per_class_with_its_full_name() -> None:
    rng = np.random.default_rng(0)
    labels = (rng.random((300, 19)) < 0.2).astype(np.uint8)
    labels[:, 16] = 0  # a class without positives in the split
    scores = np.clip(labels * 0.5 + rng.random((300, 19)) * 0.6, 0, 1).astype(np.float32)
    figure = plots.pr_curves_figure(labels, scores, list(CLASSES_19))
    titles = _titles(figure)
    assert len(titles) == 20 and titles[0].startswith("all classes pooled (micro)")
    for index, (name, title) in enumerate(zip(CLASSES_19, titles[1:])):
        assert title.startswith(f"{index}. {name} ")  # whole, wrapped only at spaces
    assert titles[17].endswith("no positives in this split")
    assert all(not ax.get_legend() for ax in figure.axes)
    curves = [line for ax in figure.axes for line in ax.get_lines()]
    assert max(len(line.get_xdata()) for line in curves) <= plots.MAX_CURVE_POINTS


def test_f1_bars_carry_every_class_name_whole() -> None:
    rows = tuple(
        ClassScores(name, 10 + i, 0.5, 0.5, i / 19, 0.5, i) for i, name in enumerate(CLASSES_19)
    )
    summary = EvalSummary(
        split="test", epoch=1, checkpoint_path="ckpt", checkpoint_digest=None, count=100,
        micro_f1=0.6, macro_f1=0.5, micro_map=0.7, macro_map=0.6, micro_precision=0.6,
        micro_recall=0.6, macro_precision=0.5, macro_recall=0.5, macro_classes=19,
        threshold=0.5, tuned_thresholds=None, per_class=rows,
    )  # fmt: skip
    (axis,) = plots.f1_per_class_figure(summary).axes
    labels = [tick.get_text().replace("\n", " ") for tick in axis.get_yticklabels()]
    assert labels == [f"{name} ({10 + i})" for i, name in enumerate(CLASSES_19)]


def test_a_plot_not_drawn_again_leaves_no_older_one(tmp_path) -> None:
    """The run page shows an evaluation folder's plots as they are: none may be stale."""
    for name in plots.PLOTS:
        (tmp_path / name).write_bytes(b"an earlier evaluation's")
    plots.write_plots(tmp_path, {plots.F1_PLOT: b"this one"})
    assert sorted(p.name for p in tmp_path.iterdir()) == [plots.F1_PLOT]
    assert (tmp_path / plots.F1_PLOT).read_bytes() == b"this one"
