"""Typed run configuration: defaults in code, optional YAML files, then CLI overrides.

:class:`TrainConfig` is ``train.py``'s options: the groups of :mod:`bigearthnet.core.options`
(each option declared once there, with its help, check and place in ``--help``), inherited,
so a run's options are one flat record (``cfg.lr``) and the checks that relate options of
different groups are here, in :meth:`TrainConfig.__post_init__`. The resolved configuration
is saved as ``RUN/config.yaml`` beside every run (one key per option, as the flags) and is
what ``evaluate.py`` reads back to rebuild the model; ``train.py --print-config`` prints the
same, and ``--config`` reads it back.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bigearthnet.core import declare
from bigearthnet.core.batch import BatchPlan
from bigearthnet.core.errors import ConfigError
from bigearthnet.core.options import (
    LENGTH,
    OPTIMIZERS,
    PRECISIONS,
    RECIPE,
    SCHEDULES,
    SELECT_METRICS,
    DataOptions,
    DistributionOptions,
    ModelOptions,
    MonitoringOptions,
    OptimisationOptions,
    ResumeOptions,
)
from bigearthnet.core.util import atomic_write_text

__all__ = [
    "LENGTH", "OPTIMIZERS", "PRECISIONS", "RECIPE", "RUN_CONFIG", "SCHEDULES", "SELECT_METRICS",
    "ConfigError", "TrainConfig", "add_arguments", "config_yaml", "load_run_config", "resolve",
    "save_yaml",
]  # fmt: skip
RUN_CONFIG = "config.yaml"  # the resolved options, saved beside every run


# Dataclasses order the fields of the last base first: the groups are listed last to first,
# so that --help, config.yaml and --print-config list them data first.
@dataclass(frozen=True, kw_only=True)
class TrainConfig(
    ResumeOptions,
    MonitoringOptions,
    DistributionOptions,
    OptimisationOptions,
    ModelOptions,
    DataOptions,
):
    """A run's options: every field one of ``train.py``'s, checked as it is made."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """ConfigError for values no run can use (the one place options are checked:
        flags, YAML keys and the run config read back alike): each option's type and check
        (its declaration), then the rules between options."""
        declare.check_fields(self)
        if self.elastic and self.backward_passes_per_step > 1:
            raise ConfigError("--elastic works with --backward-passes-per-step 1 only")
        if self.freeze_backbone and not self.init_weights:
            raise ConfigError("--freeze-backbone needs --init-weights (a backbone to keep)")
        if self.lr_scaling == "adascale" and not self.gns:
            raise ConfigError("--lr-scaling adascale needs the noise monitor: drop --no-gns")

    @property
    def effective_warmup_epochs(self) -> float:
        """The warm-up actually used: the default (5, the seed study's) outlasts short runs,
        which then warm up over all their epochs."""
        return min(float(self.warmup_epochs), float(self.epochs))

    def batch_plan(self, world_size: int) -> BatchPlan:
        """The batch in a world of ``world_size`` ranks: per rank, per step, per update, the
        LR scale and the steps of an epoch (:mod:`bigearthnet.core.batch`, the one home)."""
        return BatchPlan(self.batch_size, world_size, self.backward_passes_per_step)

    def to_dict(self) -> dict[str, Any]:
        """The options as plain data, one key per option: ``config.yaml``'s mapping."""
        return declare.to_mapping(self)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``train.py``'s flags on ``parser``: one per option, in its group; ``--config`` and
    ``--print-config``. Only the flags typed override the files."""
    parser.add_argument(
        "--config", action="append", default=[], metavar="FILE.yaml",
        help="YAML file of options (keys as in RUN/config.yaml); command-line flags override "
        "it; given more than once, the files merge left to right (a later file's key wins)",
    )  # fmt: skip
    parser.add_argument(
        "--print-config", action="store_true",
        help="print the resolved options (defaults <- --config files <- flags, checked as for "
        "training) as YAML a --config takes, and exit without training",
    )  # fmt: skip
    declare.add_options(parser, TrainConfig, layered=True)


def resolve(args: argparse.Namespace, cls: type[TrainConfig] = TrainConfig) -> TrainConfig:
    """Defaults <- each ``--config`` file, left to right (a later file overrides an earlier
    one key by key) <- flags given on the command line. An error about a key read from a
    file names the file that set it."""
    return declare.resolve(cls, args, getattr(args, "config", None) or ())


def config_yaml(cfg: TrainConfig) -> str:
    """``cfg`` as the YAML of ``RUN/config.yaml`` (and ``--print-config``)."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)


def save_yaml(cfg: TrainConfig, path: Path) -> None:
    atomic_write_text(path, config_yaml(cfg))


def load_run_config(run_dir: str | Path) -> TrainConfig:
    """The options a run was trained with (``RUN/config.yaml``), as a TrainConfig."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: run folder does not exist")
    path = run_dir / RUN_CONFIG
    if not path.is_file():
        raise ConfigError(f"{run_dir}: no {RUN_CONFIG} (not a training run folder)")
    return declare.resolve(TrainConfig, argparse.Namespace(), [path])


def default_threads() -> int | None:
    """Threads per rank from Slurm's allocation, so ranks on one node do not oversubscribe."""
    value = os.environ.get("SLURM_CPUS_PER_TASK")
    return int(value) if value and value.isdigit() else None
