"""The region series as a STAC collection: ``DIR/stac/collection.json`` with one item per
period (``DIR/stac/<period>/<period>.json``), links and asset paths relative, so the folder
can move or be served as it is.

Each item spans its period (``start_datetime``/``end_datetime``) over the grid's footprint
and carries the period's raw map, its probabilities and the consistent map as assets, the
scenes it combines with each one's radiometric decision (``bigearthnet:scenes``, their
paths relative to the region folder, as in ``consistency.json``), the
classes with their values, names and colours (classification extension v1.1.0, on the
class-map assets), the grid (projection extension v2.0.0: code, shape, transform) and the
model it came from (``bigearthnet:run_dir`` and ``:checkpoint`` relative to the region
folder: no folder of the machine that made it). The collection's own assets are the change
maps, the tables and ``consistency.json``. Every document is validated offline against the
published schemas (:mod:`bigearthnet.formats.stac_validation`) before it is written.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import pystac
from pystac.extensions.projection import ProjectionExtension
from rasterio.warp import transform_bounds

from bigearthnet.core import constants
from bigearthnet.formats.class_map import probabilities_path
from bigearthnet.formats.region_folder import (
    CONSISTENCY,
    CONSISTENT,
    PERIODS,
    STAC,
    SceneEntry,
)
from bigearthnet.formats.stac_validation import CLASSIFICATION_SCHEMA, validate_stac
from bigearthnet.maps.region.grid import RegionGrid
from bigearthnet.maps.region.periods import period_end, period_start

COG = pystac.MediaType.COG


def classes_field(classes: Sequence[str]) -> list[dict]:
    """classification:classes: value, name, description and colour of every class (in
    upper case, as the classification extension writes its colour hints)."""
    colours = constants.class_hex_colours(len(classes))
    return [
        {
            "value": value,
            "name": name,
            "description": f"BigEarthNet class {value}: {name}",
            "color_hint": colours[value].upper(),
        }
        for value, name in enumerate(classes)
    ]


def write_collection(
    out: Path,
    grid: RegionGrid,
    scenes_of: dict[str, list[SceneEntry]],
    classes: Sequence[str],
    source: dict,
) -> Path:
    """Write ``out/stac/`` (replacing an older one), an item per period of ``scenes_of``
    (label -> its scenes, in time order); returns the collection's path."""
    periods = list(scenes_of)
    bbox = list(transform_bounds(grid.crs, "EPSG:4326", *_bounds(grid), densify_pts=21))
    geometry = _polygon(bbox)
    start = _utc(period_start(periods[0]))
    end = _utc(period_end(periods[-1]), end_of_day=True)
    collection = pystac.Collection(
        id="bigearthnet-region-series",
        description="Land-cover maps of a region per period (BigEarthNet classes), each "
        "period's observations combined and the series smoothed over time "
        "(bigearthnet-map region).",
        extent=pystac.Extent(pystac.SpatialExtent([bbox]), pystac.TemporalExtent([[start, end]])),
        title="Region land-cover series",
        license="other",
    )
    for key, name, title in (
        ("changes", "changes.tif", "Class changes per cell, consistent series"),
        ("first_change", "first_change.tif", "Period of the first lasting change (1 + index)"),
    ):
        collection.add_asset(key, pystac.Asset(f"../{name}", title=title, media_type=COG,
                                               roles=["data"]))  # fmt: skip
    tables = (
        ("areas", "areas.csv", "text/csv"),
        ("transitions", "transitions.csv", "text/csv"),
        ("consistency", CONSISTENCY, pystac.MediaType.JSON),
    )
    for key, name, media in tables:
        collection.add_asset(key, pystac.Asset(f"../{name}", media_type=media, roles=["metadata"]))
    for label in periods:
        item = _item(label, grid, geometry, bbox, classes, source)
        # Which scenes made the period, and how each one's values were read (the offset
        # decided from its metadata: bigearthnet.maps.radiometry).
        item.properties["bigearthnet:scenes"] = [asdict(entry) for entry in scenes_of[label]]
        collection.add_item(item)
    folder = out / STAC
    shutil.rmtree(folder, ignore_errors=True)  # consistency.json, written after, marks it whole
    collection.normalize_hrefs(str(folder))
    for item in collection.get_items():
        validate_stac(item.to_dict(), f"STAC item {item.id}")
    validate_stac(collection.to_dict(), "the STAC collection")
    collection.save(catalog_type=pystac.CatalogType.SELF_CONTAINED)
    return folder / "collection.json"


def _item(label, grid: RegionGrid, geometry, bbox, classes, source: dict) -> pystac.Item:
    item = pystac.Item(
        id=label,
        geometry=geometry,
        bbox=bbox,
        datetime=None,
        start_datetime=_utc(period_start(label)),
        end_datetime=_utc(period_end(label), end_of_day=True),
        properties={"bigearthnet:period": label,
                    **{f"bigearthnet:{key}": value for key, value in source.items()}},
    )  # fmt: skip
    proj = ProjectionExtension.ext(item, add_if_missing=True)
    proj.code = grid.crs
    proj.shape = [grid.height, grid.width]
    proj.transform = list(grid.transform)[:6]
    item.stac_extensions.append(CLASSIFICATION_SCHEMA)
    for key, path, title in (
        (
            "classification",
            f"../../{PERIODS}/{label}.tif",
            "Top class of the period's observations",
        ),
        ("consistent", f"../../{CONSISTENT}/{label}.tif", "Top class, consistent series"),
    ):
        item.add_asset(key, pystac.Asset(path, title=title, media_type=COG, roles=["data"],
                                         extra_fields={"classification:classes":
                                                       classes_field(classes)}))  # fmt: skip
    item.add_asset("probabilities", pystac.Asset(
        str(probabilities_path(f"../../{PERIODS}/{label}.tif")), media_type=COG, roles=["data"],
        title="Class probabilities x 250 (band per class)"))  # fmt: skip
    return item


def _bounds(grid: RegionGrid) -> tuple[float, float, float, float]:
    left, top = grid.transform.c, grid.transform.f
    return left, top - grid.height * grid.cell, left + grid.width * grid.cell, top


def _polygon(bbox: list[float]) -> dict:
    west, south, east, north = bbox
    ring = [[west, south], [east, south], [east, north], [west, north], [west, south]]
    return {"type": "Polygon", "coordinates": [ring]}


def _utc(day: dt.date, end_of_day: bool = False) -> dt.datetime:
    clock = dt.time(23, 59, 59) if end_of_day else dt.time(0, 0)
    return dt.datetime.combine(day, clock, tzinfo=dt.timezone.utc)
