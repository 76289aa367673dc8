"""``bigearthnet-export RUN --out DIR``: a run's checkpoint as a SavedModel and an ONNX model
that take raw uint16 patches (normalisation and sigmoid inside), with a model card and a
STAC item (MLM extension). See :mod:`bigearthnet.export.bundle` and docs/export.md."""

from __future__ import annotations

import argparse
import os
import sys

from bigearthnet.cli.common import Parser, declared_parser, run
from bigearthnet.core.declare import from_args
from bigearthnet.export.options import ExportOptions

PROG = "bigearthnet-export"


def build_parser() -> Parser:
    return declared_parser(
        PROG,
        "Export a trained run's model so it can leave the run folder: OUT/savedmodel "
        "(TensorFlow, signature serving_default: images uint16 (N,120,120,C) in the run's band "
        "order -> probabilities float32 (N,classes)), OUT/model.onnx (the same, checked with "
        "onnxruntime), OUT/model_card.md, OUT/item.json (STAC item, MLM extension v1.5) and "
        "OUT/export.json. Written beside OUT and renamed into place when complete.",
        ExportOptions,
    )


def _export(args: argparse.Namespace) -> None:
    opts = from_args(ExportOptions, args)
    opts.check_inputs()  # before TensorFlow loads: a mistyped folder answers at once
    # TensorFlow's C++ INFO lines would bury the command's own lines.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from bigearthnet.export.bundle import export_run

    summary = export_run(opts)
    for note in summary.notes:
        print(f"{PROG}: {note}", file=sys.stderr)
    files = ", ".join(f"{kind} {size / 1e6:.1f} MB" for kind, size in summary.sizes.items())
    info = summary.info
    print(
        f"[export] {info.name}: epoch {info.source.epoch}, {len(info.bands)} bands, "
        f"{info.num_classes} classes -> {summary.folder} ({files}; model_card.md, item.json) "
        f"in {summary.seconds:.1f} s"
    )


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), _export, argv)


if __name__ == "__main__":
    sys.exit(main())
