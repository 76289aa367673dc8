"""``bigearthnet-map region``: Sentinel-2 scenes of a region over time -> one temporally
consistent land-cover series on one grid (:mod:`bigearthnet.maps.region`; docs/maps.md)."""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
from pathlib import Path

from bigearthnet.cli.common import Parser, checked
from bigearthnet.core.errors import (
    InputError,
    require_open_fraction,
    require_positive,
    require_positive_int,
)
from bigearthnet.core.util import overlapping

PROG = "bigearthnet-map region"


def build_region_parser(add_model_options) -> Parser:
    from bigearthnet.maps.region.periods import PERIODS
    from bigearthnet.maps.region.series import DEFAULT_PERSISTENCE
    from bigearthnet.maps.windows import STRIDES

    p = Parser(
        prog=PROG,
        description="Map every scene of a region (kept in OUT/scenes/ and reused on a rerun), "
        "put them on one grid across UTM zones, combine each period's cloud-free observations "
        "and smooth the series over periods: OUT/periods/, OUT/consistent/, changes.tif, "
        "first_change.tif, areas.csv, transitions.csv and consistency.json (written last).",
    )
    p.add_argument(
        "scenes", nargs="*", type=Path, metavar="SCENE",
        help="L2A product folders, band-GeoTIFF folders or band stacks named like L2A "
        "products (tile and date are read from the name)",
    )  # fmt: skip
    p.add_argument(
        "--scenes-csv", type=Path, metavar="CSV",
        help="scenes as rows path,date[,tile] (a header row path,date,tile is allowed): for "
        "inputs not named like products",
    )  # fmt: skip
    add_model_options(p)
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="the region folder")
    p.add_argument("--period", choices=PERIODS, default="month",
                   help="how observations are grouped in time (default: month)")  # fmt: skip
    p.add_argument("--crs", default="EPSG:3035", type=projected_crs,
                   help="the output grid's projected CRS (default: EPSG:3035)")  # fmt: skip
    p.add_argument("--cell", type=checked(require_positive, float), default=600.0, metavar="M",
                   help="the output grid's cell in metres (default: 600)")  # fmt: skip
    p.add_argument("--stride", type=int, default=60, choices=STRIDES, metavar="PX",
                   help="scene maps' window step in 10 m px (default: 60 = 600 m)")  # fmt: skip
    p.add_argument("--mask-clouds", action=argparse.BooleanOptionalAction, default=True,
                   help="SCL cloud, shadow, cirrus, snow: unobserved (default: on)")  # fmt: skip
    p.add_argument(
        "--persistence", type=checked(require_open_fraction, float), default=DEFAULT_PERSISTENCE,
        metavar="P",
        help="the smoother's odds P/(1-P) that a cell keeps its class from one period to the "
        "next against moving to any one other class, P in (0, 1) (default: "
        f"{DEFAULT_PERSISTENCE}); higher removes more flicker and needs more evidence to change",
    )  # fmt: skip
    p.add_argument(
        "--scenes-only", action="store_true",
        help="map the scenes into OUT/scenes/ and stop: a Slurm array task's share; a last "
        "run over all the scenes reuses the maps and builds the products",
    )  # fmt: skip
    p.add_argument("--batch-size", type=checked(require_positive_int, int), default=64,
                   help="windows per model call")  # fmt: skip
    p.add_argument(
        "--max-gap-days", type=checked(require_positive_int, int), default=730, metavar="D",
        help="skip a scene more than D days from every other (a date typo, not part of the "
        "series; default: 730)",
    )  # fmt: skip
    p.add_argument("--no-progress", dest="progress", action="store_false")
    return p


def projected_crs(text: str) -> str:
    """--crs: a CRS that rasterio knows and that is projected (a grid in metres)."""
    from rasterio.crs import CRS
    from rasterio.errors import CRSError

    try:
        crs = CRS.from_user_input(text)
    except CRSError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a CRS (e.g. EPSG:3035)") from None
    if not crs.is_projected:
        raise argparse.ArgumentTypeError(
            f"'{text}' is geographic (degrees): the grid needs a projected CRS in metres, "
            "e.g. EPSG:3035 (Europe) or a UTM zone"
        )
    return text


def acquisitions_of(args: argparse.Namespace):
    """The scenes given, as Acquisitions; InputError naming the scene or the CSV row."""
    from bigearthnet.maps.region.periods import Acquisition, from_product_name

    found = [from_product_name(str(path)) for path in args.scenes]
    if args.scenes_csv is not None:
        found += _from_csv(args.scenes_csv, Acquisition)
    if not found:
        raise InputError("no scene given: SCENE... or --scenes-csv CSV")
    return found


def _from_csv(path: Path, make) -> list:
    rows = []
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:  # a BOM from a spreadsheet
            table = [r for r in csv.reader(f) if r and any(c.strip() for c in r)]
    except OSError as err:
        raise InputError(f"{path}: unreadable ({err.strerror})") from None
    if table and table[0][:2] == ["path", "date"]:
        table = table[1:]
    for number, row in enumerate(table, start=1):
        try:
            date = dt.date.fromisoformat(row[1].strip())
        except (IndexError, ValueError):
            raise InputError(f"{path}: row {number}: expected path,date[,tile]") from None
        scene = (path.parent / row[0].strip()).as_posix() if not row[0].startswith("/") else row[0]
        tile = row[2].strip() if len(row) > 2 and row[2].strip() else Path(scene).name
        rows.append(make(scene, tile, date))
    return rows


def map_region_command(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from bigearthnet.core import distributed
    from bigearthnet.core.config import default_threads
    from bigearthnet.maps.region.pipeline import RegionOptions, map_region

    acquisitions = acquisitions_of(args)
    inputs = {f"SCENE {a.path}": a.path for a in acquisitions}
    inputs.update({"--run-dir": args.run_dir, "--model": args.model})
    clash = overlapping(args.out, inputs)
    if clash is not None:
        raise InputError(f"{args.out}: --out overlaps {clash}; choose another output")
    distributed.init(threads=default_threads())
    options = RegionOptions(
        out=args.out, run_dir=args.run_dir, model_dir=args.model, checkpoint=args.checkpoint,
        stats_from=args.stats_from, period=args.period, crs=args.crs, cell=args.cell,
        stride=args.stride, mask_clouds=args.mask_clouds, persistence=args.persistence,
        batch_size=args.batch_size, progress=args.progress, scenes_only=args.scenes_only,
        max_gap_days=args.max_gap_days,
    )  # fmt: skip
    record = map_region(acquisitions, options)
    if args.scenes_only and distributed.is_root():
        print(f"[region] {len(acquisitions)} scenes mapped or reused in {args.out}/scenes")
    if record is not None:
        from bigearthnet.pages.region_page import write_region_page

        page = write_region_page(args.out)
        flicker = record["flicker_rate"]
        print(
            f"[region] {len(record['scenes'])} scenes ({len(record['skipped'])} skipped), "
            f"{len(record['periods'])} periods on {record['grid']['width']} x "
            f"{record['grid']['height']} cells of {record['grid']['cell_m']:g} m; flicker "
            f"{flicker['raw']:.3f} raw -> {flicker['consistent']:.3f} consistent; "
            f"{record['lasting_changes']} cells changed lastingly -> {args.out} ({page.name})"
        )
