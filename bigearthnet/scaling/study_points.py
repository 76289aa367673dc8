"""A batch-size study's points: each global batch size as ranks x per-rank batch x passes
with its peak LR and validation interval (:class:`StudyPoint`), the ``train.py`` command
that trains it, and the options that command resolves to, checked as train.py checks them
(:func:`point_config`). :mod:`bigearthnet.scaling.batch_study` runs them.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NoReturn

from bigearthnet.core import recipe
from bigearthnet.core.batch import BatchPlan
from bigearthnet.core.config import TrainConfig, add_arguments, resolve
from bigearthnet.core.dense_head import with_pixel_head
from bigearthnet.core.errors import ConfigError
from bigearthnet.formats.manifest import read_manifest
from bigearthnet.scaling.study_outputs import StudyResult
from bigearthnet.scaling.study_settings import StudySettings


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
    parser = _RaisingParser(prog="train.py", add_help=False, allow_abbrev=False)
    add_arguments(parser)
    argv = command[command.index("bigearthnet.cli.train") + 1 :]
    try:
        cfg = resolve(parser.parse_args(argv), TrainConfig)
        return with_pixel_head(cfg, read_manifest(cfg.data).map_count("train"))
    except ConfigError as err:
        raise ConfigError(f"the train.py options after --: {err}") from None


class _RaisingParser(argparse.ArgumentParser):
    """argparse that raises ConfigError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)
