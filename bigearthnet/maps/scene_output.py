"""A scene map on disk: a Cloud-Optimized GeoTIFF and the area per class.

Cloud-Optimized GeoTIFFs (tiled, DEFLATE, overviews) in the scene's CRS with the stride's
cell size: ``MAP.tif``, the top class (uint8, 255 = nodata) with the project's CORINE colour
table, the class names as GDAL category names (in ``MAP.tif.aux.xml``: TIFF has no place for
them) and as tags; ``MAP.tif.probabilities.tif``, one band per class stored
as round(p x 250) with scale/offset tags (255 = nodata). Two files because a TIFF colour
table needs a single-band (palette) image. ``MAP.tif.areas.csv``: cells and km^2 per top
class. ``MAP.png``: a preview with a legend (classes present, by area) and a scale bar.
Every file is written under a temporary name and renamed. ``MAP`` must end in ``.tif`` or
``.tiff`` (:func:`require_map_path`, checked when the command is parsed): the map is a
GeoTIFF, and so its preview can never take its name.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.errors import ConfigError
from bigearthnet.core.util import atomic_path, temp_sibling, write_csv
from bigearthnet.formats.class_map import (
    NODATA,
    PROB_SCALE,
    areas_path,
    classes_tags,
    probabilities_path,
    scaled,
)
from bigearthnet.maps.preview import LegendEntry, write_preview

if TYPE_CHECKING:  # windows imports Horovod: the region products step must not
    from bigearthnet.maps.windows import CellSums

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
    """Write ``path`` (top class, colour table), ``<path>.probabilities.tif`` and
    ``<path>.areas.csv``; returns the bands written (top class first)."""
    bands = map_bands(sums)
    grid = {"crs": crs, "transform": transform}
    all_tags = {**tags, **classes_tags(classes)}
    top_class, probabilities = describe_classes(classes), describe_probabilities(classes)

    path.parent.mkdir(parents=True, exist_ok=True)
    # The map itself last: its presence says every companion is there. A companion that
    # fails also takes away an older map of the same name, so nothing looks complete.
    try:
        write_category_names(path, classes)
        write_cog(probabilities_path(path), bands[1:], grid, all_tags, probabilities)
        cell_km2 = abs(transform.a * transform.e) / 1e6
        areas = area_rows(bands[0], classes, cell_km2)
        write_csv(areas_path(path), ("class", "cells", "km2"), areas)
        preview(preview_path(path), bands[0], transform=transform, classes=classes, tags=tags)
    except Exception:
        path.unlink(missing_ok=True)
        raise
    write_cog(path, bands[:1], grid, all_tags, top_class)
    return bands


def describe_classes(classes: Sequence[str], what: str = "top class index"):
    """Band 1 of a class map: the CORINE colour table, class names as tags, a description."""
    colours = constants.class_colours(len(classes))

    def describe(dst) -> None:
        dst.write_colormap(1, {c: (*map(int, colours[c]), 255) for c in range(len(classes))})
        dst.update_tags(1, **{str(c): name for c, name in enumerate(classes)})
        dst.set_band_description(1, f"{what} (255 = nodata)")

    return describe


def describe_probabilities(classes: Sequence[str]):
    """A probability file: one band per class, round(p x 250) with its scale."""

    def describe(dst) -> None:
        for c, name in enumerate(classes, start=1):
            dst.set_band_description(c, f"P({name}) x {PROB_SCALE}")
        dst.scales = (1.0 / PROB_SCALE,) * len(classes)
        dst.offsets = (0.0,) * len(classes)

    return describe


def write_category_names(path: Path, names: Sequence[str]) -> None:
    """Name band 1's values (value i -> ``names[i]``) in GDAL's sidecar ``<path>.aux.xml``.

    GeoTIFF has no tag for category names; GDAL keeps them, like raster attribute tables,
    in this "PAM" file beside the image, and reads them back with the file: QGIS labels the
    colour table's entries with them, ``gdalinfo`` lists them. Any older sidecar is replaced.
    """
    dataset = ET.Element("PAMDataset")
    band = ET.SubElement(dataset, "PAMRasterBand", band="1")
    categories = ET.SubElement(band, "CategoryNames")
    for name in names:
        ET.SubElement(categories, "Category").text = name
    ET.indent(dataset)
    with atomic_path(sidecar_path(path)) as tmp:
        ET.ElementTree(dataset).write(tmp, encoding="UTF-8", xml_declaration=False)


def read_category_names(path: Path) -> list[str]:
    """Band 1's category names from ``<path>.aux.xml`` ([] when there are none)."""
    sidecar = sidecar_path(path)
    if not sidecar.exists():
        return []
    band = ET.parse(sidecar).getroot().find("PAMRasterBand[@band='1']")
    found = band.findall("CategoryNames/Category") if band is not None else []
    return [category.text or "" for category in found]


def sidecar_path(path: Path) -> Path:
    """Where GDAL looks for an image's auxiliary metadata (PAM)."""
    return Path(f"{path}.aux.xml")


def preview(path: Path, top: np.ndarray, *, transform, classes: list[str], tags: dict) -> None:
    """The top class in CORINE colours (white: nodata), the classes present by area."""
    colours = constants.class_colours(len(classes))
    valid = top != NODATA
    rgb = np.full((*top.shape, 3), 255, dtype=np.uint8)
    rgb[valid] = colours[top[valid]]
    cell_km2 = abs(transform.a * transform.e) / 1e6
    present, cells = np.unique(top[valid], return_counts=True)
    legend = [
        LegendEntry(tuple(int(v) for v in colours[c]), f"{classes[c]} ({n * cell_km2:,.1f} km²)")
        for n, c in sorted(zip(cells, present), reverse=True)
    ]
    title = f"{Path(tags.get('scene', path.stem)).name}: {abs(transform.a):g} m cells"
    write_preview(path, rgb, transform=transform, title=title, legend=legend)


def write_cog(
    path: Path, bands: np.ndarray, grid: dict, tags: dict, describe, nodata: int = NODATA
) -> None:
    """A Cloud-Optimized GeoTIFF (tiled, DEFLATE, overviews) of ``bands`` (their dtype)
    under a temporary name: GDAL writes a COG by copying, so a plain GeoTIFF comes first."""
    import rasterio
    from rasterio.shutil import copy as copy_dataset

    count, height, width = bands.shape
    profile = dict(grid, driver="GTiff", height=height, width=width, count=count)
    profile.update(dtype=bands.dtype.name, nodata=nodata)
    plain = temp_sibling(path, "plain")  # a kill leaves nothing a glob for *.tif takes
    try:
        with rasterio.open(plain, "w", **profile) as dst:
            dst.write(bands)
            dst.update_tags(**tags)
            describe(dst)
        with atomic_path(path) as tmp:
            copy_dataset(
                plain, tmp, driver="COG", compress="DEFLATE", overview_resampling="nearest"
            )
    finally:
        plain.unlink(missing_ok=True)


def area_rows(top: np.ndarray, classes: list[str], cell_km2: float) -> list[list]:
    """class, cells, km2 of each top class (and the nodata cells)."""
    labels = [*enumerate(classes), (NODATA, "nodata")]
    rows = []
    for index, name in labels:
        cells = int((top == index).sum())
        rows.append([name, cells, f"{cells * cell_km2:.4f}"])
    return rows
