"""``bigearthnet-weights``: start from the field's published ResNet weights.

* ``import SRC --out WEIGHTS``: a timm/torchvision ResNet-18/50 state dict (reBEN, SSL4EO-S12,
  timm, torchvision) -> a Keras weights folder for ``train.py --init-weights`` (and any
  registry ResNet's ``load_weights(..., by_name=True, skip_mismatch=True)``);
* ``run SRC --out RUN``: a published classifier (with its head) -> a trained-run folder that
  ``evaluate.py``, ``bigearthnet-map`` and ``bigearthnet-export`` take unchanged.

See docs/weights.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bigearthnet.cli.common import Command, Parser, declared_parser, dispatch
from bigearthnet.core import constants
from bigearthnet.core.declare import from_args
from bigearthnet.weights.importer import WeightsOptions  # no TensorFlow: --help answers at once

PROG = "bigearthnet-weights"
DESCRIPTION = (
    "Start from the field's published ResNet-18/50 weights (reBEN, SSL4EO-S12, timm, "
    "torchvision; .safetensors, or .pth/.ckpt with PyTorch installed): import a backbone for "
    "train.py --init-weights, or make a trained-run folder of a published classifier. See "
    "docs/weights.md."
)


def build_import_parser() -> Parser:
    return declared_parser(
        f"{PROG} import",
        "Convert a published ResNet-18/50 state dict into OUT/weights.h5 (Keras) and "
        "OUT/weights.json (source, channels, normalisation, head classes, adaptations).",
        WeightsOptions,
    )


def build_run_parser() -> Parser:
    return declared_parser(
        f"{PROG} run",
        "Make a trained-run folder from a published classifier (a state dict with a head of "
        "19 or 43 classes), normalising as the source did.",
        WeightsOptions,
        exclude=("head",),
    )


def _print(record, out: Path, what: str) -> None:  # record: WeightsRecord
    for note in record.adaptations:
        print(f"{PROG}: {note}", file=sys.stderr)
    head = f"head of {record.num_classes} classes" if record.has_head else "no head"
    print(
        f"[weights] {record.source} {record.model} ({record.file}) -> {what} {out}: "
        f"{constants.describe_bands(record.bands)}, {head}; normalisation: {record.normalisation}"
    )


def _import(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from bigearthnet.weights.importer import import_weights

    opts = from_args(WeightsOptions, args)
    _print(import_weights(opts), opts.out, "weights")


def _run(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from bigearthnet.weights.published_run import make_run

    opts = from_args(WeightsOptions, args)
    _print(make_run(opts), opts.out, "run")


def main(argv: list[str] | None = None) -> int:
    commands = {
        "import": Command("a published ResNet state dict -> weights for train.py --init-weights",
                          build_import_parser, _import),
        "run": Command("a published classifier -> a run folder evaluate.py, maps, export take",
                       build_run_parser, _run),
    }  # fmt: skip
    return dispatch(argv, commands, prog=PROG, description=DESCRIPTION)


if __name__ == "__main__":
    sys.exit(main())
