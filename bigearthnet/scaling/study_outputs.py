"""What a batch-size study writes: ``study.csv`` (a row per batch size), ``study.json`` (the
rows, the fit of the critical batch size, the measured noise scale beside it and the
recommended job sizes) and ``steps_to_target.png`` (steps and examples to the target against
the batch, log-log, with the fitted trade-off). :func:`write_outputs` is the writer of all
three and :func:`read_study` the reader of ``study.json``. What a study runs is
:mod:`bigearthnet.scaling.study_settings`'.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bigearthnet.core.errors import InputError
from bigearthnet.core.folders import claim_folder
from bigearthnet.core.util import atomic_path, atomic_write_json, write_csv
from bigearthnet.scaling.batch_fit import (
    JobSize,
    NoFit,
    TradeoffFit,
    compare_noise_scale,
    fit_tradeoff,
    recommend,
)
from bigearthnet.scaling.study_settings import StudySettings

STUDY_CSV = "study.csv"
STUDY_JSON = "study.json"
STUDY_PLOT = "steps_to_target.png"
STUDY_HTML = "study.html"
STUDY_RUNS = "runs"  # runs/b<global batch>/: one training run per point
STUDY_MARK = ".bigearthnet-batch-study"


def claim_study_folder(out: Path) -> None:
    """``out`` becomes (or already is) a batch study's folder; any other is refused."""
    own = (STUDY_RUNS, STUDY_CSV, STUDY_JSON, STUDY_PLOT, STUDY_HTML)
    claim_folder(out, mark=STUDY_MARK, made_by="bigearthnet-batch-study", own_names=own)


@dataclass(frozen=True)
class StudyResult:
    """One row of ``study.csv``."""

    global_batch: int
    optimizer: str
    peak_lr: float
    steps_to_target: int | None  # None: not reached within the budget
    epochs_to_target: float | None  # in passes over the training split
    best_val_micro_f1: float
    diverged: bool
    mean_b_simple: float | None
    late_b_simple: float | None = None  # median over the run's second half: B_simple grows
    # as the loss falls, so the late value is the one to set beside B_crit
    samples_per_s_per_rank: float | None = None  # median over the epochs after the first
    eval_steps: int | None = None  # updates between validations: the resolution of the steps
    final_val_micro_f1: float | None = None  # the last validation of the run
    updates: int | None = None  # optimizer updates the run trained


@dataclass(frozen=True)
class StudyAnalysis:
    """The study's answer: the fit (or why there is none), B_simple, the job sizes."""

    fit: TradeoffFit | NoFit
    b_simple: float | None  # median over the points of each run's late-training median
    noise_scale_words: str
    rank_batch: int  # the per-rank batch the recommendation counts ranks in
    samples_per_s_per_rank: float | None  # measured, median over the points
    jobs: tuple[JobSize, ...] = field(default_factory=tuple)


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def analyse(settings: StudySettings, results: Sequence[StudyResult]) -> StudyAnalysis:
    """Fit the points that reached the target (and did not diverge) and recommend."""
    usable = [r for r in results if not r.diverged]
    fit = fit_tradeoff([r.global_batch for r in usable], [r.steps_to_target for r in usable])
    b_simple = _median([r.late_b_simple for r in results])
    speed = _median([r.samples_per_s_per_rank for r in results])
    if isinstance(fit, NoFit):
        return StudyAnalysis(fit, b_simple, "", settings.max_rank_batch, speed)
    return StudyAnalysis(
        fit,
        b_simple,
        compare_noise_scale(fit, b_simple),
        settings.max_rank_batch,
        speed,
        tuple(recommend(fit, settings.max_rank_batch, speed)),
    )


def describe(analysis: StudyAnalysis) -> list[str]:
    """The answer in a few lines, for the log and the page."""
    fit = analysis.fit
    if isinstance(fit, NoFit):
        return [f"no fit of the critical batch size: {fit.reason}"]
    low, high = fit.b_crit_interval
    lines = [
        f"fitted B_crit {fit.b_crit:,.0f} ({fit.level:.0%} interval {low:,.0f}-{high:,.0f}), "
        f"S_min {fit.s_min:,.1f} steps, E_min {fit.e_min:,.0f} examples, from {fit.points} "
        "batch sizes",
        analysis.noise_scale_words,
    ]
    for job in analysis.jobs:
        cost = (
            f", {job.accelerator_hours:,.2f} accelerator-hours ({job.wall_hours:,.2f} h wall)"
            if job.accelerator_hours is not None and job.wall_hours is not None
            else ""
        )
        lines.append(
            f"{job.label}: global batch {job.global_batch:,} = {job.ranks} rank(s) x "
            f"{job.rank_batch}, ~{job.steps:,.0f} steps, {job.examples:,.0f} examples, "
            f"{job.efficiency:.0%} of perfect scaling{cost}"
        )
    return lines


def write_outputs(
    settings: StudySettings, results: Sequence[StudyResult], analysis: StudyAnalysis
) -> None:
    """study.csv, study.json, the plot (PNG) and study.html (the same numbers as the JSON,
    the plot inline as SVG)."""
    from bigearthnet.pages.render import svg, write_page

    write_study(settings.out, results)
    body = _study_body(settings, results, analysis)
    atomic_write_json(settings.out / STUDY_JSON, body)
    figure = draw_study(results, analysis, target_f1=settings.target_f1)  # selects Agg
    import matplotlib.pyplot as plt

    with atomic_path(settings.out / STUDY_PLOT) as tmp:
        figure.savefig(tmp, format="png", dpi=110)
    written = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    write_page(
        settings.out / STUDY_HTML,
        "study.html.j2",
        study=body,
        figure=svg(figure, title="steps and examples to the target against the batch size"),
        written=written,
    )
    plt.close(figure)


def _study_body(
    settings: StudySettings, results: Sequence[StudyResult], analysis: StudyAnalysis
) -> dict:
    fit = analysis.fit
    settings_body = {
        k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(settings).items()
    }
    return {
        "settings": settings_body,
        "points": [dataclasses.asdict(r) for r in results],
        "fit": None if isinstance(fit, NoFit) else {**dataclasses.asdict(fit), "e_min": fit.e_min},
        "no_fit_reason": fit.reason if isinstance(fit, NoFit) else None,
        "b_simple": analysis.b_simple,
        "noise_scale_words": analysis.noise_scale_words,
        "rank_batch": analysis.rank_batch,
        "samples_per_s_per_rank": analysis.samples_per_s_per_rank,
        "recommendation": [dataclasses.asdict(job) for job in analysis.jobs],
        "summary": describe(analysis),
    }


def read_study(out: Path) -> dict:
    """``OUT/study.json`` as written; InputError naming the file otherwise."""
    path = Path(out) / STUDY_JSON
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: missing (has the study finished a point?)") from None
    except (OSError, ValueError) as err:
        raise InputError(f"{path}: unreadable: {err}") from None


def write_study(out: Path, results: Sequence[StudyResult]) -> None:
    """``OUT/study.csv`` (one row per batch size; "not reached" where the budget ran out)."""
    header = [
        "global_batch",
        "optimizer",
        "peak_lr",
        "steps_to_target",
        "eval_steps",
        "epochs_to_target",
        "best_val_micro_f1",
        "diverged",
        "mean_b_simple",
        "late_b_simple",
        "samples_per_s_per_rank",
    ]
    rows = [
        [
            r.global_batch,
            r.optimizer,
            f"{r.peak_lr:.6g}",
            "not reached" if r.steps_to_target is None else r.steps_to_target,
            "" if r.eval_steps is None else r.eval_steps,
            "not reached" if r.epochs_to_target is None else r.epochs_to_target,
            f"{r.best_val_micro_f1:.4f}",
            "yes" if r.diverged else "no",
            "n/a" if r.mean_b_simple is None else f"{r.mean_b_simple:.1f}",
            "n/a" if r.late_b_simple is None else f"{r.late_b_simple:.1f}",
            "n/a" if r.samples_per_s_per_rank is None else f"{r.samples_per_s_per_rank:.2f}",
        ]
        for r in results
    ]
    write_csv(out / STUDY_CSV, header, rows)


def draw_study(results: Sequence[StudyResult], analysis: StudyAnalysis, *, target_f1: float):
    """Steps and examples to the target against the global batch, log-log (Shallue et al.'s
    and McCandlish et al.'s pictures): the points that reached it, the fitted trade-off and
    its B_crit, perfect scaling through the smallest reached point, the points that did not
    reach it (or diverged) on the top edge, and the measured B_simple."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    reached = [(r.global_batch, r.steps_to_target) for r in results if r.steps_to_target]
    missed = [r for r in results if r.steps_to_target is None]
    batches = [r.global_batch for r in results]
    fit = analysis.fit
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.3))
    for ax, examples in zip(axes, (False, True)):

        def y(batch: float, steps: float, examples: bool = examples) -> float:
            return batch * steps if examples else steps

        if reached:
            batch0, steps0 = reached[0]
            ideal = [y(b, steps0 * batch0 / b) for b in batches]
            ax.plot(batches, ideal, "--", color="grey", label="perfect scaling")
            ax.plot(
                [b for b, _ in reached],
                [y(b, s) for b, s in reached],
                "o",
                color="tab:blue",
                label=f"reached val micro-F1 {target_f1:g}",
            )
        if isinstance(fit, TradeoffFit):
            grid = np.geomspace(min(batches), max(batches), 100)
            ax.plot(
                grid,
                [y(b, fit.steps(b)) for b in grid],
                "-",
                color="tab:blue",
                label=f"fit: B_crit {fit.b_crit:,.0f}",
            )
            ax.axvline(fit.b_crit, color="tab:blue", alpha=0.4, linestyle=":")
            ax.axvspan(*fit.b_crit_interval, color="tab:blue", alpha=0.08)
        top = max((y(b, s) for b, s in reached), default=1.0) * 2
        for r in missed:
            ax.plot(r.global_batch, top, "x", color="red")
            ax.annotate(
                "diverged" if r.diverged else "not reached",
                (r.global_batch, top),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=8,
            )
        if analysis.b_simple is not None:
            ax.axvline(
                analysis.b_simple, color="tab:orange", label=f"B_simple ~ {analysis.b_simple:,.0f}"
            )
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="global batch size",
            ylabel="training examples" if examples else "optimizer steps",
        )
        ax.set_title(("Examples" if examples else "Steps") + " to target")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    if not isinstance(fit, TradeoffFit):
        fig.suptitle(f"no fit: {fit.reason}", fontsize=8)
    fig.tight_layout()
    return fig
