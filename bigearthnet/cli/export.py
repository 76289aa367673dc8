"""``bigearthnet-export RUN --out DIR``: a run's checkpoint as a SavedModel and an ONNX model
that take raw uint16 patches (normalisation and sigmoid inside), with a model card and a
STAC item (MLM extension). See :mod:`bigearthnet.export.bundle` and docs/export.md."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bigearthnet.cli.common import Parser, add_stats_from, run

PROG = "bigearthnet-export"


def build_parser() -> Parser:
    p = Parser(
        prog=PROG,
        description="Export a trained run's model so it can leave the run folder: OUT/savedmodel "
        "(TensorFlow, signature serving_default: images uint16 (N,120,120,C) in the run's band "
        "order -> probabilities float32 (N,classes)), OUT/model.onnx (the same, checked with "
        "onnxruntime), OUT/model_card.md, OUT/item.json (STAC item, MLM extension v1.5) and "
        "OUT/export.json. Written beside OUT and renamed into place when complete.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN", help="run folder made by train.py")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="the export folder")
    p.add_argument(
        "--checkpoint",
        default="best",
        metavar="best|latest|PATH",
        help="best, latest, or PATH of a checkpoint folder / ckpt prefix (default: best)",
    )
    p.add_argument(
        "--format",
        default="savedmodel,onnx",
        metavar="LIST",
        help="model files to write, comma-separated: savedmodel, onnx (default: both; the "
        "SavedModel is what bigearthnet-map --model reads)",
    )
    p.add_argument(
        "--eval-dir",
        type=Path,
        metavar="DIR",
        help="the evaluate.py output whose metrics go into the card; it must have evaluated "
        "the exported checkpoint (default: RUN/eval-test, when it did)",
    )
    p.add_argument(
        "--name",
        help="the model's name in the card and the STAC item (default: "
        "bigearthnet-MODEL-Cc-RUNNAME-eEPOCH)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing, non-empty DIR")
    add_stats_from(p)
    return p


def _export(args: argparse.Namespace) -> None:
    # TensorFlow's C++ INFO lines would bury the command's own lines.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from bigearthnet.export.bundle import export_run, parse_formats

    formats = parse_formats(args.format)
    summary = export_run(
        args.run_dir,
        args.out,
        checkpoint=args.checkpoint,
        formats=formats,
        eval_dir=args.eval_dir,
        name=args.name,
        force=args.force,
        stats_from=args.stats_from,
    )
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
