"""A batch-size study: the same recipe at several global batch sizes, each trained until a
target validation micro-F1 or a budget, to answer "up to which batch size can we scale?".

Following Shallue et al. (2018, "Measuring the effects of data parallelism on neural network
training"), the figure of merit is the number of optimizer steps to reach the target: under
perfect scaling doubling the batch halves it; past the critical batch size it stops falling.
McCandlish et al. (2018) predict that point by the gradient noise scale B_simple, which
``train.py`` measures while training (``history.csv``, ``gns_b_simple``); the study marks it.

Each point (:mod:`bigearthnet.scaling.study_points`) is a normal ``train.py`` run in
``OUT/runs/b<global batch>``, launched on ``ranks`` processes (horovodrun on one machine,
srun inside a Slurm allocation), with

* global batch = per-rank batch x ranks x accumulation passes (passes only where the per-rank
  batch would exceed ``max_rank_batch``);
* the peak LR from the scaling rule, ``base_lr`` at ``base_batch`` scaled linearly (Goyal et
  al. 2017) or by the square root (Krizhevsky 2014; the rule LAMB was tuned with), reached
  after train.py's warm-up;
* validation every ``eval_steps`` steps (capped epochs), and at the larger batches often
  enough to resolve the steps to target within ``resolution`` (10 %): every resolution x
  the perfect-scaling bound from the last point that reached the target, so 20 steps are
  measured to 2 steps, not to the next multiple of 10; the budget in updates is the same.

Rerunning the study resumes a point whose run has not ended, and reads one that ended
(its budget spent, its target met, stopped early) without launching it. A point is the
same run only with the same recipe and budget (:mod:`bigearthnet.core.recipe`): a rerun
whose settings would give a point made before other train.py options (another LR, batch,
optimizer, budget...) is refused before anything trains, so a row never describes a run
made otherwise. Batches larger than the train split are refused up front too.
"""

from __future__ import annotations

import math
import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from bigearthnet.core import recipe
from bigearthnet.core.config import TrainConfig, load_run_config
from bigearthnet.core.errors import EXIT_BAD_INPUT, EXIT_FAILED, ConfigError, RunFailed
from bigearthnet.formats.history import HistoryRow, read_history
from bigearthnet.formats.manifest import read_manifest
from bigearthnet.formats.run_folder import CONFIG, STATUS
from bigearthnet.formats.run_status import read_status
from bigearthnet.scaling.study_outputs import (
    STUDY_RUNS,
    StudyResult,
    analyse,
    claim_study_folder,
    describe,
    write_outputs,
)
from bigearthnet.scaling.study_points import (
    StudyPoint,
    plan_points,
    point_config,
    train_command,
    with_resolution,
)
from bigearthnet.scaling.study_settings import StudySettings


def updates_per_evaluation(settings: StudySettings, point: StudyPoint) -> tuple[int, float]:
    """(optimizer updates, passes over the training split) between two validations."""
    total = read_manifest(settings.data).count("train")
    cap = point.eval_steps * point.passes if settings.budget == "updates" else None
    steps = point.plan.steps(total, cap)
    return point.plan.updates(steps), point.plan.epoch_samples(total, cap) / total


def summarise(
    settings: StudySettings, point: StudyPoint, rows: Sequence[HistoryRow], *, exit_code: int
) -> StudyResult:
    """A point's result from its history and train.py's exit code (1: a non-finite loss)."""
    updates, fraction = updates_per_evaluation(settings, point)
    reached = next((r for r in rows if r.val_micro_f1 >= settings.target_f1), None)
    finite = [r.val_micro_f1 for r in rows if math.isfinite(r.val_micro_f1)]
    noise = [r.gns_b_simple for r in rows if r.gns_b_simple is not None]
    late = noise[len(noise) // 2 :]
    speeds = [r.samples_per_s / r.world_size for r in rows[1:] or rows if r.world_size]
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
        late_b_simple=statistics.median(late) if late else None,
        samples_per_s_per_rank=statistics.median(speeds) if speeds else None,
        eval_steps=updates,
        final_val_micro_f1=finite[-1] if finite else None,
        updates=updates * len(rows),
    )


def run_study(settings: StudySettings, *, log=print) -> list[StudyResult]:
    """Run (or resume) every point, write ``study.csv`` and the plot; returns the rows. A
    point whose run ended with these settings is read, not launched again."""
    settings, points = checked_points(settings)
    claim_study_folder(settings.out)
    check_existing_points(settings, points)
    results: list[StudyResult] = []
    for planned in points:
        point = with_resolution(settings, planned, _last_reached(results))
        run_dir = point_dir(settings, point)
        ended = ended_result(settings, point, run_dir)
        if ended is not None:
            log(f"study: global batch {point.global_batch}: its run ended with these settings")
        results.append(ended or _train_point(settings, point, run_dir, log))
        log(f"study: {format_result(results[-1])}")
    analysis = analyse(settings, results)
    write_outputs(settings, results, analysis)
    for line in describe(analysis):
        log(f"study: {line}")
    return results


def _last_reached(results: Sequence[StudyResult]) -> StudyResult | None:
    """The last point that reached the target without diverging (the resolution's bound)."""
    reached = [r for r in results if r.steps_to_target is not None and not r.diverged]
    return reached[-1] if reached else None


def point_dir(settings: StudySettings, point: StudyPoint) -> Path:
    return settings.out / STUDY_RUNS / f"b{point.global_batch}"


def _train_point(settings: StudySettings, point: StudyPoint, run_dir: Path, log) -> StudyResult:
    """Launch (or resume) the point's train.py; its result from the history it wrote."""
    every = "epoch" if settings.budget == "epochs" else f"{point.eval_steps} step(s)"
    log(
        f"study: global batch {point.global_batch} = {point.ranks} rank(s) x "
        f"{point.rank_batch} x {point.passes} pass(es), peak LR {point.peak_lr:.4g}, "
        f"validation every {every}"
    )
    done = subprocess.run(train_command(settings, point, run_dir), check=False)
    if done.returncode == EXIT_BAD_INPUT:
        raise ConfigError(f"{run_dir}: train.py refused its input (its line is above)")
    if done.returncode not in (0, EXIT_FAILED):
        raise RunFailed(f"{run_dir}: train.py exited {done.returncode}; rerun resumes")
    if done.returncode == 0 and read_status(run_dir) is None:
        # srun can exit 0 when it could not start the tasks ("task N launch failed")
        raise RunFailed(
            f"{run_dir}: the launcher exited 0 but train.py did not end the run "
            f"(no {STATUS}); rerun resumes"
        )
    rows = read_history(run_dir)  # [] when the run wrote no epoch
    return summarise(settings, point, rows, exit_code=done.returncode)


def checked_points(settings: StudySettings) -> tuple[StudySettings, list[StudyPoint]]:
    """The study's points once what needs no training is checked: the options train.py would
    get (the study's and those after ``--``), as train.py checks them, and every batch
    against the train split; ConfigError before anything is written otherwise. The
    settings come back with the optimizer train.py gets (``-- --optimizer`` wins), so the
    rows say what trained."""
    points = plan_points(settings)
    if not points:
        return settings, points
    cfg = point_config(settings, points[0], settings.out / STUDY_RUNS / "check")
    total = read_manifest(settings.data).count("train")
    for point in points:
        too_large = point.plan.too_large_for(total)
        if too_large:
            raise ConfigError(
                f"--batches: {too_large} (the train split of {settings.data}); give batch "
                f"sizes of at most {total:,}"
            )
    return replace(settings, optimizer=cfg.optimizer), points


def check_existing_points(settings: StudySettings, points: Sequence[StudyPoint]) -> None:
    """Before anything trains: ConfigError when a point already in the folder was made with
    other settings than this study would give it. Checked in order, as far as the runs go:
    a point's validation interval follows from the points before it."""
    results: list[StudyResult] = []
    for planned in points:
        point = with_resolution(settings, planned, _last_reached(results))
        run_dir = point_dir(settings, point)
        if not (run_dir / CONFIG).is_file():
            return  # not started: the points after it follow from its result
        made_alike(settings, point, run_dir)
        results.append(summarise(settings, point, read_history(run_dir), exit_code=0))


def made_alike(
    settings: StudySettings, point: StudyPoint, run_dir: Path
) -> tuple[TrainConfig, TrainConfig]:
    """(the options the point's run was made with, those it would get now); ConfigError when
    they differ in recipe or length: its row would describe a run this study does not make
    (another LR relabelled as this one, a budget that shaped another schedule)."""
    past, cfg = load_run_config(run_dir), point_config(settings, point, run_dir)
    found = recipe.changes(past, cfg, recipe.RECIPE_OPTIONS + recipe.LENGTH_OPTIONS)
    if found:
        raise ConfigError(
            f"{run_dir}: this point was trained with other settings (train.py "
            f"{recipe.listed(found)}) than this study gives it; its row would describe a run "
            "the study does not make: use another --out (or remove that folder to retrain it)"
        )
    return past, cfg


def ended_result(settings: StudySettings, point: StudyPoint, run_dir: Path) -> StudyResult | None:
    """The result of a point whose run ended with these settings and would end again at
    once (finished its budget, stopped at a target it still meets, stopped early by the
    same rule): nothing is launched for it. None when it has to (go on) training."""
    if not (run_dir / CONFIG).is_file():
        return None
    past, cfg = made_alike(settings, point, run_dir)
    status = read_status(run_dir)
    rows = read_history(run_dir)
    if status is None or not rows:
        return None
    still = {
        "finished": status.epoch >= cfg.epochs,
        "target": cfg.target_f1 is not None and rows[-1].val_micro_f1 >= cfg.target_f1,
        "early_stop": (past.early_stopping_patience, past.select_metric)
        == (cfg.early_stopping_patience, cfg.select_metric),
    }
    return summarise(settings, point, rows, exit_code=0) if still.get(status.state) else None


def format_result(result: StudyResult) -> str:
    steps = "not reached" if result.steps_to_target is None else f"{result.steps_to_target}"
    noise = "n/a" if result.mean_b_simple is None else f"{result.mean_b_simple:,.0f}"
    state = " (diverged)" if result.diverged else ""
    return (
        f"batch {result.global_batch} {result.optimizer}: steps to target {steps}, best F1 "
        f"{result.best_val_micro_f1:.3f}, B_simple {noise}{state}"
    )
