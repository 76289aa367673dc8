"""``bigearthnet-synth``: the project's own test data.

* ``bigearthnet-synth OUT``: a small synthetic BigEarthNet archive
  (:mod:`bigearthnet.synthetic.archive`);
* ``bigearthnet-synth scene OUT``: a Sentinel-2 L2A scene of known land cover
  (:mod:`bigearthnet.synthetic.scene`);
* ``bigearthnet-synth region OUT``: scenes of a region across two UTM zones over several
  dates, with known changes and clouds (:mod:`bigearthnet.synthetic.region`);
* ``bigearthnet-synth score REGION SERIES``: a region series against that region's truth
  (:mod:`bigearthnet.synthetic.region_score`).

Each sub-command's options are the fields of one declaration there.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bigearthnet.cli.common import Command, Parser, checked, declared_parser, dispatch
from bigearthnet.core.declare import from_args
from bigearthnet.core.folders import folder_path, require_outside_cwd
from bigearthnet.synthetic.archive import ArchiveSpec
from bigearthnet.synthetic.region import RegionSpec
from bigearthnet.synthetic.scene import DemoScene

PROG = "bigearthnet-synth"


def _writer(prog: str, description: str, declared: type, out_help: str):
    """The parser builder of a sub-command that writes OUT from a declaration."""

    def build() -> Parser:
        parser = declared_parser(prog, description, declared)
        # Refused when parsed: "" and "." (the working directory) or ".." (a folder holding
        # it) cannot be built beside and renamed (issue #46 D19: they failed after the work).
        parser.add_argument("out", metavar="OUT", type=checked(require_outside_cwd, folder_path),
                            help=out_help)  # fmt: skip
        return parser

    return build


build_parser = _writer(
    PROG,
    "Write a synthetic BigEarthNet archive in the real v1 or v2 (reBEN) format. By default "
    "as hard as the real one: labels with reBEN's statistics (class shares, labels per patch, "
    "co-occurrence), made CORINE's way from a coarse map (small features unlabelled, some "
    "polygons wrong; the pixels' truth in OUT/truth.parquet), spectra that overlap, vary with "
    "season and region, mixed pixels, snow and clouds. --difficulty simple: 1-3 rectangles of "
    "far-apart spectra, labelled exactly, learnt in a few epochs (for tests).",
    ArchiveSpec,
    "archive directory to create",
)
build_scene_parser = _writer(
    f"{PROG} scene",
    "Write a synthetic Sentinel-2 L2A scene of known land cover: BLOCKS x BLOCKS squares of "
    "2.4 km, each one 19-class land cover rendered as the synthetic archive of the same "
    "--difficulty renders it, in UTM 33N, for trying bigearthnet-map scene.",
    DemoScene,
    "folder (tif, safe; zarr, stac: the folder holding it) or file (stack)",
)
build_region_parser = _writer(
    f"{PROG} region",
    "Write the scenes of a synthetic region for bigearthnet-map region: TILES tiles in UTM "
    "zones 32 and 33 (overlapping), DATES dates 30 days apart, land cover in LAEA blocks that "
    "changes lastingly or for one date in known places, clouds marked in SCL; "
    "OUT/scenes/<product name> (in the --layout form) and the truth in OUT/truth.json.",
    RegionSpec,
    "folder to create",
)


def build_score_parser() -> Parser:
    parser = Parser(
        prog=f"{PROG} score",
        description="Score a region series (bigearthnet-map region --period scene-date) "
        "against the truth of the synthetic region it maps: agreement per period, flicker "
        "removed, lasting changes kept within one period, stable cells changed.",
    )
    parser.add_argument("region", metavar="REGION", type=Path,
                        help="a folder of bigearthnet-synth region (truth.json)")  # fmt: skip
    parser.add_argument("series", metavar="SERIES", type=Path,
                        help="the --out folder of bigearthnet-map region")  # fmt: skip
    return parser


def _generate(args: argparse.Namespace) -> None:
    from bigearthnet.synthetic.archive import generate_archive

    spec = from_args(ArchiveSpec, args)
    start = time.perf_counter()
    generate_archive(args.out, spec)
    elapsed = time.perf_counter() - start
    print(
        f"wrote {spec.patches} {spec.layout} patches to {args.out} in {elapsed:.2f} s "
        f"({1000 * elapsed / spec.patches:.2f} ms/patch, {spec.workers} worker(s))"
    )


def _scene(args: argparse.Namespace) -> None:
    from bigearthnet.core import constants
    from bigearthnet.synthetic.scene import write_demo_scene

    spec = from_args(DemoScene, args)
    scene, truth = write_demo_scene(args.out, spec)
    names = constants.CLASSES_19
    print(f"wrote a {truth.size} x {truth.size} px {spec.layout} scene to {scene}; "
          "land cover by row:")  # fmt: skip
    for row in truth.classes:
        print("  " + " | ".join(names[c] for c in row))


def _region(args: argparse.Namespace) -> None:
    from bigearthnet.synthetic.region import generate_region

    spec = from_args(RegionSpec, args)
    truth = generate_region(args.out, spec)
    lasting = sum(e["kind"] == "lasting" for e in truth["events"])
    transient = len(truth["events"]) - lasting
    print(f"wrote {len(truth['scenes'])} scenes ({spec.tiles} tiles x {spec.dates} dates) to "
          f"{args.out}/scenes; {lasting} blocks change lastingly, {transient} for one date; "
          f"truth in {args.out}/truth.json")  # fmt: skip


def _score(args: argparse.Namespace) -> None:
    from bigearthnet.synthetic.region_score import score_series

    score = score_series(args.region, args.series)
    periods = ", ".join(f"{a:.3f}" for a in score.agreement)
    every = ", ".join(f"{a:.3f}" for a in score.pixel_agreement)
    print(f"{args.series} against {args.region}/truth.json: {score.summary()}; "
          f"agreement per period {periods} (interior cells), {every} (every cell)")  # fmt: skip


COMMANDS = {
    "archive": Command("a synthetic BigEarthNet archive, v1 or v2 (reBEN) layout",
                       build_parser, _generate),
    "scene": Command("a synthetic Sentinel-2 L2A scene of known land cover",
                     build_scene_parser, _scene),
    "region": Command("the scenes of a synthetic region over time, with known changes",
                      build_region_parser, _region),
    "score": Command("a region series scored against its synthetic region's truth",
                     build_score_parser, _score),
}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the exit status (0 ok, 2 bad arguments)."""
    return dispatch(argv, COMMANDS, prog=PROG, default="archive")


if __name__ == "__main__":
    sys.exit(main())
