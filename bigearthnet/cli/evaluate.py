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

from bigearthnet.cli.common import Parser, add_stats_from, run
from bigearthnet.cli.report import write_quietly
from bigearthnet.core.errors import require_open_fraction, require_positive_int

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
    parser.add_argument(
        "--run-dir", required=True, metavar="RUN", help="run folder made by train.py"
    )
    parser.add_argument(
        "--data",
        metavar="DIR",
        help="folder with the shards and manifest.json (default: data of RUN/config.yaml)",
    )
    parser.add_argument(
        "--split",
        default="test",
        choices=("test", "val", "train"),
        help="split to score (default: test)",
    )
    parser.add_argument(
        "--checkpoint",
        default="best",
        metavar="best|latest|PATH",
        help="best, latest, or PATH of a checkpoint folder / ckpt prefix (default: best)",
    )
    parser.add_argument("--out", metavar="DIR", help="report folder (default: RUN/eval-<split>/)")
    parser.add_argument(
        "--threshold",
        type=float,
        metavar="T",
        help="score threshold inside (0, 1) for F1, precision, recall "
        "(default: threshold of RUN/config.yaml, 0.5)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="batch size per rank (default: that of RUN/config.yaml)",
    )
    parser.add_argument(
        "--tune-thresholds",
        action="store_true",
        help="choose one threshold per class on the val split (best F1) and report the "
        "split with them; saved as OUT/thresholds.json",
    )
    add_stats_from(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), _evaluate, argv)


def _evaluate(args: argparse.Namespace) -> None:
    if args.threshold is not None:
        require_open_fraction("--threshold", args.threshold)
    if args.batch_size is not None:
        require_positive_int("--batch-size", args.batch_size)
    # TensorFlow's C++ INFO lines (oneDNN, CPU features) drown the rank logs; keep warnings.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    # Imported after parsing so that --help and option errors answer without TensorFlow.
    from bigearthnet.core import distributed
    from bigearthnet.core.config import default_threads
    from bigearthnet.evaluation import evaluate as evaluation

    distributed.init(threads=default_threads())
    evaluation.evaluate_run(
        args.run_dir,
        data_dir=args.data,
        split=args.split,
        checkpoint=args.checkpoint,
        out=args.out,
        threshold=args.threshold,
        batch_size=args.batch_size,
        tune_thresholds=args.tune_thresholds,
        stats_from=args.stats_from,
    )
    write_quietly(args.run_dir)
