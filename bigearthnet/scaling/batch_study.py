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

import argparse
import math
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NoReturn

from bigearthnet.core import recipe
from bigearthnet.core.batch import BatchPlan
from bigearthnet.core.config import TrainConfig, load_run_config, resolve
from bigearthnet.core.dense_head import with_pixel_head
from bigearthnet.core.errors import EXIT_BAD_INPUT, EXIT_FAILED, ConfigError, RunFailed
from bigearthnet.core.options import add_config_arguments
from bigearthnet.formats.history import HistoryRow, read_history
from bigearthnet.formats.run_folder import CONFIG, STATUS
from bigearthnet.formats.run_status import read_status
from bigearthnet.formats.shards import read_manifest
from bigearthnet.scaling.study_outputs import (
    STUDY_RUNS,
    StudyResult,
    StudySettings,
    analyse,
    claim_study_folder,
    describe,
    write_outputs,
)


@dataclass(frozen=True)
class StudyPoint:
    """One global batch size and how it is made."""

    global_batch: int
    ranks: int
    rank_batch: int
    passes: int
    peak_lr: float
    eval_steps: int  # optimizer updates between validations
    validations: int  # the budget: the same number of updates at every batch size
    warmup: float  # train.py's --warmup-epochs, in validations of this point

    @property
    def plan(self) -> BatchPlan:
        return BatchPlan(self.rank_batch, self.ranks, self.passes)


def plan_points(settings: StudySettings) -> list[StudyPoint]:
    """The runs of the study, smallest batch first; ConfigError for a batch the ranks and
    passes cannot make exactly."""
    return [_plan_point(settings, batch) for batch in sorted(set(settings.batches))]


def _plan_point(settings: StudySettings, global_batch: int) -> StudyPoint:
    ranks = min(settings.ranks, global_batch)
    passes = math.ceil(global_batch / (ranks * settings.max_rank_batch))
    try:
        plan = BatchPlan.for_global(global_batch, ranks, passes)
    except ConfigError as err:
        raise ConfigError(f"--batches: {err}") from None
    return StudyPoint(
        global_batch,
        ranks,
        plan.per_rank,
        passes,
        peak_lr(settings, global_batch),
        settings.eval_steps,
        settings.epochs,
        settings.warmup_epochs,
    )


def with_resolution(
    settings: StudySettings, point: StudyPoint, previous: StudyResult | None
) -> StudyPoint:
    """The point validated often enough to resolve its steps to target within
    ``settings.resolution``: no batch size reaches the target in fewer steps than perfect
    scaling from a smaller one that reached it, so validating every resolution x that bound
    steps is fine enough. The updates budget and the warm-up stay the same in steps."""
    if settings.budget == "epochs" or not settings.resolution:
        return point  # whole epochs: validated after each, whatever the batch
    if previous is None or previous.steps_to_target is None:
        return point
    bound = previous.steps_to_target * previous.global_batch / point.global_batch
    interval = max(1, min(settings.eval_steps, math.floor(settings.resolution * bound)))
    budget = settings.epochs * settings.eval_steps
    return replace(
        point,
        eval_steps=interval,
        validations=math.ceil(budget / interval),
        warmup=settings.warmup_epochs * settings.eval_steps / interval,
    )


def peak_lr(settings: StudySettings, global_batch: int) -> float:
    """The scaling rule: ``base_lr`` at ``base_batch``, scaled linearly or by the root."""
    ratio = global_batch / settings.base_batch
    return settings.base_lr * (ratio if settings.rule == "linear" else math.sqrt(ratio))


def train_command(settings: StudySettings, point: StudyPoint, run_dir: Path) -> list[str]:
    """The command line of one point: launcher + ``train.py`` with the point's options.
    train.py scales ``--lr`` by the plan's scale (ranks x passes), so it gets the peak LR
    divided by that."""
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
        repr(point.peak_lr / point.plan.scale),
        "--optimizer",
        settings.optimizer,
        "--epochs",
        str(point.validations),
        *_capped(settings, point),
        "--warmup-epochs",
        repr(point.warmup),
        *_stop_at_target(settings),
        "--no-eval-test",
        "--no-progress",
        *settings.train_args,
    ]
    return _launcher(settings.launcher, point.ranks) + train


def _stop_at_target(settings: StudySettings) -> list[str]:
    """An updates budget stops a point at the target (its steps are what is measured); an
    epochs budget trains them all (the final F1 is)."""
    return ["--target-f1", repr(settings.target_f1)] if settings.budget == "updates" else []


def _capped(settings: StudySettings, point: StudyPoint) -> list[str]:
    """An updates budget validates every --eval-steps updates (capped epochs); an epochs
    budget trains whole epochs."""
    if settings.budget == "epochs":
        return []
    return ["--max-steps-per-epoch", str(point.eval_steps * point.passes)]


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


# What the study gives every point's train.py itself: options after -- (a flag, an
# abbreviation, a --config file) may not change them, or a row would say the study's value
# beside a run made with another. The optimizer may be changed there: checked_points then
# takes it as the study's.
STUDY_SETS = ("batch_size", "backward_passes_per_step", "lr", "epochs", "warmup_epochs",
              "max_steps_per_epoch", "target_f1")  # fmt: skip


def point_config(settings: StudySettings, point: StudyPoint, run_dir: Path) -> TrainConfig:
    """The options train.py gets for ``point``, resolved and checked as train.py does (the
    model against its registry, without TensorFlow); ConfigError naming what it refuses,
    or the options after ``--`` that would change what the study sets."""
    from bigearthnet import models

    cfg = _resolved(train_command(settings, point, run_dir))
    own = _resolved(train_command(replace(settings, train_args=()), point, run_dir))
    taken = recipe.changes(own, cfg, STUDY_SETS)
    if taken:
        raise ConfigError(
            f"the train.py options after -- may not set {', '.join(c.flag for c in taken)}: "
            "the study sets them for each point"
        )
    if cfg.model not in models.MODELS:
        names = ", ".join(models.available_models())
        raise ConfigError(
            f"the train.py options after --: --model {cfg.model!r} is none of {names}"
        )
    return cfg


def _resolved(command: list[str]) -> TrainConfig:
    """The options train.py resolves from ``command`` (the pixel-loss weight for its data,
    as train.py saves it in a point's config.yaml)."""
    parser = _RaisingParser(prog="train.py", add_help=False)
    add_config_arguments(parser, TrainConfig)
    argv = command[command.index("bigearthnet.cli.train") + 1 :]
    try:
        cfg = resolve(parser.parse_args(argv), TrainConfig)
        return with_pixel_head(cfg, read_manifest(cfg.data).map_count("train"))
    except ConfigError as err:
        raise ConfigError(f"the train.py options after --: {err}") from None


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


class _RaisingParser(argparse.ArgumentParser):
    """argparse that raises ConfigError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


def format_result(result: StudyResult) -> str:
    steps = "not reached" if result.steps_to_target is None else f"{result.steps_to_target}"
    noise = "n/a" if result.mean_b_simple is None else f"{result.mean_b_simple:,.0f}"
    state = " (diverged)" if result.diverged else ""
    return (
        f"batch {result.global_batch} {result.optimizer}: steps to target {steps}, best F1 "
        f"{result.best_val_micro_f1:.3f}, B_simple {noise}{state}"
    )
