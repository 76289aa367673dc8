"""``evaluate.py`` / ``bigearthnet-evaluate``: score a checkpoint of a run on a split, on every
rank; rank 0 writes the report.

One process or many, started by any Horovod launcher::

    python evaluate.py --run-dir runs/r50                         # test split, best checkpoint
    horovodrun -np 4 python evaluate.py --run-dir runs/r50 --split val
    srun --mpi=pmix python evaluate.py --run-dir runs/r50 --tune-thresholds

Outputs in OUT (default RUN/eval-<split>/): metrics.json, per_class.csv, predictions.h5,
thresholds.json (with --tune-thresholds) and PNG plots; see bigearthnet/evaluation/evaluate.py.
Exit codes: 0 done, 1 the split was not scored exactly once, 2 bad input or options.
"""

from __future__ import annotations

import argparse
import os

from bigearthnet.cli.common import Parser, run
from bigearthnet.cli.report import write_quietly
from bigearthnet.core.declare import add_options, from_args
from bigearthnet.evaluation.options import EvalOptions

PROG = "evaluate.py"
__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description="Parallel (Horovod) evaluation of a checkpoint of a training run on a "
        "split of the BigEarthNet HDF5 shards: metrics, per-class table, predictions, plots.",
        epilog="Outputs in OUT: metrics.json, per_class.csv, predictions.h5, thresholds.json "
        "(--tune-thresholds), f1_per_class.png, pr_curves.png, training_curves.png.",
    )
    add_options(parser, EvalOptions)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), _evaluate, argv)


def _evaluate(args: argparse.Namespace) -> None:
    opts = from_args(EvalOptions, args)
    opts.check_inputs()  # before TensorFlow loads: a mistyped folder answers at once
    # TensorFlow's C++ INFO lines (oneDNN, CPU features) drown the rank logs; keep warnings.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    # Imported after parsing so that --help and option errors answer without TensorFlow.
    from bigearthnet.core import distributed
    from bigearthnet.core.config import default_threads
    from bigearthnet.evaluation import evaluate as evaluation

    distributed.init(threads=default_threads())
    evaluation.evaluate_run(opts)
    write_quietly(opts.run_dir)
