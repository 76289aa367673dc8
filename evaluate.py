"""Evaluate a trained run on a split: every rank predicts its part, rank 0 writes the report.

A thin shim over :mod:`bigearthnet.cli.evaluate` (``bigearthnet-evaluate``), kept at the top
of the repository so that ``python evaluate.py ...`` works from a checkout; ``--help`` lists
every option.
"""

from __future__ import annotations

import sys

from bigearthnet.cli.interpreter import require_dependencies

if __name__ == "__main__":  # first: a Python without the dependencies gets one line, exit 2
    require_dependencies("evaluate.py")

from bigearthnet.cli.evaluate import build_parser, main  # noqa: E402

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
