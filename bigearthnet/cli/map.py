"""``bigearthnet-map``: land-cover GeoTIFFs from a trained run (see
:mod:`bigearthnet.maps.patches`).
Parses, picks the input (an archive or shards), predicts and writes the maps."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from bigearthnet.cli.common import Parser, add_stats_from, run
from bigearthnet.core import constants
from bigearthnet.core.util import overlapping
from bigearthnet.maps.patches import (
    PROG,
    MapError,
    MapFile,
    archive_batches,
    predict_places,
    shard_batches,
    write_maps,
)
from bigearthnet.preprocessing.resample import METHODS


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=PROG,
        description="Predict every patch of an archive or of preprocessed shards with a "
        "trained run and write land-cover GeoTIFFs whose pixels are the 1.2 km patches "
        "(band 1: top class index; bands 2..C+1: class probability x 250; 255 = nodata), "
        "one file per CRS and 1.2 km lattice (per Sentinel-2 tile), plus PNG previews.",
    )
    add_model_options(p)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--archive", type=Path, metavar="DIR", help="BigEarthNet-S2 archive root (v1 or v2)"
    )
    source.add_argument(
        "--shards", type=Path, metavar="DIR", help="folder of shards made by bigearthnet-preprocess"
    )
    p.add_argument(
        "--split",
        nargs="+",
        choices=constants.SPLITS,
        help="with --shards: the split(s) to map (default: all)",
    )
    p.add_argument(
        "--version",
        choices=("auto", "v1", "v2"),
        default="auto",
        help="with --archive: its layout (default: detected)",
    )
    p.add_argument(
        "--resampling",
        choices=METHODS,
        help="with --archive: upsampling of the 20/60 m bands (default: the one of the run's "
        "training data, else bilinear)",
    )
    p.add_argument(
        "--include-snow-cloud",
        action="store_true",
        help="with a v2 --archive: also map the patches of the snow/cloud/shadow table",
    )
    p.add_argument(
        "--s1-archive",
        type=Path,
        metavar="DIR",
        help="with --archive and a model of Sentinel-1 bands: where S1 is (v1: the "
        "BigEarthNet-S1-v1.0 folder; v2 default: ARCHIVE/BigEarthNet-S1)",
    )
    p.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="DIR",
        help="output folder: <tile>.tif, <tile>.png, patches.csv",
    )
    p.add_argument(
        "--batch-size", type=int, default=64, metavar="N", help="patches per batch (default: 64)"
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    return p


def add_model_options(p: argparse.ArgumentParser) -> None:
    """The model to map with: a run's checkpoint or an export folder."""
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("--run-dir", type=Path, metavar="RUN", help="run folder made by train.py")
    model.add_argument(
        "--model",
        type=Path,
        metavar="EXPORT",
        help="an export folder made by bigearthnet-export (no run folder needed)",
    )
    p.add_argument(
        "--checkpoint",
        default="best",
        metavar="best|latest|PATH",
        help="with --run-dir: best, latest, or PATH of a checkpoint folder / ckpt prefix "
        "(default: best)",
    )
    add_stats_from(p)


def _inputs(args, loaded, skipped: list) -> tuple[int, Iterator]:
    from bigearthnet.inference.predictor import check_bands

    if args.shards is not None:
        from bigearthnet.formats.shards import read_manifest

        manifest = read_manifest(args.shards)
        check_bands(loaded, manifest.bands, f"shards {args.shards}")
        return shard_batches(
            args.shards, manifest, args.split or list(constants.SPLITS), args.batch_size
        )
    # The archive reader reads whichever bands the model takes, in its order.
    return archive_batches(
        args.archive,
        args.version,
        args.resampling or loaded.resampling,
        args.batch_size,
        args.include_snow_cloud,
        skipped,
        bands=tuple(loaded.bands),
        s1_root=args.s1_archive,
    )


def make_maps(args: argparse.Namespace) -> list[MapFile]:
    """Predict and write; raises MapError (and the readers' ValueErrors) on bad input."""
    from bigearthnet.inference.predictor import open_predictor

    if args.batch_size < 1:
        raise MapError(f"--batch-size must be a positive integer, got {args.batch_size}")
    if args.split and args.shards is None:
        raise MapError("--split applies to --shards only")
    _check_out(args, shards=args.shards, archive=args.archive, s1_archive=args.s1_archive)
    loaded = open_predictor(
        run_dir=args.run_dir,
        model_dir=args.model,
        checkpoint=args.checkpoint,
        stats_from=args.stats_from,
    )
    skipped: list[tuple[str, str]] = []
    total, batches = _inputs(args, loaded, skipped)
    places, scores = predict_places(loaded, batches, total, args.progress)
    for name, reason in skipped[:5]:
        print(f"{PROG}: skipped {name}: {reason}", file=sys.stderr)
    if not places:
        raise MapError(f"no patch to map ({len(skipped)} unreadable)")
    files = write_maps(args.out, places, scores, loaded)
    print(
        f"[map] {len(places)} patches ({len(skipped)} skipped) -> {len(files)} GeoTIFF(s) "
        f"in {args.out}: " + ", ".join(f"{f.name}.tif" for f in files)
    )
    return files


def main(argv: list[str] | None = None) -> int:
    """``bigearthnet-map scene ...`` maps a Sentinel-2 scene, ``bigearthnet-map change A B``
    compares two scene maps; without a sub-command (or with ``patches``) the patches of an
    archive or of shards, as before."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["scene"]:
        return run(build_scene_parser(), _map_scene, args[1:])
    if args[:1] == ["change"]:
        return run(build_change_parser(), _map_change, args[1:])
    if args[:1] == ["region"]:
        from bigearthnet.cli.map_region import build_region_parser, map_region_command

        return run(build_region_parser(add_model_options), map_region_command, args[1:])
    if args[:1] == ["patches"]:
        args = args[1:]
    return run(build_parser(), _map, args)


def build_scene_parser() -> Parser:
    from bigearthnet.maps.windows import STRIDES

    p = Parser(
        prog=f"{PROG} scene",
        description="Land-cover map of a whole Sentinel-2 scene: 120x120 px windows slid with "
        "--stride, probabilities averaged where windows overlap; a Cloud-Optimized GeoTIFF "
        "with a colour table and one probability band per class, and the area per class. "
        "Memory: the bands of one strip of windows (~32 MB for a 10,980 px tile) and a batch.",
    )
    p.add_argument(
        "scene",
        type=Path,
        metavar="INPUT",
        help="an L2A .SAFE product folder (JPEG 2000 bands), a folder of single-band "
        "GeoTIFFs named by band (*B02*.tif ...), or one multi-band GeoTIFF at 10 m "
        "(see --band-order)",
    )
    p.add_argument(
        "--band-order",
        type=_band_list,
        metavar="B01,B02,...",
        help="with a multi-band GeoTIFF: the band name of each of its bands in order ('-' "
        "for a band to ignore); default: the bands' descriptions, else the 12 BigEarthNet "
        "bands in canonical order (B01,B02,B03,B04,B05,B06,B07,B08,B8A,B09,B11,B12)",
    )
    p.add_argument(
        "--bbox",
        type=_bbox,
        metavar="MINX,MINY,MAXX,MAXY",
        help="map only this box, in the scene's CRS (widened to the 60 m grid)",
    )
    p.add_argument(
        "--labels",
        type=int,
        choices=(19, 43),
        help="the class set the map must have: refused (exit 2) if the run's model predicts "
        "another (default: the model's)",
    )
    p.add_argument(
        "--mask-clouds",
        action="store_true",
        help="nodata where the L2A scene classification (SCL band, *_SCL_20m.jp2 or *SCL*.tif) "
        "marks cloud shadow, cloud, thin cirrus or snow (cells more than half masked)",
    )
    add_model_options(p)
    p.add_argument("--out", required=True, type=Path, metavar="MAP.tif", help="the map to write")
    p.add_argument(
        "--stride",
        type=int,
        default=60,
        choices=STRIDES,
        metavar="PX",
        help=f"window step in 10 m pixels, the map's cell size: one of {STRIDES} "
        "(default: 60 = 600 m; 12 = 120 m for a fine map)",
    )
    p.add_argument(
        "--resampling",
        choices=METHODS,
        help="upsampling of the 20/60 m bands (default: the run's training data's)",
    )
    p.add_argument(
        "--batch-size", type=int, default=64, metavar="N", help="windows per batch (default: 64)"
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    return p


def _map_scene(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from bigearthnet.maps.scene import map_scene

    if args.batch_size < 1:
        raise MapError(f"--batch-size must be a positive integer, got {args.batch_size}")
    _check_out(args, scene=args.scene)
    map_scene(
        args.scene,
        run_dir=args.run_dir,
        model_dir=args.model,
        out=args.out,
        stride=args.stride,
        checkpoint=args.checkpoint,
        stats_from=args.stats_from,
        resampling=args.resampling,
        batch_size=args.batch_size,
        progress=args.progress,
        bbox=args.bbox,
        band_order=args.band_order,
        mask_clouds=args.mask_clouds,
        labels=args.labels,
    )


def _band_list(text: str) -> list[str]:
    return [name.strip() for name in text.split(",")]


def _bbox(text: str) -> tuple[float, float, float, float]:
    from bigearthnet.maps.scene_input import parse_bbox

    try:
        return parse_bbox(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_change_parser() -> Parser:
    p = Parser(
        prog=f"{PROG} change",
        description="How the land cover changed between two scene maps of one place "
        "(bigearthnet-map scene outputs): a Cloud-Optimized GeoTIFF on A's grid with "
        "from*100+to where the top class changed (0 = no change, 65534 = below --min-prob, "
        "65535 = nodata in either map), the transitions in km^2 (CHANGE.tif.transitions.csv) "
        "and a preview (CHANGE.png). B is resampled onto A's grid (nearest) if they differ.",
    )
    p.add_argument("before", type=Path, metavar="A.tif", help="the map of the earlier date")
    p.add_argument("after", type=Path, metavar="B.tif", help="the map of the later date")
    p.add_argument("--out", required=True, type=Path, metavar="CHANGE.tif", help="change map")
    p.add_argument(
        "--min-prob",
        type=float,
        metavar="P",
        help="count a cell only where both dates' top-class probability is at least P "
        "(reads A.tif.probabilities.tif and B.tif.probabilities.tif); default: every cell",
    )
    return p


def _check_out(args: argparse.Namespace, **inputs: Path | None) -> None:
    """MapError when --out is an input of the command or a folder holding one."""
    named = {f"--{k.replace('_', '-')}": v for k, v in inputs.items()}
    named.update(
        {"--run-dir": getattr(args, "run_dir", None), "--model": getattr(args, "model", None)}
    )
    clash = overlapping(args.out, named)
    if clash is not None:
        raise MapError(f"{args.out}: --out overlaps {clash}; choose another output")


def _map_change(args: argparse.Namespace) -> None:
    _check_out(args, before=args.before, after=args.after)
    from bigearthnet.maps.change import map_change

    summary = map_change(args.before, args.after, out=args.out, min_prob=args.min_prob)
    print(
        f"[map] {args.out}: {summary.changed_km2:,.2f} km² changed in {summary.transitions} "
        f"transition(s), {summary.stable_km2:,.2f} km² unchanged, "
        f"{summary.uncertain_km2:,.2f} km² below --min-prob"
    )


def _map(args: argparse.Namespace) -> None:
    # TensorFlow's C++ INFO lines (oneDNN, CPU features) would bury the one-line messages.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    make_maps(args)


if __name__ == "__main__":
    sys.exit(main())
