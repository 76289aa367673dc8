"""``bigearthnet-batch-study``: the same recipe at several global batch sizes, steps to a
target validation micro-F1 at each; ``study.csv`` and a log-log plot answer "up to which
batch size can we scale?" (see :mod:`bigearthnet.scaling.batch_study`).

    bigearthnet-batch-study --data SHARDS --out STUDY --batches 64,128,256,512,1024 \\
        --target-f1 0.7 --optimizer lamb --base-lr 0.002 --base-batch 256 --rule sqrt --ranks 2

On one machine the points run under horovodrun; inside a Slurm allocation under srun
(jobs/batch_study.sbatch). Rerunning the same command resumes unfinished points.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bigearthnet.cli.common import Parser, checked, run
from bigearthnet.core.errors import (
    ConfigError,
    InputError,
    require_non_negative,
    require_open_fraction,
    require_positive,
    require_positive_int,
)
from bigearthnet.scaling.batch_study import LAUNCHERS, RULES, StudySettings, run_study

PROG = "bigearthnet-batch-study"
POSITIVE_INT = checked(require_positive_int, int)
POSITIVE = checked(require_positive, float)


def _batches(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers separated by commas, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive batch sizes, got {text!r}")
    return values


def build_parser() -> Parser:
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("--data", type=Path, required=True, help="preprocessed shards (manifest.json)")
    p.add_argument("--out", type=Path, required=True, help="study folder: runs/, study.csv, plot")
    p.add_argument(
        "--batches",
        type=_batches,
        required=True,
        help="global batch sizes, comma-separated, e.g. 64,128,256,512",
    )
    p.add_argument(
        "--target-f1",
        type=checked(require_open_fraction, float),
        required=True,
        help="validation micro-F1 each point trains to",
    )
    p.add_argument("--optimizer", default="sgd", help="train.py --optimizer (default: sgd)")
    p.add_argument(
        "--base-lr", type=POSITIVE, default=0.1, help="peak LR at --base-batch (default: 0.1)"
    )
    p.add_argument(
        "--base-batch",
        type=POSITIVE_INT,
        default=256,
        help="global batch --base-lr is meant for (default: 256)",
    )
    p.add_argument(
        "--rule",
        choices=RULES,
        default="linear",
        help="LR scaling with the batch: linear (Goyal et al.) or sqrt (default: linear)",
    )
    p.add_argument("--ranks", type=POSITIVE_INT, default=1, help="processes per point (default: 1)")
    p.add_argument(
        "--max-rank-batch",
        type=POSITIVE_INT,
        default=512,
        help="largest per-rank batch; beyond it gradients are accumulated over "
        "passes (default: 512)",
    )
    p.add_argument(
        "--epochs",
        type=POSITIVE_INT,
        default=20,
        help="budget: validations of --eval-steps updates per point, the same number of "
        "updates at every batch size (default: 20)",
    )
    p.add_argument(
        "--eval-steps",
        type=POSITIVE_INT,
        default=10,
        help="optimizer steps between validations (default: 10)",
    )
    p.add_argument(
        "--resolution",
        type=float,
        default=0.1,
        metavar="FRACTION",
        help="resolve the steps to target within this fraction: larger batches validate "
        "every FRACTION x (perfect-scaling steps from the last point that reached the "
        "target) steps, the same update budget; 0 keeps every point at --eval-steps "
        "(default: 0.1)",
    )
    p.add_argument(
        "--warmup-epochs",
        type=checked(require_non_negative, float),
        default=2.0,
        help="train.py warm-up, in validations (default: 2)",
    )
    p.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default="auto",
        help="auto: srun inside a Slurm allocation, else horovodrun for more than "
        "one rank (default: auto)",
    )
    p.add_argument(
        "train_args",
        nargs=argparse.REMAINDER,
        help="after --: more train.py flags for every point (e.g. -- --model tiny)",
    )
    return p


def _handle(args: argparse.Namespace) -> int:
    if not (args.data / "manifest.json").is_file():
        raise InputError(f"{args.data}: no manifest.json (not a preprocessed shard folder)")
    extra = [a for a in args.train_args if a != "--"]
    if any(flag in extra for flag in ("--batch-size", "--lr", "--data", "--run-dir")):
        raise ConfigError("train.py flags after -- may not set the batch, LR, data or run dir")
    if not 0.0 <= args.resolution < 1.0:
        raise ConfigError(f"--resolution must be in [0, 1), got {args.resolution}")
    settings = StudySettings(
        data=args.data,
        out=args.out,
        batches=args.batches,
        target_f1=args.target_f1,
        optimizer=args.optimizer,
        base_lr=args.base_lr,
        base_batch=args.base_batch,
        rule=args.rule,
        ranks=args.ranks,
        max_rank_batch=args.max_rank_batch,
        epochs=args.epochs,
        eval_steps=args.eval_steps,
        warmup_epochs=args.warmup_epochs,
        resolution=args.resolution or None,
        launcher=args.launcher,
        train_args=tuple(extra),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    results = run_study(settings, log=lambda line: print(line, file=sys.stderr, flush=True))
    if not any(r.steps_to_target is not None and not r.diverged for r in results):
        raise InputError(
            f"{args.out}: no batch size reached val micro-F1 {args.target_f1} within its "
            "budget (study.html says what each reached): lower --target-f1 or raise --epochs"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)


if __name__ == "__main__":
    sys.exit(main())
