"""The command-line view of :class:`~bigearthnet.core.config.TrainConfig`: one flag per
field, its help text from the field, grouped by concern in ``--help`` (the same groups in
every command that takes them)."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import fields
from typing import Any

from bigearthnet.core.config import TrainConfig, field_type, flag_of

__all__ = ["OPTION_GROUPS", "add_config_arguments", "option_group"]

OPTION_GROUPS: dict[str, tuple[str, ...]] = {
    "data": ("data", "run_dir", "labels", "cache", "loader_threads", "verify_data"),
    "model": ("model", "init_weights", "freeze_backbone", "dropout", "amp", "xla"),
    "optimisation": (
        "epochs",
        "batch_size",
        "lr",
        "warmup_epochs",
        "warmup_steps",
        "lr_scaling",
        "schedule",
        "min_lr",
        "step_epochs",
        "gamma",
        "optimizer",
        "momentum",
        "weight_decay",
        "trust_coefficient",
        "mixup_alpha",
        "augment",
        "pixel_loss_weight",
        "seed",
        "precise_bn_samples",
        "backward_passes_per_step",
    ),
    "distribution": (
        "fp16_allreduce",
        "grouped_allreduce",
        "fusion_threshold_mb",
        "cycle_time_ms",
        "threads",
        "elastic",
        "commit_every",
    ),
    "monitoring": (
        "threshold",
        "select_metric",
        "early_stopping_patience",
        "target_f1",
        "max_steps_per_epoch",
        "gns",
        "gns_decay",
        "comm_timing",
        "timeline",
        "progress",
        "eval_test",
    ),
    "faults and resume": ("resume", "force_unlock", "allow_new_data"),
}


def option_group(name: str) -> str:
    """The --help group of the option of field ``name``."""
    return next(group for group, names in OPTION_GROUPS.items() if name in names)


def add_config_arguments(
    parser: argparse.ArgumentParser, cls: type[TrainConfig] = TrainConfig
) -> None:
    """One option per field. Defaults are SUPPRESSed so only flags given override YAML."""
    parser.add_argument(
        "--config",
        action="append",
        metavar="FILE.yaml",
        help="YAML file of options (keys as in RUN/config.yaml); command-line flags override "
        "it; given more than once, the files merge left to right (a later file's key wins)",
    )
    defaults = cls()
    groups = {name: parser.add_argument_group(f"{name} options") for name in OPTION_GROUPS}
    for f in fields(cls):
        default = getattr(defaults, f.name)
        shown = "" if default in ("", None) else f" (default: {default})"
        help_text = f"{f.metadata['help']}{shown}"
        flag = f"--{flag_of(f)}"
        group = groups[option_group(f.name)]
        if isinstance(default, bool):
            group.add_argument(
                flag,
                dest=f.name,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        elif f.name == "step_epochs":
            group.add_argument(
                flag, dest=f.name, type=float, nargs="+", default=argparse.SUPPRESS, help=help_text
            )
        else:
            kind = field_type(f, default)
            group.add_argument(
                flag,
                dest=f.name,
                type=kind,
                default=argparse.SUPPRESS,
                choices=f.metadata.get("choices"),
                help=help_text,
                **_bareflag_of(f),
            )


def _bareflag_of(f: dataclasses.Field) -> dict[str, Any]:
    """``--amp`` alone means ``--amp fp16``: the flag was a switch before it took a value."""
    const = f.metadata.get("const")
    return {} if const is None else {"nargs": "?", "const": const}
