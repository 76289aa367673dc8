"""A batch-size study: the same recipe at several global batch sizes, each trained until a
target validation micro-F1 or a budget, to answer "up to which batch size can we scale?".

Following Shallue et al. (2018, "Measuring the effects of data parallelism on neural network
training"), the figure of merit is the number of optimizer steps to reach the target: under
perfect scaling doubling the batch halves it; past the critical batch size it stops falling.
McCandlish et al. (2018) predict that point by the gradient noise scale B_simple, which
``train.py`` measures while training (``history.csv``, ``gns_b_simple``); the study marks it.

Each point is a normal ``train.py`` run in ``OUT/runs/b<global batch>``, launched on
``ranks`` processes (horovodrun on one machine, srun inside a Slurm allocation), with

* global batch = per-rank batch x ranks x accumulation passes (passes only where the per-rank
  batch would exceed ``max_rank_batch``);
* the peak LR from the scaling rule, ``base_lr`` at ``base_batch`` scaled linearly (Goyal et
  al. 2017) or by the square root (Krizhevsky 2014; the rule LAMB was tuned with), reached
  after train.py's warm-up;
* validation every ``eval_steps`` steps (capped epochs), so steps-to-target is measured
  at the same resolution at every batch size.

A point is rerun only when its run is not finished: rerunning the study resumes it.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bigearthnet.core.errors import EXIT_FAILED, ConfigError, RunFailed
from bigearthnet.core.util import atomic_path, write_csv
from bigearthnet.data.partition import epoch_plan, updates_per_epoch
from bigearthnet.formats.history import HistoryRow, read_history
from bigearthnet.formats.shards import read_manifest

STUDY_CSV = "study.csv"
STUDY_PLOT = "steps_to_target.png"
RULES = ("linear", "sqrt")
LAUNCHERS = ("auto", "horovodrun", "srun", "none")


@dataclass(frozen=True)
class StudySettings:
    """What the study runs; every point shares it but the batch size and the LR."""

    data: Path
    out: Path
    batches: tuple[int, ...]
    target_f1: float
    optimizer: str = "sgd"
    base_lr: float = 0.1
    base_batch: int = 256
    rule: str = "linear"
    ranks: int = 1
    max_rank_batch: int = 512
    epochs: int = 20  # budget, in evaluations (capped epochs of eval_steps steps)
    eval_steps: int = 10
    warmup_epochs: float = 2.0
    launcher: str = "auto"
    train_args: tuple[str, ...] = field(default_factory=tuple)  # more train.py flags


@dataclass(frozen=True)
class StudyPoint:
    """One global batch size and how it is made."""

    global_batch: int
    ranks: int
    rank_batch: int
    passes: int
    peak_lr: float


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


def plan_points(settings: StudySettings) -> list[StudyPoint]:
    """The runs of the study, smallest batch first; ConfigError for a batch the ranks and
    passes cannot make exactly."""
    return [_plan_point(settings, batch) for batch in sorted(set(settings.batches))]


def _plan_point(settings: StudySettings, global_batch: int) -> StudyPoint:
    ranks = min(settings.ranks, global_batch)
    passes = math.ceil(global_batch / (ranks * settings.max_rank_batch))
    rank_batch = global_batch // (ranks * passes)
    if rank_batch * ranks * passes != global_batch:
        raise ConfigError(
            f"--batches: {global_batch} is not a multiple of {ranks} rank(s) x {passes} "
            f"pass(es); choose batches divisible by the number of ranks"
        )
    return StudyPoint(global_batch, ranks, rank_batch, passes, peak_lr(settings, global_batch))


def peak_lr(settings: StudySettings, global_batch: int) -> float:
    """The scaling rule: ``base_lr`` at ``base_batch``, scaled linearly or by the root."""
    ratio = global_batch / settings.base_batch
    return settings.base_lr * (ratio if settings.rule == "linear" else math.sqrt(ratio))


def train_command(settings: StudySettings, point: StudyPoint, run_dir: Path) -> list[str]:
    """The command line of one point: launcher + ``train.py`` with the point's options.
    train.py scales ``--lr`` by the number of ranks, so it gets the peak LR / ranks."""
    train = [
        sys.executable,
        "-m",
        "bigearthnet.cli.train",
        "--data",
        str(settings.data),
        "--run-dir",
        str(run_dir),
        "--batch-size",
        str(point.rank_batch),
        "--backward-passes-per-step",
        str(point.passes),
        "--lr",
        repr(point.peak_lr / point.ranks),
        "--optimizer",
        settings.optimizer,
        "--epochs",
        str(settings.epochs),
        "--max-steps-per-epoch",
        str(settings.eval_steps * point.passes),
        "--warmup-epochs",
        repr(settings.warmup_epochs),
        "--target-f1",
        repr(settings.target_f1),
        "--no-eval-test",
        "--no-progress",
        *settings.train_args,
    ]
    return _launcher(settings.launcher, point.ranks) + train


def _launcher(kind: str, ranks: int) -> list[str]:
    if kind == "auto":
        kind = "srun" if "SLURM_JOB_ID" in os.environ else "horovodrun" if ranks > 1 else "none"
    if kind == "none":
        if ranks > 1:
            raise ConfigError("--launcher none runs 1 process; use --ranks 1")
        return []
    if kind == "srun":
        return ["srun", "--ntasks", str(ranks), "--mpi=pmix", "--kill-on-bad-exit=1"]
    horovodrun = Path(sys.executable).with_name("horovodrun")
    return [str(horovodrun), "-np", str(ranks), "-H", f"localhost:{ranks}", "--gloo"]


def updates_per_evaluation(settings: StudySettings, point: StudyPoint) -> tuple[int, float]:
    """(optimizer updates, passes over the training split) between two validations."""
    total = read_manifest(settings.data).count("train")
    steps, samples = epoch_plan(
        total,
        world_size=point.ranks,
        batch_size=point.rank_batch,
        max_steps=settings.eval_steps * point.passes,
    )
    seen = (samples if samples is not None else math.ceil(total / point.ranks)) * point.ranks
    return updates_per_epoch(steps, point.passes), min(1.0, seen / total)


def summarise(
    settings: StudySettings, point: StudyPoint, rows: Sequence[HistoryRow], *, exit_code: int
) -> StudyResult:
    """A point's result from its history and train.py's exit code (1: a non-finite loss)."""
    updates, fraction = updates_per_evaluation(settings, point)
    reached = next((r for r in rows if r.val_micro_f1 >= settings.target_f1), None)
    finite = [r.val_micro_f1 for r in rows if math.isfinite(r.val_micro_f1)]
    noise = [r.gns_b_simple for r in rows if r.gns_b_simple is not None]
    diverged = exit_code == EXIT_FAILED or any(not math.isfinite(r.loss) for r in rows)
    return StudyResult(
        global_batch=point.global_batch,
        optimizer=settings.optimizer,
        peak_lr=point.peak_lr,
        steps_to_target=reached.epoch * updates if reached else None,
        epochs_to_target=round(reached.epoch * fraction, 4) if reached else None,
        best_val_micro_f1=max(finite, default=0.0),
        diverged=diverged,
        mean_b_simple=sum(noise) / len(noise) if noise else None,
    )


def run_study(settings: StudySettings, *, log=print) -> list[StudyResult]:
    """Run (or resume) every point, write ``study.csv`` and the plot; returns the rows."""
    results = []
    for point in plan_points(settings):
        run_dir = settings.out / "runs" / f"b{point.global_batch}"
        log(
            f"study: global batch {point.global_batch} = {point.ranks} rank(s) x "
            f"{point.rank_batch} x {point.passes} pass(es), peak LR {point.peak_lr:.4g}"
        )
        command = train_command(settings, point, run_dir)
        done = subprocess.run(command, check=False)
        if done.returncode not in (0, EXIT_FAILED):
            raise RunFailed(f"{run_dir}: train.py exited {done.returncode}; rerun resumes")
        rows = read_history(run_dir) if (run_dir / "history.csv").exists() else []
        results.append(summarise(settings, point, rows, exit_code=done.returncode))
        log(f"study: {format_result(results[-1])}")
    write_study(settings.out, results)
    plot_study(settings.out / STUDY_PLOT, results, target_f1=settings.target_f1)
    return results


def format_result(result: StudyResult) -> str:
    steps = "not reached" if result.steps_to_target is None else f"{result.steps_to_target}"
    noise = "n/a" if result.mean_b_simple is None else f"{result.mean_b_simple:,.0f}"
    state = " (diverged)" if result.diverged else ""
    return (
        f"batch {result.global_batch} {result.optimizer}: steps to target {steps}, best F1 "
        f"{result.best_val_micro_f1:.3f}, B_simple {noise}{state}"
    )


def write_study(out: Path, results: Sequence[StudyResult]) -> None:
    """``OUT/study.csv`` (one row per batch size; "not reached" where the budget ran out)."""
    header = [
        "global_batch",
        "optimizer",
        "peak_lr",
        "steps_to_target",
        "epochs_to_target",
        "best_val_micro_f1",
        "diverged",
        "mean_b_simple",
    ]
    rows = [
        [
            r.global_batch,
            r.optimizer,
            f"{r.peak_lr:.6g}",
            "not reached" if r.steps_to_target is None else r.steps_to_target,
            "not reached" if r.epochs_to_target is None else r.epochs_to_target,
            f"{r.best_val_micro_f1:.4f}",
            "yes" if r.diverged else "no",
            "n/a" if r.mean_b_simple is None else f"{r.mean_b_simple:.1f}",
        ]
        for r in results
    ]
    write_csv(out / STUDY_CSV, header, rows)


def plot_study(path: Path, results: Sequence[StudyResult], *, target_f1: float) -> None:
    """Log-log steps to target vs global batch (Shallue et al.'s picture): the measured
    points, the perfect-scaling line through the smallest batch that reached the target,
    points that did not reach it (or diverged) on the top edge, and B_simple marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    anchor = [(r.global_batch, r.steps_to_target) for r in results if r.steps_to_target]
    missed = [r for r in results if r.steps_to_target is None]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    if anchor:
        batch0, steps0 = anchor[0]
        xs = [r.global_batch for r in results]
        ideal = [steps0 * batch0 / b for b in xs]
        ax.plot(xs, ideal, "--", color="grey", label="perfect scaling")
        ax.plot(
            [batch for batch, _ in anchor],
            [steps for _, steps in anchor],
            "o-",
            label=f"steps to val micro-F1 {target_f1:g}",
        )
    top = max((r.steps_to_target or 1 for r in results), default=1) * 2
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
    noise = [r.mean_b_simple for r in results if r.mean_b_simple is not None]
    if noise:
        b_simple = sorted(noise)[len(noise) // 2]
        ax.axvline(b_simple, color="tab:orange", label=f"B_simple ~ {b_simple:,.0f}")
    ax.set(xscale="log", yscale="log", xlabel="global batch size", ylabel="optimizer steps")
    ax.set_title(f"Steps to target vs batch size ({results[0].optimizer if results else ''})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
