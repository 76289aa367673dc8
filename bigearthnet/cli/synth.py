"""``bigearthnet-synth OUT``: write a small synthetic BigEarthNet archive (see
:mod:`bigearthnet.synthetic.archive`); ``bigearthnet-synth scene OUT``: a synthetic
Sentinel-2 L2A scene of known land cover (see :mod:`bigearthnet.synthetic.scene`);
``bigearthnet-synth region OUT``: scenes of a region across two UTM zones over several dates,
with known changes and clouds (see :mod:`bigearthnet.synthetic.region`);
``bigearthnet-synth score REGION SERIES``: a region series against that region's truth (see
:mod:`bigearthnet.synthetic.region_score`)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bigearthnet.cli.common import Parser, run
from bigearthnet.core.errors import UsageError


def _int_at_least(minimum: int):
    """argparse type: an integer >= ``minimum`` (one message shape for every flag)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


_positive_int, _non_negative_int = _int_at_least(1), _int_at_least(0)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="bigearthnet-synth",
        description=(
            "Write a small synthetic BigEarthNet archive in the real v1 or v2 (reBEN) format. "
            "Each class has a fixed 12-band spectral signature; a patch holds 1-3 classes as "
            "rectangular regions and is labelled with exactly those classes, so a small CNN "
            "learns the task in a few epochs."
        ),
    )
    parser.add_argument("out", metavar="OUT", type=Path, help="archive directory to create")
    parser.add_argument(
        "--patches", "-n", type=_positive_int, default=100, metavar="N",
        help="number of patches to generate, >= 1 (default: 100)",
    )  # fmt: skip
    parser.add_argument(
        "--layout", choices=("v1", "v2"), default="v1",
        help="v1: one folder per patch with a labels JSON (43 classes); v2: reBEN "
        "BigEarthNet-S2/<tile>/<patch>/ folders plus metadata parquet files (19 classes, "
        "train/validation/test splits, snow/cloud list) (default: v1)",
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=_non_negative_int, default=0, metavar="S",
        help="archive seed, >= 0: same seed gives byte-identical files (default: 0)",
    )  # fmt: skip
    parser.add_argument(
        "--workers", "-j", type=_positive_int, default=1, metavar="W",
        help="processes writing patches in parallel; output does not depend on it (default: 1)",
    )  # fmt: skip
    parser.add_argument(
        "--overwrite", action="store_true",
        help="replace OUT if it exists and is not empty (the old one is removed only at the end)",
    )  # fmt: skip
    parser.add_argument(
        "--s1", action="store_true",
        help="also Sentinel-1 VV/VH (float32 dB) of the same regions: v2 in OUT/BigEarthNet-S1, "
        "v1 as the S1 v1.0 archive OUT/BigEarthNet-S1-v1.0 (preprocess --s1-archive)",
    )  # fmt: skip
    return parser


def build_scene_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="bigearthnet-synth scene",
        description="Write a synthetic Sentinel-2 L2A scene of known land cover: BLOCKS x "
        "BLOCKS squares of 2.4 km, each one 19-class land cover with the same spectral "
        "signatures as the synthetic archive, in UTM 33N, for trying bigearthnet-map scene.",
    )
    parser.add_argument("out", metavar="OUT", type=Path, help="folder (tif, safe) or file (stack)")
    parser.add_argument(
        "--layout", choices=("tif", "safe", "stack"), default="safe",
        help="safe: an L2A product folder with JPEG 2000 bands; tif: one GeoTIFF per band; "
        "stack: one 12-band GeoTIFF at 10 m (default: safe)",
    )  # fmt: skip
    parser.add_argument(
        "--blocks", type=_positive_int, default=3, metavar="N",
        help="N x N land-cover squares of 240 px (default: 3: a 7.2 km scene)",
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=_non_negative_int, default=0, metavar="S",
        help="texture seed (default: 0)",
    )  # fmt: skip
    return parser


# Classes the synthetic archive's tiny model tells apart well, in reading order.
SCENE_CLASSES = (0, 2, 5, 8, 11, 13, 14, 16, 18, 9, 17, 3)


def _scene(args: argparse.Namespace) -> None:
    from bigearthnet.core import constants
    from bigearthnet.synthetic.scene import SceneTruth, write_scene

    if args.out.exists():
        raise UsageError(f"{args.out}: exists; choose a new path")
    n = args.blocks
    cycle = [SCENE_CLASSES[i % len(SCENE_CLASSES)] for i in range(n * n)]
    classes = tuple(tuple(cycle[r * n : (r + 1) * n]) for r in range(n))
    truth = SceneTruth(size=240 * n, block=240, border=0, classes=classes)
    write_scene(args.out, truth, seed=args.seed, layout=args.layout)
    names = constants.CLASSES_19
    print(f"wrote a {240 * n} x {240 * n} px {args.layout} scene to {args.out}; land cover by row:")
    for row in classes:
        print("  " + " | ".join(names[c] for c in row))


def build_region_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="bigearthnet-synth region",
        description="Write the scenes of a synthetic region for bigearthnet-map region: "
        "TILES tiles in UTM zones 32 and 33 (overlapping), DATES dates 30 days apart, land "
        "cover in LAEA blocks that changes lastingly or for one date in known places, clouds "
        "marked in SCL; OUT/scenes/<product name>/ and the truth in OUT/truth.json.",
    )
    parser.add_argument("out", metavar="OUT", type=Path, help="folder to create")
    parser.add_argument("--tiles", type=_positive_int, default=4, metavar="N",
                        help="an even number of tiles, half in each zone (default: 4)")  # fmt: skip
    parser.add_argument("--dates", type=_positive_int, default=6, metavar="M",
                        help="acquisition dates, at least 5 (default: 6)")  # fmt: skip
    parser.add_argument("--size", type=_positive_int, default=720, metavar="PX",
                        help="tile side in 10 m px, a multiple of 120 (default: 720)")  # fmt: skip
    parser.add_argument("--block", type=float, default=3600.0, metavar="M",
                        help="side of a land-cover block in metres (default: 3600)")  # fmt: skip
    parser.add_argument("--layout", choices=("tif", "safe"), default="tif",
                        help="band GeoTIFF or L2A product folders (default: tif)")  # fmt: skip
    parser.add_argument("--seed", type=_non_negative_int, default=0, metavar="S")
    return parser


def _region(args: argparse.Namespace) -> None:
    from bigearthnet.synthetic.region import RegionSpec, generate_region

    spec = RegionSpec(tiles=args.tiles, dates=args.dates, size=args.size,
                      block=args.block, seed=args.seed)  # fmt: skip
    truth = generate_region(args.out, spec, layout=args.layout)
    lasting = sum(e["kind"] == "lasting" for e in truth["events"])
    transient = len(truth["events"]) - lasting
    print(f"wrote {len(truth['scenes'])} scenes ({args.tiles} tiles x {args.dates} dates) to "
          f"{args.out}/scenes; {lasting} blocks change lastingly, {transient} for one date; "
          f"truth in {args.out}/truth.json")  # fmt: skip


def build_score_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="bigearthnet-synth score",
        description="Score a region series (bigearthnet-map region --period scene-date) "
        "against the truth of the synthetic region it maps: agreement per period, flicker "
        "removed, lasting changes kept within one period, stable cells changed.",
    )
    parser.add_argument("region", metavar="REGION", type=Path,
                        help="a folder of bigearthnet-synth region (truth.json)")  # fmt: skip
    parser.add_argument("series", metavar="SERIES", type=Path,
                        help="the --out folder of bigearthnet-map region")  # fmt: skip
    return parser


def _score(args: argparse.Namespace) -> None:
    from bigearthnet.synthetic.region_score import score_series

    score = score_series(args.region, args.series)
    periods = ", ".join(f"{a:.3f}" for a in score.agreement)
    print(f"{args.series} against {args.region}/truth.json: {score.summary()}; "
          f"agreement per period {periods}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the exit status (0 ok, 2 bad arguments)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["scene"]:
        return run(build_scene_parser(), _scene, args[1:])
    if args[:1] == ["region"]:
        return run(build_region_parser(), _region, args[1:])
    if args[:1] == ["score"]:
        return run(build_score_parser(), _score, args[1:])
    return run(build_parser(), _generate, args)


def _generate(args: argparse.Namespace) -> None:
    from bigearthnet.synthetic.archive import generate_archive  # numpy, rasterio: after parsing

    start = time.perf_counter()
    generate_archive(
        args.out,
        args.patches,
        args.layout,
        args.seed,
        args.workers,
        overwrite=args.overwrite,
        s1=args.s1,
    )
    elapsed = time.perf_counter() - start
    print(
        f"wrote {args.patches} {args.layout} patches to {args.out} in {elapsed:.2f} s "
        f"({1000 * elapsed / args.patches:.2f} ms/patch, {args.workers} worker(s))"
    )


if __name__ == "__main__":
    sys.exit(main())
