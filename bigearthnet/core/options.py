"""``train.py``'s options, declared once (:mod:`bigearthnet.core.declare`) in the groups
``--help`` lists them in: each group a dataclass, which
:class:`~bigearthnet.core.config.TrainConfig` inherits. A field is the option: its flag,
default, help, check, choices, and what it is to the run's identity (``identity``,
compared by :mod:`bigearthnet.core.recipe`):

- RECIPE: it shapes what the run's epochs train (the model, batch, LR and its schedule,
  optimizer, regularisation, augmentation, seed, numerics, what an epoch is) or what their
  recorded scores mean (threshold, precise BN): a resume with another value is refused;
- LENGTH: how many epochs (--epochs): a resume may change it, and the run records it;
- none: where, how fast or how visibly it runs (data folder, cache, threads, ranks,
  elastic, Horovod tuning, progress, timing) or when it stops and which epoch is best
  (--target-f1, --early-stopping-patience, --select-metric). --init-weights has its own
  rule (training/initial.keep_start: a resume keeps the run's start, another is refused).
"""

from __future__ import annotations

from dataclasses import dataclass

from bigearthnet.core.declare import group, option
from bigearthnet.core.errors import (
    require_fraction,
    require_given,
    require_non_negative,
    require_non_negative_int,
    require_open_fraction,
    require_positive,
    require_positive_int,
)
from bigearthnet.core.optimizer_table import OPTIMIZERS as OPTIMIZER_TABLE
from bigearthnet.core.optimizer_table import with_property

__all__ = ["LENGTH", "OPTIMIZERS", "PRECISIONS", "RECIPE", "SCHEDULES", "SELECT_METRICS"]

RECIPE, LENGTH = "recipe", "length"
# Validation metrics a run can select its best checkpoint and stop early by (history.csv's
# column names: F1 from summed counts, mAP from gathered scores).
SELECT_METRICS = ("val_micro_f1", "val_macro_f1", "val_macro_map", "val_micro_map")
# The names of the optimizers (core/optimizer_table), LR schedules (training/schedules) and
# precisions (training/replica) that --optimizer, --schedule and --amp offer: declared in
# core, so options are checked before TensorFlow loads; each implementation takes its
# names from here. Models are checked against their registry (models.available_models).
OPTIMIZERS = tuple(OPTIMIZER_TABLE)
SCHEDULES = ("cosine", "step", "constant")
PRECISIONS = ("off", "fp16", "bf16")


@group("data options")
@dataclass(frozen=True, kw_only=True)
class DataOptions:
    data: str = option(help="folder with the preprocessed shards and manifest.json (required)",
                       check=require_given)  # fmt: skip
    run_dir: str = option(help="run folder: checkpoints, history, logs; an existing one resumes",
                          check=require_given)  # fmt: skip
    labels: int = option(19, "label set: 19 (BigEarthNet-19) or 43 (v1 CORINE classes)",
                         choices=(19, 43), identity=RECIPE)  # fmt: skip
    cache: str = option(
        "auto", "where this rank's part of the data lives as uint16: device (accelerator "
        "memory: batches gathered, normalised and augmented there, nothing moved per step; "
        "'device!' fails instead of falling back when it does not fit), memory (host RAM), "
        "none (read the shards every epoch), auto (device where it fits, else memory)",
        choices=("auto", "device", "device!", "memory", "none"),
    )  # fmt: skip
    loader_threads: int | None = option(
        None, "host threads gathering each batch from the memory cache, ahead of the step; "
        "default from the rank's CPU share (SLURM_CPUS_PER_TASK, else the cores this rank "
        "may use)", check=require_positive_int,
    )  # fmt: skip
    verify_data: bool = option(True, "check the sha256 of this rank's shards against the "
                               "manifest")  # fmt: skip


@group("model options")
@dataclass(frozen=True, kw_only=True)
class ModelOptions:
    model: str = option("resnet50", "model name from the registry (models/)", identity=RECIPE)
    init_weights: str = option(
        "", "start from these weights instead of random ones: a folder made by "
        "bigearthnet-weights import (published reBEN/SSL4EO/timm weights; the run then "
        "normalises as they were trained) or a run folder (its best checkpoint); a head of "
        "another class count is left random",
    )  # fmt: skip
    freeze_backbone: bool = option(
        False, "train the classifier head only (linear probing): every other layer, "
        "BatchNorm statistics included, keeps its initial weights; needs --init-weights",
        identity=RECIPE,
    )  # fmt: skip
    dropout: float = option(0.0, "dropout rate before the classifier (reBEN's recipe: 0.15)",
                            check=require_fraction, identity=RECIPE)  # fmt: skip
    amp: str = option(
        "off", "mixed precision, logits and loss stay float32: bf16 (bfloat16, no loss "
        "scaling: the A100/H100 default), fp16 (float16 with dynamic loss scaling: V100); a "
        "bare --amp means fp16", choices=PRECISIONS, const="fp16",
        legacy={True: "fp16", False: "off"},  # run folders from before --amp took a value
        identity=RECIPE,
    )  # fmt: skip
    xla: bool = option(False, "compile the training step with XLA")


def _optimizer_help() -> str:
    """--optimizer's help: the table's names, each with its summary."""
    named = (f"{name} ({o.summary})" if o.summary else name for name, o in OPTIMIZER_TABLE.items())
    return ", ".join(named)


@group("optimisation options")
@dataclass(frozen=True, kw_only=True)
class OptimisationOptions:
    epochs: int = option(
        50, "total number of epochs; a resume may change it (history.csv's planned_epochs "
        "keeps each epoch's; the LR schedule is refitted to the new count)",
        check=require_positive_int, identity=LENGTH,
    )  # fmt: skip
    batch_size: int = option(
        64, "samples PER RANK in each step (the last step of an epoch takes what is left); "
        "the global batch, per optimizer update, is this x ranks x --backward-passes-per-step",
        check=require_positive_int, identity=RECIPE,
    )  # fmt: skip
    lr: float = option(
        0.025, "base learning rate for ONE rank's batch; the linear rule scales it by the "
        "global batch / --batch-size (ranks x backward passes)",
        check=require_positive, identity=RECIPE,
    )  # fmt: skip
    warmup_epochs: float = option(
        5.0, "linear warm-up from the base LR to the scaled peak (base LR x ranks x passes; "
        "Goyal)", check=require_non_negative, identity=RECIPE,
    )  # fmt: skip
    warmup_steps: int | None = option(
        None, "the warm-up in optimizer updates instead of epochs (reBEN's recipe: 1000)",
        check=require_non_negative_int, identity=RECIPE,
    )  # fmt: skip
    lr_scaling: str = option(
        "linear", "how the LR grows with the global batch: linear (base LR x ranks x passes, "
        "with the warm-up; Goyal et al.) or adascale (base LR x the AdaScale gain r in [1, "
        "ranks x passes], recomputed every update from the measured gradient noise; needs "
        "--gns)", choices=("linear", "adascale"), identity=RECIPE,
    )  # fmt: skip
    schedule: str = option("cosine", "LR schedule after warm-up", choices=SCHEDULES,
                           identity=RECIPE)  # fmt: skip
    min_lr: float = option(0.0, "final LR of the cosine schedule", check=require_non_negative,
                           identity=RECIPE)  # fmt: skip
    step_epochs: tuple[float, ...] | None = option(
        None, "epochs at which the step schedule multiplies the LR by gamma", identity=RECIPE
    )
    gamma: float = option(0.1, "factor of each step of the step schedule",
                          check=require_non_negative, identity=RECIPE)  # fmt: skip
    optimizer: str = option("sgd", _optimizer_help(), choices=OPTIMIZERS, identity=RECIPE)
    momentum: float = option(0.9, f"momentum of {with_property('momentum', have=True)}",
                             check=require_non_negative, identity=RECIPE)  # fmt: skip
    weight_decay: float = option(
        0.0, "weight decay of convolution and dense kernels (BatchNorm parameters and biases "
        f"never): an L2 loss term for {with_property('decay_in_loss', have=True)}, part of "
        f"the update for {with_property('decay_in_loss', have=False)}",
        check=require_non_negative, identity=RECIPE,
    )  # fmt: skip
    trust_coefficient: float = option(
        0.001, f"{with_property('trust_coefficient')}: the trust coefficient eta of the "
        "layer-wise LR (You et al. 2017)", check=require_positive, identity=RECIPE,
    )  # fmt: skip
    mixup_alpha: float = option(0.0, "mix-up Beta(alpha, alpha) parameter; 0 turns mix-up off",
                                check=require_non_negative, identity=RECIPE)  # fmt: skip
    augment: bool = option(True, "random flips and 90-degree rotations of training batches",
                           identity=RECIPE)  # fmt: skip
    seed: int = option(42, "seed of weights, shuffling and augmentation", identity=RECIPE)
    precise_bn_samples: int = option(
        4096, "before each validation and checkpoint, set the BatchNorm statistics to the "
        "exact means/variances of this many training samples (all ranks together) under the "
        "current weights (precise BN); 0: the moving averages, averaged over ranks",
        check=require_non_negative_int, identity=RECIPE,
    )  # fmt: skip
    backward_passes_per_step: int = option(
        1, "accumulate gradients over this many batches before each allreduce",
        check=require_positive_int, identity=RECIPE,
    )  # fmt: skip


@group("distribution options")
@dataclass(frozen=True, kw_only=True)
class DistributionOptions:
    fp16_allreduce: bool = option(False, "compress gradients to float16 for the allreduce")
    grouped_allreduce: bool = option(
        False, "exchange all gradients in one grouped allreduce after the backward pass "
        "(default: each as soon as backprop makes it, overlapping communication with "
        "computation)",
    )  # fmt: skip
    fusion_threshold_mb: float | None = option(
        None, "Horovod tensor fusion buffer in MB (HOROVOD_FUSION_THRESHOLD)",
        check=require_positive,
    )  # fmt: skip
    cycle_time_ms: float | None = option(None, "Horovod cycle time in ms (HOROVOD_CYCLE_TIME)",
                                         check=require_positive)  # fmt: skip
    threads: int | None = option(
        None, "TensorFlow intra-op threads per rank; default SLURM_CPUS_PER_TASK or all cores",
        check=require_positive_int,
    )  # fmt: skip
    elastic: bool = option(
        False, "Elastic Horovod: run under `horovodrun --min-np A --max-np B "
        "--host-discovery-script S`; workers may join or leave while training",
    )  # fmt: skip
    commit_every: int = option(10, "elastic: commit the training state every N batches",
                               check=require_positive_int)  # fmt: skip


@group("monitoring options")
@dataclass(frozen=True, kw_only=True)
class MonitoringOptions:
    threshold: float = option(0.5, "score threshold for validation F1",
                              check=require_open_fraction, identity=RECIPE)  # fmt: skip
    select_metric: str = option(
        "val_micro_f1", "the validation metric that picks the 'best' checkpoint and that "
        "early stopping watches (reBEN's recipe: val_macro_map)", choices=SELECT_METRICS,
    )  # fmt: skip
    early_stopping_patience: int = option(
        0, "stop when --select-metric has not improved for this many validations (epochs); "
        "0: never (reBEN's recipe: 5)", check=require_non_negative_int,
    )  # fmt: skip
    target_f1: float | None = option(
        None, "stop once validation micro-F1 reaches this after an epoch (a batch-size "
        "study's target)", check=require_open_fraction,
    )  # fmt: skip
    max_steps_per_epoch: int | None = option(
        None, "cap on steps per epoch: each epoch trains on that many batches (smoke tests)",
        check=require_positive_int, identity=RECIPE,
    )  # fmt: skip
    gns: bool = option(
        True, "measure the gradient noise scale B_simple every update (one gradient norm per "
        "rank and a scalar in the loss allreduce; needs 2+ ranks or "
        "--backward-passes-per-step 2+)",
    )  # fmt: skip
    gns_decay: float = option(
        0.99, "per-update decay of the noise scale's moving averages (0.99: ~100 updates)",
        check=require_fraction, identity=RECIPE,
    )  # fmt: skip
    comm_timing: bool = option(
        False, "time each step's gradient computation and its allreduce+update apart (one "
        "more host sync per step): compute and communication times in RUN/efficiency.json",
    )  # fmt: skip
    timeline: str | None = option(
        None, "write a Horovod timeline (chrome://tracing JSON) to this path",
        flag="--horovod-timeline",  # horovodrun rejects --timeline after the command
    )  # fmt: skip
    progress: bool = option(True, "progress bar on rank 0")
    eval_test: bool = option(True, "evaluate the best checkpoint on the test split at the end")


@group("faults and resume options")
@dataclass(frozen=True, kw_only=True)
class ResumeOptions:
    resume: bool = option(True, "resume from RUN/checkpoints when present")
    force_unlock: bool = option(
        False, "remove a leftover lease of RUN (BIGEARTHNET_RUN_LOCK=lease, a holder that "
        "died on another host); refused while the holder runs on this host",
    )  # fmt: skip
    allow_new_data: bool = option(
        False, "resume although --data holds other shards than the checkpoint was trained on "
        "(another preprocessing: other patches, splits or shards); refused without it",
    )  # fmt: skip
