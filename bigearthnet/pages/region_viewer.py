"""What the region page's map viewer (``templates/region_viewer.js.j2``) is given: every map
of a region series as a small pyramid of images, the legends, and the grid's coordinates.

* **Maps**: each period's raw and consistent maps, ``changes.tif`` and ``first_change.tif``,
  as levels of ``f`` = 1, 2, 4... cells a pixel (nearest, read from the COG's overviews), the
  finest at most :data:`MAX_SIDE` px a side, the coarsest at most :data:`MIN_SIDE`; each a
  palette PNG in the map's own colours, unobserved cells transparent (the page hatches them:
  no class has a pattern). A grid of at most :data:`MAX_SIDE` cells a side (10 km at 10 m)
  is shown cell for cell; a larger one at the finest level that keeps the page small, which
  the page names at each zoom (the COGs hold every cell).
* **Coordinates**: longitude, latitude and the CRS's linear scale at control points spanning
  the grid, between which the page interpolates bilinearly; as many points as keep the
  interpolation within :data:`LONLAT_TOLERANCE_DEG` (up to :data:`MAX_LONLAT_POINTS` a side),
  and longitude and latitude shown to the decimals the interpolation holds.
"""

from __future__ import annotations

import base64
import io
import math
from pathlib import Path

import numpy as np

from bigearthnet.core import constants
from bigearthnet.formats import region_folder
from bigearthnet.formats.class_map import NODATA, read_category_names
from bigearthnet.formats.region_folder import ConsistencyRecord, GridRecord

MAX_SIDE = 1024  # px a side of a map's finest level in the page
MIN_SIDE = 256  # the coarsest level is at most this
LONLAT_POINTS = 33  # control points a side at the least
MAX_LONLAT_POINTS = 129  # and at the most (~0.5 MB of page for a country)
LONLAT_TOLERANCE_DEG = 1e-5  # ~1 m: the interpolation's error aimed at
MAX_LONLAT_DECIMALS = 5
Colours = dict[int, tuple[int, int, int]]
CHANGE_MAPS = (("first_change", region_folder.FIRST_CHANGE), ("changes", region_folder.CHANGES))


def viewer_data(folder: Path, record: ConsistencyRecord, classes: list[str]) -> dict:
    """The viewer's data for the series in ``folder`` (its record, its classes in order):
    the grid, its coordinates, every map's pyramid and the legends (class names and change
    categories, each ``[r, g, b, name]``)."""
    colours = {v: _rgb(c) for v, c in enumerate(constants.class_colours(len(classes)))}
    maps = {}
    for t, label in enumerate(record.periods):
        maps[f"raw-{t}"] = pyramid(folder / region_folder.PERIODS / f"{label}.tif", colours)
        maps[f"consistent-{t}"] = pyramid(folder / region_folder.CONSISTENT / f"{label}.tif",
                                           colours)  # fmt: skip
    legends = {"classes": [[*colours[v], name] for v, name in enumerate(classes)]}
    for key, name in CHANGE_MAPS:
        change_colours, legends[key] = _categories(folder / name)
        maps[key] = pyramid(folder / name, change_colours)
    grid = record.grid
    return {
        "grid": {"width": grid.width, "height": grid.height, "crs": grid.crs,
                 "cell": grid.cell_m, "left": grid.transform[2], "top": grid.transform[5]},
        "lonlat": lonlat_points(grid),
        "maps": maps,
        "periods": list(record.periods),
        "observed": [record.cells_observed[label] for label in record.periods],
        "legends": legends,
        "finest": max(levels[0]["f"] for levels in maps.values()) * grid.cell_m,
    }  # fmt: skip


def _rgb(colour) -> tuple[int, int, int]:
    red, green, blue = (int(v) for v in colour[:3])
    return red, green, blue


def _categories(path: Path) -> tuple[Colours, list[list]]:
    """A map of categories' colours (its colour table) and its legend: [r, g, b, name] of
    each category named (its category names)."""
    import rasterio

    with rasterio.open(path) as src:
        table = src.colormap(1)
    names = read_category_names(path)
    colours = {v: _rgb(rgba) for v, rgba in table.items() if v != NODATA}
    legend = [[*colours[v], name] for v, name in enumerate(names) if name and v in colours]
    return colours, legend


def pyramid(path: Path, colours: Colours) -> list[dict]:
    """The map at ``path`` as the viewer takes it, finest level first: ``f`` cells a pixel,
    its size and its PNG (see the module's docstring)."""
    import rasterio
    from rasterio.enums import Resampling

    levels = []
    with rasterio.open(path) as src:
        factor = 2 ** max(0, math.ceil(math.log2(max(src.width, src.height) / MAX_SIDE)))
        while True:
            shape = (math.ceil(src.height / factor), math.ceil(src.width / factor))
            values = src.read(1, out_shape=shape, resampling=Resampling.nearest)
            levels.append({"f": factor, "width": shape[1], "height": shape[0],
                           "src": _png(values, colours)})  # fmt: skip
            if max(shape) <= MIN_SIDE:
                return levels
            factor *= 2


def _png(values: np.ndarray, colours: Colours) -> str:
    """Category values as a palette PNG data: URI, :data:`NODATA` transparent."""
    from PIL import Image

    palette = np.zeros((256, 3), np.uint8)
    for value, rgb in colours.items():
        palette[value] = rgb
    image = Image.fromarray(values.astype(np.uint8), mode="P")
    image.putpalette(palette.ravel().tolist())
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", transparency=NODATA, optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def lonlat_points(grid: GridRecord) -> dict:
    """Longitude, latitude and the CRS's linear scale (ground metres = CRS metres / k; k the
    square root of the areal scale: exact in a conformal CRS, the mean of the two directions'
    in an equal-area one) at ``n`` x ``n`` points spanning the grid's extent, row by row from
    its top-left corner, and ``decimals``: those of longitude and latitude the bilinear
    interpolation between them holds (its error measured midway between points)."""
    from pyproj import Proj

    proj = Proj(grid.crs)
    left, bottom, right, top = grid.bounds
    n = LONLAT_POINTS
    while True:
        xs, ys = np.meshgrid(np.linspace(left, right, n), np.linspace(top, bottom, n))
        lon, lat = proj(xs, ys, inverse=True)
        # Midway between four points: the exact position against their mean.
        mid_lon, mid_lat = proj((xs[:-1, :-1] + xs[1:, 1:]) / 2, (ys[:-1, :-1] + ys[1:, 1:]) / 2,
                                inverse=True)  # fmt: skip
        error = max(np.abs(_corners_mean(lon) - mid_lon).max(),
                    np.abs(_corners_mean(lat) - mid_lat).max())  # fmt: skip
        if error <= LONLAT_TOLERANCE_DEG or n >= MAX_LONLAT_POINTS:
            break
        n = 2 * n - 1  # the same points and one between each
    decimals = MAX_LONLAT_DECIMALS
    while decimals > 1 and error > 0.5 * 10.0**-decimals:
        decimals -= 1
    scale = np.sqrt(np.asarray(proj.get_factors(lon, lat).areal_scale))
    return {"n": n, "decimals": decimals,
            "lon": np.round(lon, 7).ravel().tolist(), "lat": np.round(lat, 7).ravel().tolist(),
            "k": np.round(scale, 7).ravel().tolist()}  # fmt: skip


def _corners_mean(values: np.ndarray) -> np.ndarray:
    return (values[:-1, :-1] + values[:-1, 1:] + values[1:, :-1] + values[1:, 1:]) / 4
