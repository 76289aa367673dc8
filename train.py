"""Train a multi-label land-cover classifier on preprocessed BigEarthNet shards.

A thin shim over :mod:`bigearthnet.cli.train` (``bigearthnet-train``), kept at the top of
the repository so that ``python train.py ...`` works from a checkout; ``--help`` lists
every option.
"""

from __future__ import annotations

import sys

from bigearthnet.cli.interpreter import require_dependencies

if __name__ == "__main__":  # first: a Python without the dependencies gets one line, exit 2
    require_dependencies("train.py")

from bigearthnet.cli.train import EXIT_REQUEUE, build_parser, cli, main  # noqa: E402

__all__ = ["EXIT_REQUEUE", "build_parser", "cli", "main"]

if __name__ == "__main__":
    sys.exit(cli())
