"""``bigearthnet-map region``: Sentinel-2 scenes of a region over time -> one temporally
consistent land-cover series on one grid (:mod:`bigearthnet.maps.region`; docs/maps.md)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.cli.common import Parser, declared_parser
from bigearthnet.cli.map_out import check_out
from bigearthnet.core.declare import from_args, nested, option
from bigearthnet.core.errors import InputError
from bigearthnet.maps.region.options import RegionOptions

PROG = "bigearthnet-map region"


@dataclass(frozen=True)
class RegionCommand:
    """``bigearthnet-map region``: the options of the series, and its scenes."""

    region: RegionOptions = nested(RegionOptions)
    scenes: tuple[Path, ...] = option(
        (), "L2A .SAFE folders, EOPF .zarr products, STAC item files, band-GeoTIFF folders or "
        "band stacks: tile and date from a STAC item's or Zarr product's properties, a SAFE's "
        "band files, else the product name", positional=True, metavar="SCENE",
    )  # fmt: skip
    scenes_csv: Path | None = option(
        None, "scenes as rows path,date[,tile] (a header row path,date,tile is allowed): for "
        "inputs not named like products; without a tile, the tile the scene states or its "
        "folder's name when that is an MGRS tile (T32UQU/2020-03-15)", metavar="CSV",
    )  # fmt: skip
    stac_items: Path | None = option(
        None, "scenes as STAC items: a FeatureCollection or ItemCollection file (a saved "
        "search) or a folder of item files; tile and date from each item's properties",
        metavar="FILE|DIR",
    )  # fmt: skip


def build_region_parser() -> Parser:
    return declared_parser(
        PROG,
        "Map every scene of a region (kept in OUT/scenes/ and reused on a rerun), put them on "
        "one grid across UTM zones, combine each period's cloud-free observations and smooth "
        "the series over periods: OUT/periods/, OUT/consistent/, changes.tif, "
        "first_change.tif, areas.csv, transitions.csv and consistency.json (written last).",
        RegionCommand,
    )


def acquisitions_of(command: RegionCommand):
    """The scenes given, as Acquisitions, each identified once (every JSON file parsed
    once: a saved search's items share its parse); InputError naming the scene or the CSV
    row."""
    from bigearthnet.maps.inputs import JsonFiles, identify, items_in
    from bigearthnet.maps.region.periods import from_csv, of_path, of_scene

    json_files = JsonFiles()

    def identified(scene: str):
        return identify(scene, json_files=json_files)

    found = [of_path(str(path), identified) for path in command.scenes]
    if command.scenes_csv is not None:
        found += from_csv(command.scenes_csv, identified)
    if command.stac_items is not None:
        found += [of_scene(item) for item in items_in(command.stac_items, json_files)]
    if not found:
        raise InputError("no scene given: SCENE..., --scenes-csv CSV or --stac-items FILE|DIR")
    return found


def map_region_command(args: argparse.Namespace) -> None:
    command = from_args(RegionCommand, args)
    options, model = command.region, command.region.model
    acquisitions = acquisitions_of(command)
    check_out(options.out, model, scenes=[a.scene or a.path for a in acquisitions])
    model.check()
    # Only now TensorFlow (the pipeline imports it): every check above answers at once.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from bigearthnet.core import distributed
    from bigearthnet.core.config import default_threads
    from bigearthnet.maps.region.pipeline import map_region

    distributed.init(threads=default_threads())
    record = map_region(acquisitions, options)
    if options.scenes_only and distributed.is_root():
        print(f"[region] {len(acquisitions)} scenes mapped or reused in {options.out}/scenes")
    if options.share is not None and distributed.is_root():
        print(f"[region] blocks {options.blocks_only} of the products computed or reused in "
              f"{options.out}")  # fmt: skip
    if record is not None:
        from bigearthnet.pages.region_page import write_region_page

        page = write_region_page(options.out)
        flicker, grid = record.flicker_rate, record.grid
        print(
            f"[region] {len(record.scenes)} scenes ({len(record.skipped)} skipped), "
            f"{len(record.periods)} periods on {grid.width} x {grid.height} cells of "
            f"{grid.cell_m:g} m; flicker {flicker['raw']:.3f} raw -> "
            f"{flicker['consistent']:.3f} consistent; {record.lasting_changes} cells changed "
            f"lastingly -> {options.out} ({page.name})"
        )
        for note in record.radiometry_notes:  # the series mixes readings here: say where
            print(f"[region] radiometry: {note}")
