"""``bigearthnet-preprocess ARCHIVE OUT``: a BigEarthNet archive -> upsampled HDF5 shards
(see :mod:`bigearthnet.preprocessing.preprocess`). Parses, builds the options, runs."""

from __future__ import annotations

import argparse
import sys

from bigearthnet.cli.common import Parser, declared_parser, run
from bigearthnet.core.declare import from_args
from bigearthnet.preprocessing.plan import Options


def build_parser() -> Parser:
    return declared_parser(
        "bigearthnet-preprocess",
        "Turn a BigEarthNet archive (v1 folders + JSON, or v2 tiles + metadata.parquet; "
        "Sentinel-2 and, with --bands s1|all, Sentinel-1) into 120x120xC uint16 HDF5 shards "
        "with a manifest.",
        Options,
    )


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), lambda args: _preprocess(args, argv), argv)


def _preprocess(args: argparse.Namespace, argv: list[str] | None) -> int:
    from bigearthnet.preprocessing.preprocess import (
        run as run_preprocessing,  # numpy, h5py: after parsing
    )

    return run_preprocessing(from_args(Options, args), argv)


if __name__ == "__main__":
    sys.exit(main())
