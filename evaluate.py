"""Evaluate a trained run on a split: every rank predicts its part, rank 0 writes the report.

One process or many, started by any Horovod launcher::

    python evaluate.py --run-dir runs/r50                         # test split, best checkpoint
    horovodrun -np 4 python evaluate.py --run-dir runs/r50 --split val
    srun --mpi=pmix python evaluate.py --run-dir runs/r50 --tune-thresholds

Outputs in OUT (default RUN/eval-<split>/): metrics.json, per_class.csv, predictions.h5,
thresholds.json (with --tune-thresholds) and PNG plots; see bigearthnet/evaluation.py.
Exit codes: 0 done, 1 the split was not scored exactly once, 2 bad input or options.
"""

from __future__ import annotations

import argparse
import os
import sys

from bigearthnet.util import OneLineParser

PROG = "evaluate.py"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
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
    return parser


def _option_error(args: argparse.Namespace) -> str | None:
    if args.threshold is not None and not 0.0 < args.threshold < 1.0:
        return f"--threshold must be inside (0, 1), got {args.threshold}"
    if args.batch_size is not None and args.batch_size < 1:
        return f"--batch-size must be a positive integer, got {args.batch_size}"
    return None


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a bad option (2): a code, not an exception
        return exc.code if isinstance(exc.code, int) else 2
    problem = _option_error(args)
    if problem:
        print(f"{PROG}: error: {problem}", file=sys.stderr)
        return 2
    # TensorFlow's C++ INFO lines (oneDNN, CPU features) drown the rank logs; keep warnings.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    # Imported after parsing so that --help and option errors answer without TensorFlow.
    from bigearthnet import distributed, evaluation, runlock
    from bigearthnet.config import default_threads
    from bigearthnet.util import first_line

    try:
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
        )
    except evaluation.EvaluationError as err:
        print(f"{PROG}: error: {first_line(err)}", file=sys.stderr)
        return 1
    except (ValueError, OSError, distributed.DistributedError) as err:
        print(f"{PROG}: error: {first_line(err)}", file=sys.stderr)
        return 2
    finally:
        runlock.release_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
