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

from bigearthnet.cli.common import Parser, run
from bigearthnet.core import constants
from bigearthnet.weights.sources import SOURCES  # no TensorFlow: --help answers at once

PROG = "bigearthnet-weights"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "src",
        type=Path,
        metavar="SRC",
        help="the state dict: .safetensors (no PyTorch needed) or .pth/.pt/.ckpt (needs "
        "PyTorch); a wrapper's key prefix (model.vision_encoder., module.) is taken off",
    )
    p.add_argument(
        "--source",
        default="timm",
        choices=SOURCES,
        help="who published it: sets the channels, normalisation and head order (default: timm)",
    )
    p.add_argument(
        "--bands",
        choices=sorted(constants.BAND_CONFIGS),
        help="the band configuration to serve (default: the source's own); channels the "
        "source lacks get the mean filter, channels it has more are dropped",
    )
    p.add_argument("--force", action="store_true", help="replace an existing, non-empty --out")


def build_import_parser() -> Parser:
    p = Parser(
        prog=f"{PROG} import",
        description="Convert a published ResNet-18/50 state dict into OUT/weights.h5 (Keras) "
        "and OUT/weights.json (source, channels, normalisation, head classes, adaptations).",
    )
    _common(p)
    p.add_argument("--out", required=True, type=Path, metavar="WEIGHTS", help="the folder")
    p.add_argument(
        "--no-head",
        dest="head",
        action="store_false",
        help="import the backbone only, dropping a classifier head (needed for a head of "
        "another class count than 19 or 43, e.g. ImageNet's 1000)",
    )
    return p


def build_run_parser() -> Parser:
    p = Parser(
        prog=f"{PROG} run",
        description="Make a trained-run folder from a published classifier (a state dict with "
        "a head of 19 or 43 classes), normalising as the source did.",
    )
    _common(p)
    p.add_argument("--out", required=True, type=Path, metavar="RUN", help="the run folder")
    return p


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

    record = import_weights(
        args.src, args.out, args.source, args.bands, head=args.head, force=args.force
    )
    _print(record, args.out, "weights")


def _run(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from bigearthnet.weights.published_run import make_run

    record = make_run(args.src, args.out, args.source, args.bands, force=args.force)
    _print(record, args.out, "run")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["run"]:
        return run(build_run_parser(), _run, args[1:])
    if args[:1] == ["import"]:
        return run(build_import_parser(), _import, args[1:])
    top = Parser(prog=PROG, description=__doc__.split("\n\n")[0] if __doc__ else None)
    top.add_argument("command", choices=("import", "run"), help="import or run; then --help")
    return run(top, lambda a: None, args[:1])


if __name__ == "__main__":
    sys.exit(main())
