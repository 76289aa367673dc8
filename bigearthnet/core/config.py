"""Typed run configuration: defaults in code, an optional YAML file, then CLI overrides.

Each field of :class:`TrainConfig` carries its own help text; the argparse parser is
generated from the fields, so ``--help`` documents every option and a new option needs
one line here. The resolved configuration is saved as ``RUN/config.yaml`` beside every
run and is what ``evaluate.py`` reads back to rebuild the model.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from bigearthnet.core.batch import BatchPlan
from bigearthnet.core.errors import (
    ConfigError,
    require_non_negative,
    require_open_fraction,
    require_positive,
    require_positive_int,
)
from bigearthnet.core.util import atomic_write_text
from bigearthnet.core.yaml_files import read_mapping

__all__ = [
    "ConfigError",
    "TrainConfig",
    "flag_of",
    "field_type",
    "load_run_config",
    "resolve",
    "save_yaml",
]
RUN_CONFIG = "config.yaml"  # the resolved options, saved beside every run
# Validation metrics a run can select its best checkpoint and stop early by (history.csv's
# column names: F1 from summed counts, mAP from gathered scores).
SELECT_METRICS = ("val_micro_f1", "val_macro_f1", "val_macro_map", "val_micro_map")
# The names of the optimizers (training/optimizers.make), LR schedules (training/schedules)
# and precisions (training/replica) that --optimizer, --schedule and --amp offer: declared
# here once, so options are checked before TensorFlow loads; each implementation takes its
# names from here. Models are checked against their registry (models.available_models).
OPTIMIZERS = ("sgd", "adam", "adamw", "lars", "lamb")
SCHEDULES = ("cosine", "step", "constant")
PRECISIONS = ("off", "fp16", "bf16")
# --pixel-loss-weight where the shards hold reference maps and the option is not given:
# docs/training.md, "The dense head" (why 0.1: a short sweep of 0.03 to 3).
DEFAULT_PIXEL_LOSS_WEIGHT = 0.1


# What an option is to a run's identity (``identity`` in its field's metadata; compared by
# core/recipe.py, the one home of that comparison):
# - RECIPE: it shapes what the run's epochs train (the model, batch, LR and its schedule,
#   optimizer, regularisation, augmentation, seed, numerics, what an epoch is) or what their
#   recorded scores mean (threshold, precise BN): a resume with another value is refused;
# - LENGTH: how many epochs (--epochs): a resume may change it, and the run records it;
# - none: where, how fast or how visibly it runs (data folder, cache, threads, ranks,
#   elastic, Horovod tuning, progress, timing) or when it stops and which epoch is best
#   (--target-f1, --early-stopping-patience, --select-metric). --init-weights has its own
#   rule (training/initial.keep_start: a resume keeps the run's start, another is refused).
RECIPE, LENGTH = "recipe", "length"


def _opt(
    default: Any,
    help: str,
    choices: tuple | None = None,
    flag: str | None = None,
    const: Any = None,
    identity: str | None = None,
) -> Any:
    metadata = {"help": help, "choices": choices, "flag": flag, "const": const}
    return field(default=default, metadata={**metadata, "identity": identity})


@dataclass
class TrainConfig:
    # --- data and run
    data: str = _opt("", "folder with the preprocessed shards and manifest.json (required)")
    run_dir: str = _opt("", "run folder: checkpoints, history, logs; an existing one resumes")
    labels: int = _opt(
        19, "label set: 19 (BigEarthNet-19) or 43 (v1 CORINE classes)", (19, 43), identity=RECIPE
    )
    cache: str = _opt(
        "auto",
        "where this rank's part of the data lives as uint16: device (accelerator memory: "
        "batches gathered, normalised and augmented there, nothing moved per step; "
        "'device!' fails instead of falling back when it does not fit), memory (host RAM), "
        "none (read the shards every epoch), auto (device where it fits, else memory)",
        ("auto", "device", "device!", "memory", "none"),
    )
    loader_threads: int | None = _opt(
        None,
        "host threads gathering each batch from the memory cache, ahead of the step; default "
        "from the rank's CPU share (SLURM_CPUS_PER_TASK, else the cores this rank may use)",
    )
    verify_data: bool = _opt(True, "check the sha256 of this rank's shards against the manifest")
    # --- model and optimisation
    model: str = _opt("resnet50", "model name from the registry (models/)", identity=RECIPE)
    init_weights: str = _opt(
        "",
        "start from these weights instead of random ones: a folder made by bigearthnet-weights "
        "import (published reBEN/SSL4EO/timm weights; the run then normalises as they were "
        "trained) or a run folder (its best checkpoint); a head of another class count is "
        "left random",
    )
    freeze_backbone: bool = _opt(
        False,
        "train the classifier head only (linear probing): every other layer, BatchNorm "
        "statistics included, keeps its initial weights; needs --init-weights",
        identity=RECIPE,
    )
    epochs: int = _opt(
        50,
        "total number of epochs; a resume may change it (history.csv's planned_epochs keeps "
        "each epoch's; the LR schedule is refitted to the new count)",
        identity=LENGTH,
    )
    batch_size: int = _opt(
        64,
        "samples PER RANK in each step (the last step of an epoch takes what is left); the "
        "global batch, per optimizer update, is this x ranks x --backward-passes-per-step",
        identity=RECIPE,
    )
    lr: float = _opt(
        0.025,
        "base learning rate for ONE rank's batch; the linear rule scales it by the global "
        "batch / --batch-size (ranks x backward passes)",
        identity=RECIPE,
    )
    warmup_epochs: float = _opt(
        5.0,
        "linear warm-up from the base LR to the scaled peak (base LR x ranks x passes; Goyal)",
        identity=RECIPE,
    )
    warmup_steps: int | None = _opt(
        None,
        "the warm-up in optimizer updates instead of epochs (reBEN's recipe: 1000)",
        identity=RECIPE,
    )
    lr_scaling: str = _opt(
        "linear",
        "how the LR grows with the global batch: linear (base LR x ranks x passes, with the "
        "warm-up; Goyal et al.) or adascale (base LR x the AdaScale gain r in [1, ranks x passes], "
        "recomputed every update from the measured gradient noise; needs --gns)",
        ("linear", "adascale"),
        identity=RECIPE,
    )
    schedule: str = _opt("cosine", "LR schedule after warm-up", SCHEDULES, identity=RECIPE)
    min_lr: float = _opt(0.0, "final LR of the cosine schedule", identity=RECIPE)
    step_epochs: list | None = _opt(
        None,
        "epochs at which the step schedule multiplies the LR by gamma",
        identity=RECIPE,
    )
    gamma: float = _opt(0.1, "factor of each step of the step schedule", identity=RECIPE)
    optimizer: str = _opt(
        "sgd",
        "sgd (with momentum: the seed study), adam, adamw (decoupled weight decay: the reBEN "
        "recipe), lars or lamb (layer-wise trust ratio for large global batches)",
        OPTIMIZERS,
        identity=RECIPE,
    )
    momentum: float = _opt(0.9, "momentum of sgd and lars", identity=RECIPE)
    weight_decay: float = _opt(
        0.0,
        "weight decay of convolution and dense kernels (BatchNorm parameters and biases "
        "never): an L2 loss term for sgd/adam, part of the update for adamw/lars/lamb",
        identity=RECIPE,
    )
    trust_coefficient: float = _opt(
        0.001,
        "lars: the trust coefficient eta of the layer-wise LR (You et al. 2017)",
        identity=RECIPE,
    )
    dropout: float = _opt(
        0.0, "dropout rate before the classifier (reBEN's recipe: 0.15)", identity=RECIPE
    )
    mixup_alpha: float = _opt(
        0.0, "mix-up Beta(alpha, alpha) parameter; 0 turns mix-up off", identity=RECIPE
    )
    pixel_loss_weight: float | None = _opt(
        None,
        "the dense head (per-pixel logits of the 19 classes from a decoder over the encoder) "
        "trains with the classifier: the loss is the labels' BCE + this weight x the per-pixel "
        "cross-entropy, a mean over the labelled pixels of the global batch (no-label pixels "
        "and patches without a map count for nothing); 0 turns the head off; default "
        f"{DEFAULT_PIXEL_LOSS_WEIGHT:g} where the shards hold reference maps, else 0",
        identity=RECIPE,
    )
    augment: bool = _opt(
        True, "random flips and 90-degree rotations of training batches", identity=RECIPE
    )
    seed: int = _opt(42, "seed of weights, shuffling and augmentation", identity=RECIPE)
    threshold: float = _opt(0.5, "score threshold for validation F1", identity=RECIPE)
    precise_bn_samples: int = _opt(
        4096,
        "before each validation and checkpoint, set the BatchNorm statistics to the exact "
        "means/variances of this many training samples (all ranks together) under the current "
        "weights (precise BN); 0: the moving averages, averaged over ranks",
        identity=RECIPE,
    )
    # --- performance
    amp: str = _opt(
        "off",
        "mixed precision, logits and loss stay float32: bf16 (bfloat16, no loss scaling: the "
        "A100/H100 default), fp16 (float16 with dynamic loss scaling: V100); a bare --amp "
        "means fp16",
        PRECISIONS,
        const="fp16",
        identity=RECIPE,
    )
    xla: bool = _opt(False, "compile the training step with XLA")
    fp16_allreduce: bool = _opt(False, "compress gradients to float16 for the allreduce")
    grouped_allreduce: bool = _opt(
        False,
        "exchange all gradients in one grouped allreduce after the backward pass (default: "
        "each as soon as backprop makes it, overlapping communication with computation)",
    )
    backward_passes_per_step: int = _opt(
        1,
        "accumulate gradients over this many batches before each allreduce",
        identity=RECIPE,
    )
    fusion_threshold_mb: float | None = _opt(
        None, "Horovod tensor fusion buffer in MB (HOROVOD_FUSION_THRESHOLD)"
    )
    cycle_time_ms: float | None = _opt(None, "Horovod cycle time in ms (HOROVOD_CYCLE_TIME)")
    threads: int | None = _opt(
        None, "TensorFlow intra-op threads per rank; default SLURM_CPUS_PER_TASK or all cores"
    )
    timeline: str | None = _opt(
        None,
        "write a Horovod timeline (chrome://tracing JSON) to this path",
        flag="horovod-timeline",  # horovodrun rejects --timeline after the command
    )
    comm_timing: bool = _opt(
        False,
        "time each step's gradient computation and its allreduce+update apart (one more host "
        "sync per step): compute and communication times in RUN/efficiency.json",
    )
    gns: bool = _opt(
        True,
        "measure the gradient noise scale B_simple every update (one gradient norm per rank "
        "and a scalar in the loss allreduce; needs 2+ ranks or --backward-passes-per-step 2+)",
    )
    gns_decay: float = _opt(
        0.99,
        "per-update decay of the noise scale's moving averages (0.99: ~100 updates)",
        identity=RECIPE,
    )
    # --- elastic (malleable) training
    elastic: bool = _opt(
        False,
        "Elastic Horovod: run under `horovodrun --min-np A --max-np B "
        "--host-discovery-script S`; workers may join or leave while training",
    )
    commit_every: int = _opt(10, "elastic: commit the training state every N batches")
    # --- control
    resume: bool = _opt(True, "resume from RUN/checkpoints when present")
    force_unlock: bool = _opt(
        False,
        "remove a leftover lease of RUN (BIGEARTHNET_RUN_LOCK=lease, a holder that died on "
        "another host); refused while the holder runs on this host",
    )
    allow_new_data: bool = _opt(
        False,
        "resume although --data holds other shards than the checkpoint was trained on "
        "(another preprocessing: other patches, splits or shards); refused without it",
    )
    max_steps_per_epoch: int | None = _opt(
        None,
        "cap on steps per epoch: each epoch trains on that many batches (smoke tests)",
        identity=RECIPE,
    )
    target_f1: float | None = _opt(
        None,
        "stop once validation micro-F1 reaches this after an epoch (a batch-size study's target)",
    )
    select_metric: str = _opt(
        "val_micro_f1",
        "the validation metric that picks the 'best' checkpoint and that early stopping "
        "watches (reBEN's recipe: val_macro_map)",
        SELECT_METRICS,
    )
    early_stopping_patience: int = _opt(
        0,
        "stop when --select-metric has not improved for this many validations (epochs); "
        "0: never (reBEN's recipe: 5)",
    )
    eval_test: bool = _opt(True, "evaluate the best checkpoint on the test split at the end")
    progress: bool = _opt(True, "progress bar on rank 0")

    def __post_init__(self) -> None:
        # Run folders and YAML files written before --amp took a value say true/false.
        if isinstance(self.amp, bool):
            self.amp = "fp16" if self.amp else "off"

    def validate(self) -> None:
        """Raise ConfigError for values no run can use (the one place options are checked:
        flags, YAML keys and the run config read back alike): first each value's type, then
        the ranges."""
        for f in fields(self):
            _check_type(f, getattr(self, f.name))
        if not self.data:
            raise ConfigError("--data is required")
        if not self.run_dir:
            raise ConfigError("--run-dir is required")
        if self.elastic and self.backward_passes_per_step > 1:
            raise ConfigError("--elastic works with --backward-passes-per-step 1 only")
        for name in ("epochs", "batch_size", "backward_passes_per_step", "commit_every"):
            require_positive_int(f"--{flag_of(_field(name))}", getattr(self, name))
        for name in ("loader_threads", "threads", "max_steps_per_epoch"):
            if getattr(self, name) is not None:
                require_positive_int(f"--{flag_of(_field(name))}", getattr(self, name))
        for name in ("fusion_threshold_mb", "cycle_time_ms"):
            if getattr(self, name) is not None:
                require_positive(f"--{flag_of(_field(name))}", getattr(self, name))
        for name in ("momentum", "min_lr", "gamma"):
            require_non_negative(f"--{flag_of(_field(name))}", getattr(self, name))
        require_positive("--lr", self.lr)
        require_positive("--trust-coefficient", self.trust_coefficient)
        require_non_negative("--weight-decay", self.weight_decay)
        require_non_negative("--precise-bn-samples", self.precise_bn_samples)
        if not 0.0 <= self.gns_decay < 1.0:
            raise ConfigError(f"--gns-decay must be in [0, 1), got {self.gns_decay}")
        if self.freeze_backbone and not self.init_weights:
            raise ConfigError("--freeze-backbone needs --init-weights (a backbone to keep)")
        if self.lr_scaling == "adascale" and not self.gns:
            raise ConfigError("--lr-scaling adascale needs the noise monitor: drop --no-gns")
        require_non_negative("--warmup-epochs", self.warmup_epochs)
        if self.warmup_steps is not None:
            require_non_negative("--warmup-steps", self.warmup_steps)
        require_non_negative("--early-stopping-patience", self.early_stopping_patience)
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"--dropout must be in [0, 1), got {self.dropout}")
        require_open_fraction("--threshold", self.threshold)
        if self.target_f1 is not None:
            require_open_fraction("--target-f1", self.target_f1)
        require_non_negative("--mixup-alpha", self.mixup_alpha)
        weight = self.pixel_loss_weight
        if weight is not None and not (math.isfinite(weight) and weight >= 0):
            raise ConfigError(
                f"--pixel-loss-weight must be a finite number >= 0 (0: no dense head), got {weight}"
            )
        for f in fields(self):
            choices = f.metadata.get("choices")
            if choices and getattr(self, f.name) not in choices:
                raise ConfigError(f"--{flag_of(f)} must be one of {', '.join(map(str, choices))}")

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
        return dataclasses.asdict(self)


def flag_of(f: dataclasses.Field) -> str:
    """The option's command-line name without the dashes."""
    return f.metadata.get("flag") or f.name.replace("_", "-")


def _check_type(f: dataclasses.Field, value: Any) -> None:
    """ConfigError (naming the option) unless ``value`` has the field's type: YAML gives
    strings where a flag would have been parsed, and ``eval_test: "false"`` is truthy."""
    kind = field_type(f, f.default)
    if value is None and f.default is None:
        return
    if f.name == "step_epochs":
        ok = isinstance(value, list) and all(_is_number(v) for v in value)
    elif kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        ok = _is_number(value)
    else:
        ok = isinstance(value, str)
    if not ok:
        wanted = {bool: "true or false", int: "an integer", float: "a number"}.get(kind, "text")
        if f.name == "step_epochs":
            wanted = "a list of epochs"
        raise ConfigError(f"--{flag_of(f)} must be {wanted}, got {value!r}", key=f.name)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _field(name: str) -> dataclasses.Field:
    return next(f for f in fields(TrainConfig) if f.name == name)


def field_type(f: dataclasses.Field, default: Any) -> type:
    if default is not None:
        return type(default)
    return {
        "fusion_threshold_mb": float,
        "cycle_time_ms": float,
        "threads": int,
        "loader_threads": int,
        "target_f1": float,
        "pixel_loss_weight": float,
        "max_steps_per_epoch": int,
        "warmup_steps": int,
    }.get(f.name, str)


def resolve(args: argparse.Namespace, cls: type[TrainConfig] = TrainConfig) -> TrainConfig:
    """Defaults <- each ``--config`` file, left to right (a later file overrides an earlier
    one key by key) <- flags given on the command line. An error about a key read from a
    file names the file that set it."""
    values: dict[str, Any] = {}
    sources: dict[str, Path] = {}  # key -> the file whose value it kept
    for path in map(Path, getattr(args, "config", None) or ()):
        raw = load_yaml(path, cls)
        values.update(raw)
        sources.update(dict.fromkeys(raw, path))
    given = {k: v for k, v in vars(args).items() if k != "config"}
    values.update(given)
    for key in given:
        sources.pop(key, None)
    return _validated(cls(**values), sources)


def _validated(cfg: TrainConfig, sources: dict[str, Path]) -> TrainConfig:
    """``cfg`` once validated; an error about a key read from a file (``sources``: key ->
    file) names the file."""
    try:
        cfg.validate()
    except ConfigError as err:
        key = err.key or _key_of(str(err))
        if key in sources:
            text = str(err)
            if text.startswith("--"):  # "--dropout must ..." -> "dropout must ..."
                text = f"{key} {text.split(' ', 1)[1]}"
            raise ConfigError(f"{sources[key]}: {text}", key=key) from None
        raise
    return cfg


def _key_of(message: str) -> str | None:
    """The option a range check's message starts with ("--dropout must ..." -> dropout)."""
    flag = message.split(" ", 1)[0]
    if not flag.startswith("--"):
        return None
    return next((f.name for f in fields(TrainConfig) if flag_of(f) == flag[2:]), None)


def load_yaml(path: Path, cls: type[TrainConfig] = TrainConfig) -> dict[str, Any]:
    """Options from a YAML mapping (:func:`~bigearthnet.core.yaml_files.read_mapping`: plain
    data only, a key given twice refused); unknown keys are an error (a typo must not pass
    silently)."""
    raw = read_mapping(path, what="option: value")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(f"{path}: unknown option(s) {', '.join(unknown)}")
    for key, value in raw.items():  # a bad value is bad even where a flag overrides it
        if key == "amp" and isinstance(value, bool):
            continue  # files written before --amp took a value (TrainConfig converts them)
        try:
            _check_type(known[key], value)
        except ConfigError as err:
            raise ConfigError(f"{path}: {key} {str(err).split(' ', 1)[1]}", key=key) from None
    return raw


def save_yaml(cfg: TrainConfig, path: Path) -> None:
    atomic_write_text(path, yaml.safe_dump(cfg.to_dict(), sort_keys=False))


def load_run_config(run_dir: str | Path) -> TrainConfig:
    """The options a run was trained with (``RUN/config.yaml``), as a TrainConfig."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: run folder does not exist")
    path = run_dir / RUN_CONFIG
    if not path.is_file():
        raise ConfigError(f"{run_dir}: no {RUN_CONFIG} (not a training run folder)")
    raw = load_yaml(path, TrainConfig)
    config = _validated(TrainConfig(**raw), dict.fromkeys(raw, path))
    if config.pixel_loss_weight is None:  # a run saved before the dense head: it had none
        config.pixel_loss_weight = 0.0
    return config


def default_threads() -> int | None:
    """Threads per rank from Slurm's allocation, so ranks on one node do not oversubscribe."""
    value = os.environ.get("SLURM_CPUS_PER_TASK")
    return int(value) if value and value.isdigit() else None
