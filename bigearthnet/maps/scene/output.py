"""A scene map on disk: a class map (:func:`bigearthnet.formats.class_map.write_class_map`)
and the area per class.

Cloud-Optimized GeoTIFFs (tiled, DEFLATE, overviews) in the scene's CRS with the stride's
cell size: ``MAP.tif``, the top class (uint8, 255 = nodata) with the project's CORINE colour
table, the class names as GDAL category names (in ``MAP.tif.aux.xml``: TIFF has no place for
them) and as tags, and ``MAP.qml``, its QGIS style; ``MAP.tif.probabilities.tif``, one band
per class stored as round(p x 250) with scale/offset tags (255 = nodata). Two files because
a TIFF colour table needs a single-band (palette) image. ``MAP.tif.areas.csv``: cells and
km^2 per top class. ``MAP.png``: a preview with a legend (classes present, by area) and a
scale bar. Every file is written under a temporary name and renamed, the map last. ``MAP``
must end in ``.tif`` or ``.tiff`` (:func:`require_map_path`, checked when the command is
parsed): the map is a GeoTIFF, and so its preview can never take its name.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.errors import ConfigError
from bigearthnet.core.util import write_csv
from bigearthnet.formats.class_map import NODATA, areas_path, scaled, write_class_map
from bigearthnet.maps.preview import LegendEntry, write_preview

if TYPE_CHECKING:  # windows imports Horovod: the region products step must not
    from bigearthnet.maps.scene.windows import CellSums

MAP_SUFFIXES = (".tif", ".tiff")


def require_map_path(flag: str, path: Path) -> Path:
    """``path`` if a map may be written there: a GeoTIFF's name (its preview,
    :func:`preview_path`, then differs from it) that is not an existing folder; else
    ConfigError naming ``flag``."""
    if Path(path).is_dir():
        raise ConfigError(f"{flag} {path}: an existing folder; give the map's file name "
                          f"(MAP.tif)")  # fmt: skip
    if Path(path).suffix.lower() not in MAP_SUFFIXES:
        raise ConfigError(f"{flag} {path}: a map is a GeoTIFF; give a name ending in .tif "
                          f"(its preview is written beside it as .png)")  # fmt: skip
    return Path(path)


def preview_path(path: Path) -> Path:
    """Where the preview of the map ``path`` goes: ``MAP.png`` beside ``MAP.tif``."""
    return Path(path).with_suffix(".png")


def map_bands(sums: CellSums) -> np.ndarray:
    """(1 + C, rows, cols) uint8: top class, then scaled probabilities; NODATA where no
    window covered the cell."""
    mean = sums.mean()
    covered = sums.has_data()
    top = np.where(covered, np.nan_to_num(mean).argmax(axis=-1), NODATA).astype(np.uint8)
    stored = scaled(np.where(covered[..., None], mean, np.nan))
    return np.concatenate([top[None], stored.transpose(2, 0, 1)])


def write_scene_map(
    path: Path, sums: CellSums, *, crs, transform, classes: list[str], tags: dict
) -> np.ndarray:
    """Write ``<path>.areas.csv``, the preview, then the class map (:func:`write_class_map`:
    its probabilities, category names and QGIS style, the map itself last); returns the
    bands written (top class first)."""
    bands = map_bands(sums)
    path.parent.mkdir(parents=True, exist_ok=True)
    # An older map of the name goes first: its presence says every companion is there.
    path.unlink(missing_ok=True)
    cell_km2 = abs(transform.a * transform.e) / 1e6
    write_csv(areas_path(path), ("class", "cells", "km2"), area_rows(bands[0], classes, cell_km2))
    preview(preview_path(path), bands[0], transform=transform, classes=classes, tags=tags)
    grid = {"crs": crs, "transform": transform}
    write_class_map(path, bands[0], grid, classes, tags, probabilities=bands[1:])
    return bands


def preview(path: Path, top: np.ndarray, *, transform, classes: list[str], tags: dict,
            step: int = 1) -> None:  # fmt: skip
    """The top class in CORINE colours (white: nodata), the classes present by area. ``top``
    holds every ``step``-th pixel of the map on the grid ``transform`` (a large map is read
    no further than it is drawn): the title gives the map's cells, the legend's km² are
    estimated from the pixels drawn (the areas CSV counts them all)."""
    from rasterio.transform import Affine

    drawn = transform @ Affine.scale(step)
    colours = constants.class_colours(len(classes))
    valid = top != NODATA
    rgb = np.full((*top.shape, 3), 255, dtype=np.uint8)
    rgb[valid] = colours[top[valid]]
    drawn_km2 = abs(drawn.a * drawn.e) / 1e6
    present, cells = np.unique(top[valid], return_counts=True)
    legend = [
        LegendEntry(tuple(int(v) for v in colours[c]), f"{classes[c]} ({n * drawn_km2:,.1f} km²)")
        for n, c in sorted(zip(cells, present), reverse=True)
    ]
    title = f"{Path(tags.get('scene', path.stem)).name}: {abs(transform.a):g} m cells"
    write_preview(path, rgb, transform=drawn, title=title, legend=legend)


def area_rows(top: np.ndarray, classes: list[str], cell_km2: float) -> list[list]:
    """class, cells, km2 of each top class (and the nodata cells)."""
    labels = [*enumerate(classes), (NODATA, "nodata")]
    rows = []
    for index, name in labels:
        cells = int((top == index).sum())
        rows.append([name, cells, f"{cells * cell_km2:.4f}"])
    return rows
