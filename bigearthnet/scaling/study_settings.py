"""What a study runs, declared once: :class:`StudyRuns`, the options every study of several
global batch sizes shares (``bigearthnet-batch-study`` and ``bigearthnet-seed-table``, each
point a ``train.py`` run), and :class:`StudySettings`, a batch-size study's. TensorFlow-free:
studies are planned on login nodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bigearthnet.core.declare import check_fields, option
from bigearthnet.core.errors import (
    ConfigError,
    require_fraction,
    require_non_negative,
    require_open_fraction,
    require_positive,
    require_positive_int,
)
from bigearthnet.core.options import OPTIMIZERS

__all__ = ["BUDGETS", "LAUNCHERS", "RULES", "StudyRuns", "StudySettings", "batch_sizes"]

RULES = ("linear", "sqrt")
LAUNCHERS = ("auto", "horovodrun", "srun", "none")
BUDGETS = ("updates", "epochs")


def batch_sizes(text: str) -> tuple[int, ...]:
    """``64,128,256`` -> the global batch sizes; ConfigError naming what is wrong."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"expected integers separated by commas, got {text!r}") from None
    if not values or min(values) < 1:
        raise ConfigError(f"expected positive batch sizes, got {text!r}")
    return values


@dataclass(frozen=True, kw_only=True)
class StudyRuns:
    """The data, the batch sizes and how every point's train.py run is made and launched:
    what a study's declaration inherits (with its own defaults where it differs)."""

    data: Path = option(help="preprocessed shards (manifest.json)", metavar="SHARDS")
    out: Path = option(help="study folder: runs/, study.csv, plot", metavar="STUDY")
    batches: tuple[int, ...] = option(
        help="global batch sizes, comma-separated, e.g. 64,128,256,512", parse=batch_sizes,
        metavar="B,B,...",
    )  # fmt: skip
    target_f1: float = option(help="validation micro-F1 a point is to reach",
                              check=require_open_fraction, metavar="F1")  # fmt: skip
    base_batch: int = option(256, "global batch the peak LR is meant for",
                             check=require_positive_int, metavar="B")  # fmt: skip
    ranks: int = option(1, "processes per point", check=require_positive_int, metavar="N")
    max_rank_batch: int = option(
        512, "largest per-rank batch; beyond it gradients are accumulated over passes",
        check=require_positive_int, metavar="B",
    )  # fmt: skip
    epochs: int = option(
        20, "budget: validations of --eval-steps updates per point, the same number of "
        "updates at every batch size (--budget epochs: passes over the training split)",
        check=require_positive_int, metavar="N",
    )  # fmt: skip
    warmup_epochs: float = option(
        2.0, "train.py's warm-up, in validations (epochs where each epoch is validated)",
        check=require_non_negative, metavar="N",
    )  # fmt: skip
    launcher: str = option(
        "auto", "auto: srun inside a Slurm allocation, else horovodrun for more than one rank",
        choices=LAUNCHERS,
    )  # fmt: skip
    train_args: tuple[str, ...] = field(default_factory=tuple)  # more train.py flags


@dataclass(frozen=True, kw_only=True)
class StudySettings(StudyRuns):
    """What the study runs; every point shares it but the batch size and the LR. Declared
    once: ``bigearthnet-batch-study``'s options are generated from these fields."""

    optimizer: str = option("sgd", "train.py --optimizer", choices=OPTIMIZERS)
    base_lr: float = option(0.1, "peak LR at --base-batch", check=require_positive, metavar="LR")
    rule: str = option("linear", "LR scaling with the batch: linear (Goyal et al.) or sqrt",
                       choices=RULES)  # fmt: skip
    budget: str = option(
        "updates", "updates: every batch size gets the same number of optimizer updates "
        "(steps to target, Shallue et al.); epochs: the same number of passes over the data, "
        "validated after each, as the seed study compared batch sizes", choices=BUDGETS,
    )  # fmt: skip
    eval_steps: int = option(10, "optimizer steps between validations",
                             check=require_positive_int, metavar="N")  # fmt: skip
    resolution: float | None = option(
        0.1, "resolve the steps to target within this fraction: larger batches validate every "
        "FRACTION x (perfect-scaling steps from the last point that reached the target) "
        "steps, the same update budget; 0 keeps every point at --eval-steps",
        check=require_fraction, metavar="FRACTION",
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)
