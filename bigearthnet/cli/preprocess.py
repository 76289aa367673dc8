"""``bigearthnet-preprocess ARCHIVE OUT``: a BigEarthNet archive -> upsampled HDF5 shards
(see :mod:`bigearthnet.preprocessing.preprocess`). Parses, builds the options, runs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bigearthnet.cli.common import Parser, run
from bigearthnet.core import constants
from bigearthnet.core.errors import UsageError
from bigearthnet.preprocessing import splits
from bigearthnet.preprocessing.plan import Options
from bigearthnet.preprocessing.resample import METHODS


def slurm_task_defaults(environ=os.environ) -> tuple[int, int]:
    """(num_tasks, task_index) from a Slurm job array or a multi-task step, else (1, 0)."""
    if "SLURM_ARRAY_TASK_ID" in environ and "SLURM_ARRAY_TASK_COUNT" in environ:
        base = int(environ.get("SLURM_ARRAY_TASK_MIN", 0))
        return int(environ["SLURM_ARRAY_TASK_COUNT"]), int(environ["SLURM_ARRAY_TASK_ID"]) - base
    if "SLURM_STEP_ID" in environ and "SLURM_NTASKS" in environ and "SLURM_PROCID" in environ:
        return int(environ["SLURM_NTASKS"]), int(environ["SLURM_PROCID"])
    return 1, 0


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="bigearthnet-preprocess",
        description="Turn a BigEarthNet archive (v1 folders + JSON, or v2 tiles + "
        "metadata.parquet; Sentinel-2 and, with --bands s1|all, Sentinel-1) into 120x120xC "
        "uint16 HDF5 shards with a manifest.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "archive",
        type=Path,
        help="archive root (v1: patch folders; v2: folder "
        "with metadata.parquet and BigEarthNet-S2/)",
    )
    p.add_argument("out", type=Path, help="output folder for shards, manifest.json, rejects.csv")
    # The same groups as train.py's --help: by concern.
    data = p.add_argument_group("data options")
    distribution = p.add_argument_group("distribution options")
    faults = p.add_argument_group("faults and resume options")
    monitoring = p.add_argument_group("monitoring options")
    data.add_argument(
        "--version",
        choices=("auto", "v1", "v2"),
        default="auto",
        help="archive layout; auto detects it",
    )
    data.add_argument(
        "--splits-dir",
        type=Path,
        help="folder with official train.csv, val.csv, "
        "test.csv (patch names in the first column, no header)",
    )
    data.add_argument(
        "--split-ratios",
        help="seeded random train,val,test split, e.g. 0.6,0.2,0.2 "
        "(default when no official split is available; overrides the v2 split column)",
    )
    data.add_argument(
        "--seed", type=int, default=0, help="seed of the random split and shard order"
    )
    data.add_argument(
        "--exclude",
        type=Path,
        nargs="+",
        default=[],
        metavar="FILE",
        help="CSV lists of patch names to leave out (e.g. the snow and cloud lists)",
    )
    data.add_argument(
        "--include-snow-cloud",
        action="store_true",
        help="v2: also use patches of the snow/cloud/shadow parquet",
    )
    data.add_argument(
        "--resampling",
        choices=METHODS,
        default="bilinear",
        help="upsampling of the 20 m and 60 m bands (pixel centres aligned)",
    )
    data.add_argument(
        "--bands",
        choices=tuple(constants.BAND_CONFIGS),
        default=constants.DEFAULT_BAND_CONFIG,
        help="band configuration: s2 = the 12 S2 bands; s2-10 = reBEN's 10 (no 60 m band); "
        "s1 = VV,VH; all = VV,VH then s2-10 (reBEN v0.2.0's order)",
    )
    data.add_argument(
        "--s1-archive",
        type=Path,
        help="Sentinel-1 for --bands s1|all: v1 needs the BigEarthNet-S1-v1.0 folder; v2 "
        "defaults to ARCHIVE/BigEarthNet-S1",
    )
    data.add_argument(
        "--shard-size", type=int, default=1000, help="patches per shard (~345 KB each)"
    )
    distribution.add_argument("--workers", type=int, default=1, help="processes on this node")
    distribution.add_argument(
        "--num-tasks",
        type=int,
        help="tasks (nodes) splitting the archive; default "
        "from SLURM_ARRAY_TASK_COUNT or SLURM_NTASKS, else 1",
    )
    distribution.add_argument(
        "--task-index",
        type=int,
        help="this task's index; default from SLURM_ARRAY_TASK_ID or SLURM_PROCID, else 0",
    )
    distribution.add_argument(
        "--join",
        action="store_true",
        help="only merge finished shards into manifest.json (after a multi-task run)",
    )
    faults.add_argument("--strict", action="store_true", help="exit 1 when any patch is rejected")
    faults.add_argument(
        "--overwrite", action="store_true", help="delete earlier outputs in OUT first"
    )
    monitoring.add_argument(
        "--no-progress", dest="progress", action="store_false", help="no progress bar (logs stay)"
    )
    return p


def options_from_args(args: argparse.Namespace) -> Options:
    num_tasks, task_index = slurm_task_defaults()
    opts = Options(
        archive=args.archive,
        out=args.out,
        version=args.version,
        splits_dir=args.splits_dir,
        split_ratios=splits.parse_ratios(args.split_ratios) if args.split_ratios else None,
        seed=args.seed,
        exclude=args.exclude,
        include_snow_cloud=args.include_snow_cloud,
        resampling=args.resampling,
        band_config=args.bands,
        s1_archive=args.s1_archive,
        shard_size=args.shard_size,
        workers=args.workers,
        num_tasks=args.num_tasks if args.num_tasks is not None else num_tasks,
        task_index=args.task_index if args.task_index is not None else task_index,
        strict=args.strict,
        overwrite=args.overwrite,
        join=args.join,
        progress=args.progress,
    )
    if opts.shard_size < 1 or opts.workers < 1 or opts.num_tasks < 1:
        raise UsageError("--shard-size, --workers and --num-tasks must be at least 1")
    if not 0 <= opts.task_index < opts.num_tasks:
        raise UsageError(f"--task-index {opts.task_index} outside 0..{opts.num_tasks - 1}")
    if not opts.archive.is_dir():
        raise UsageError(f"{opts.archive}: archive folder does not exist")
    return opts


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), lambda args: _preprocess(args, argv), argv)


def _preprocess(args: argparse.Namespace, argv: list[str] | None) -> int:
    from bigearthnet.preprocessing.preprocess import (
        run as run_preprocessing,  # numpy, h5py: after parsing
    )

    return run_preprocessing(options_from_args(args), argv)


if __name__ == "__main__":
    sys.exit(main())
