"""The pages' one map viewer (``templates/map_viewer.js.j2``, its controls and style in
``templates/map_viewer.html.j2``), used by the region page and the run page alike: what it
is given, from map files.

* **Grid**: the viewer shows one grid (its CRS, cell, size and top-left corner); every map
  lies on it, a whole number of its cells a pixel, at a whole cell's offset.
* **Maps**: each a pyramid of levels of ``f`` = 1, 2, 4... grid cells a pixel (nearest, read
  from the COG's overviews), the finest at most :data:`MAX_SIDE` px a side, the coarsest at
  most :data:`MIN_SIDE`; each a palette PNG in the map's own colours, unobserved cells
  transparent (the page hatches them: no class has a pattern). A map of at most
  :data:`MAX_SIDE` cells a side (10 km at 10 m) is shown cell for cell; a larger one at the
  finest level that keeps the page small, which the page names at each zoom (the COGs hold
  every cell). A coarser map on the grid (a 600 m map on a 10 m grid) has ``f`` of its cell.
* **Coordinates**: longitude, latitude and the CRS's linear scale at control points spanning
  the grid, between which the page interpolates bilinearly; as many points as keep the
  interpolation within :data:`LONLAT_TOLERANCE_DEG` (up to :data:`MAX_LONLAT_POINTS` a side),
  and longitude and latitude shown to the decimals the interpolation holds.
* **Legends**: per map, the name of its legend (``legend_of``); each legend a list of
  ``[r, g, b, name]``, what the cursor's line names a colour by.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bigearthnet.core import constants
from bigearthnet.formats.class_map import NODATA, read_category_names
from bigearthnet.formats.region_folder import GridRecord

MAX_SIDE = 1024  # px a side of a map's finest level in the page
MIN_SIDE = 256  # the coarsest level is at most this
LONLAT_POINTS = 33  # control points a side at the least
MAX_LONLAT_POINTS = 129  # and at the most (~0.5 MB of page for a country)
LONLAT_TOLERANCE_DEG = 1e-5  # ~1 m: the interpolation's error aimed at
MAX_LONLAT_DECIMALS = 5
CLASSES = "classes"  # the legend of class maps
Colours = dict[int, tuple[int, int, int]]


def class_colours(classes: Sequence[str]) -> Colours:
    """Each class's value -> its CORINE colour."""
    return {v: rgb(c) for v, c in enumerate(constants.class_colours(len(classes)))}


def class_legend(classes: Sequence[str]) -> list[list]:
    """The legend of class maps: ``[r, g, b, name]`` of each class, in value order."""
    colours = class_colours(classes)
    return [[*colours[v], name] for v, name in enumerate(classes)]


def grid_data(grid: GridRecord) -> dict:
    """The grid as the viewer takes it."""
    return {"width": grid.width, "height": grid.height, "crs": grid.crs, "cell": grid.cell_m,
            "left": grid.transform[2], "top": grid.transform[5]}  # fmt: skip


def finest_m(maps: dict[str, list[dict]], grid: GridRecord) -> float:
    """Ground metres a pixel of the finest level of all (what the page says it embeds at
    the finest)."""
    return min(levels[0]["f"] for levels in maps.values()) * grid.cell_m


def rgb(colour) -> tuple[int, int, int]:
    red, green, blue = (int(v) for v in colour[:3])
    return red, green, blue


def categories(path: Path) -> tuple[Colours, list[list]]:
    """A map of categories' colours (its colour table) and its legend: [r, g, b, name] of
    each category named (its category names)."""
    import rasterio

    with rasterio.open(path) as src:
        table = src.colormap(1)
    names = read_category_names(path)
    colours = {v: rgb(rgba) for v, rgba in table.items() if v != NODATA}
    legend = [[*colours[v], name] for v, name in enumerate(names) if name and v in colours]
    return colours, legend


def pyramid(
    path: Path, colours: Colours, *, cells: int = 1, at: tuple[int, int] = (0, 0)
) -> list[dict]:
    """The map at ``path`` as the viewer takes it, finest level first: ``f`` grid cells a
    pixel, its size and its PNG (see the module's docstring); ``cells``: grid cells a cell
    of the map, ``at``: the grid's column and row of its top-left corner."""
    import rasterio
    from rasterio.enums import Resampling

    levels = []
    with rasterio.open(path) as src:
        factor = 2 ** max(0, math.ceil(math.log2(max(src.width, src.height) / MAX_SIDE)))
        while True:
            shape = (math.ceil(src.height / factor), math.ceil(src.width / factor))
            values = src.read(1, out_shape=shape, resampling=Resampling.nearest)
            levels.append({"f": factor * cells, "x": at[0], "y": at[1], "width": shape[1],
                           "height": shape[0], "src": _png(values, colours)})  # fmt: skip
            if max(shape) <= MIN_SIDE:
                return levels
            factor *= 2


def _png(values: np.ndarray, colours: Colours) -> str:
    """Category values as a palette PNG data: URI, :data:`NODATA` transparent."""
    from PIL import Image

    palette = np.zeros((256, 3), np.uint8)
    for value, colour in colours.items():
        palette[value] = colour
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
