"""Train a multi-label land-cover classifier on preprocessed BigEarthNet shards.

A thin shim over :mod:`bigearthnet.cli.train` (``bigearthnet-train``), kept at the top of
the repository so that ``python train.py ...`` works from a checkout; ``--help`` lists
every option.
"""

from __future__ import annotations

import sys

from bigearthnet.cli.train import EXIT_REQUEUE, build_parser, cli, main

__all__ = ["EXIT_REQUEUE", "build_parser", "cli", "main"]

if __name__ == "__main__":
    sys.exit(cli())
