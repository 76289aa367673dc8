"""A class map's file conventions, in one place: patch, scene, period and consistent maps,
and the companions a page recognises scene and change maps by (areas, transitions).

``MAP.tif`` holds the top class per cell (uint8, :data:`NODATA` where nothing was seen) and
the class list as its ``classes`` tag (JSON); ``MAP.tif.probabilities.tif`` holds one band
per class, a probability p stored as round(p x :data:`PROB_SCALE`). The map is written
after its companion, so a map whose companion is missing or damaged is not complete:
:func:`check_complete` says so.

Every map of categories (class maps, and the region's change counts and first changes) is
written by :func:`write_categories`, so a GIS opens each the same way: a Cloud-Optimized
GeoTIFF (:mod:`.cog`) whose band 1 carries the categories' colour table, their names as GDAL
category names (in ``MAP.tif.aux.xml``: TIFF has no place for them; GDAL and QGIS read them
with the image) and as band tags, and ``MAP.qml`` beside it, the QGIS style with each
category's value, colour and name (:mod:`.qgis_style`). A class map
(:func:`write_class_map`) is one whose categories are the model's classes in their CORINE
colours, with its probabilities companion.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.display import linked_path
from bigearthnet.core.util import atomic_path, first_line
from bigearthnet.formats.cog import Mosaic, write_cog
from bigearthnet.formats.qgis_style import StyleEntry, style_path, write_style

PROB_SCALE = 250  # probability p is stored as round(p * 250): 0..250, 250 = certain
NODATA = 255  # nothing seen at this cell (the top class and the probability bands alike)
PIXEL_CHUNK = 1 << 21  # float32 values :func:`scaled_pixels` scales at a time (8 MB)
CLASSES_TAG = "classes"
# The provenance tag holding a digest of the model's weight files: what says two maps were
# made by one model whatever the paths (a run retrained in its folder keeps them).
WEIGHTS_DIGEST = "weights_sha256"
# The provenance tag naming the run whose weights made a map (from the run or its export).
RUN_DIR_TAG = "run_dir"
# The tag naming the head that made a map, and its value for the dense head's maps, whose
# probabilities are a softmax (exclusive classes; a classifier's are independent sigmoid
# scores): the region smoother reads the two differently. maps/scene/options.py's MapKind
# writes it (tests/maps/test_region_blocks.py checks the two agree).
HEAD_TAG = "head"
DENSE_HEAD = "dense head (per pixel)"
# Tags naming a file or folder (the scene, the model's run, checkpoint or export, a change
# map's two maps): kept relative to the map (:func:`linked_tags`), never a path of the
# machine that made it.
PATH_TAGS = ("scene", RUN_DIR_TAG, "checkpoint", "export", "from_map", "to_map")
PROBABILITIES_SUFFIX = ".probabilities.tif"
AREAS_SUFFIX = ".areas.csv"  # a scene map's km² per class
TRANSITIONS_SUFFIX = ".transitions.csv"  # a change map's km² per transition


def probabilities_path(map_path: Path | str) -> Path:
    """The probabilities companion of ``map_path``."""
    return Path(f"{map_path}{PROBABILITIES_SUFFIX}")


def areas_path(map_path: Path | str) -> Path:
    """The areas table of the scene map ``map_path`` (what marks a map as a scene's)."""
    return Path(f"{map_path}{AREAS_SUFFIX}")


def transitions_path(map_path: Path | str) -> Path:
    """The transitions table of the change map ``map_path`` (what marks a change map)."""
    return Path(f"{map_path}{TRANSITIONS_SUFFIX}")


def linked_tags(tags: Mapping[str, str], folder: Path | str) -> dict[str, str]:
    """``tags`` as a map in ``folder`` (where it will lie) keeps them: the paths of
    :data:`PATH_TAGS` relative to that folder (:func:`~bigearthnet.core.display.linked_path`),
    the rest as they are. A map's tags are compared as so written (a region reuses a scene
    map by them)."""
    return {key: linked_path(value, folder) if key in PATH_TAGS else value
            for key, value in tags.items()}  # fmt: skip


def classes_tags(classes: Sequence[str]) -> dict[str, str]:
    """The tag that names a map's classes, in band (or index) order."""
    return {CLASSES_TAG: json.dumps(list(classes))}


def read_classes(tags: Mapping[str, str], path: Path | str) -> list[str]:
    """The class list of a map's ``tags``; ValueError naming ``path`` where it is missing."""
    try:
        classes = json.loads(tags[CLASSES_TAG])
    except (KeyError, ValueError):
        raise ValueError(f"{path}: no '{CLASSES_TAG}' tag (not a class map)") from None
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        raise ValueError(f"{path}: its '{CLASSES_TAG}' tag is not a list of class names")
    return classes


def scaled(probabilities: np.ndarray) -> np.ndarray:
    """Probabilities in [0, 1] (NaN: not seen) as stored: uint8, NODATA where not seen."""
    seen = ~np.isnan(probabilities)
    values = _stored(np.clip(np.nan_to_num(probabilities), 0.0, 1.0))
    return np.where(seen, values, NODATA).astype(np.uint8)


def scaled_pixels(probabilities: np.ndarray, unseen: np.ndarray) -> np.ndarray:
    """A softmax's (rows, cols, C) probabilities (in [0, 1], no NaN) as stored, band first
    ((C, rows, cols) uint8, as a map's file holds them), NODATA at the ``unseen`` (rows,
    cols) pixels: :func:`scaled`'s values, quantised a few rows at a time (the scaled
    floats stay in the CPU's cache: 0.5-0.9 -> 0.27 s a 1,728 px scene's 19 classes; nine
    whole-array passes took 1.2 s)."""
    rows, cols, count = probabilities.shape
    stored = np.empty((count, rows, cols), np.uint8)
    chunk = max(1, PIXEL_CHUNK // max(cols * count, 1))
    scaled_rows = np.empty((chunk, cols, count), np.float32)  # reused: no allocation a chunk
    for row in range(0, rows, chunk):
        part = probabilities[row : row + chunk]
        values = _stored(part, out=scaled_rows[: len(part)])
        stored[:, row : row + chunk] = values.transpose(2, 0, 1)
    stored[:, unseen] = NODATA
    return stored


def _stored(probabilities: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """round(p x PROB_SCALE), as floats (into ``out`` where given)."""
    scaled_values = np.multiply(probabilities, np.float32(PROB_SCALE), out=out)
    return np.rint(scaled_values, out=scaled_values)


def unscaled(stored: np.ndarray) -> np.ndarray:
    """Stored probabilities as float32 in [0, 1], NaN where not seen."""
    return np.where(stored == NODATA, np.nan, stored / np.float32(PROB_SCALE)).astype(np.float32)


def check_complete(map_path: Path) -> str | None:
    """None when ``map_path``, its probabilities companion and its sidecars (category
    names, QGIS style) are there, the two images readable to their last pixel and naming
    the same classes; else what is wrong, in words."""
    import rasterio

    companion = probabilities_path(map_path)
    for path in (map_path, companion, *sidecars(map_path)):
        if not path.is_file():
            return f"{path.name} is missing"
    try:
        with rasterio.open(map_path) as top, rasterio.open(companion) as scores:
            classes = read_classes(top.tags(), map_path)
            if read_classes(scores.tags(), companion) != classes or scores.count != len(classes):
                return f"{companion.name} does not hold the map's {len(classes)} classes"
            if (top.width, top.height) != (scores.width, scores.height):
                return f"{companion.name} is not the size of the map"
            top.read()  # a truncated file opens, and fails here
            scores.read()
    except (rasterio.RasterioIOError, ValueError) as err:
        return f"damaged ({first_line(err)})"
    return None


def class_categories(classes: Sequence[str]) -> list[StyleEntry]:
    """The classes as categories: value = index, the project's CORINE colour, the name."""
    colours = constants.class_colours(len(classes))
    return [StyleEntry(value, tuple(int(v) for v in colours[value]), name)  # type: ignore[arg-type]
            for value, name in enumerate(classes)]  # fmt: skip


def write_class_map(
    path: Path,
    top: np.ndarray | Mosaic,
    grid: Mapping[str, Any],
    classes: Sequence[str],
    tags: Mapping[str, str],
    *,
    probabilities: np.ndarray | Mosaic | None = None,
) -> None:
    """``path``: the top class ((rows, cols) uint8, :data:`NODATA` where unseen; or a
    one-band :class:`~.cog.Mosaic` of parts) of ``classes``, tagged with them; with
    ``probabilities`` ((C, rows, cols) as stored: :func:`scaled`; or a mosaic) its companion
    first. An older map of the name goes first, so until the
    new one is renamed in nothing looks complete."""
    path.unlink(missing_ok=True)
    all_tags = {**tags, **classes_tags(classes)}
    if probabilities is not None:
        write_cog(probabilities_path(path), probabilities, grid, all_tags,
                  _describe_probabilities(classes), NODATA)  # fmt: skip
    write_categories(path, top, grid, all_tags, class_categories(classes), "top class index")


def write_categories(
    path: Path,
    values: np.ndarray | Mosaic,
    grid: Mapping[str, Any],
    tags: Mapping[str, str],
    categories: Sequence[StyleEntry],
    what: str,
) -> None:
    """A map of ``categories`` ((rows, cols) uint8 ``values``, or a one-band mosaic;
    :data:`NODATA` = nodata) as GIS tools take it: the category names and the QGIS style
    first, the COG with the colour table last (its presence says the sidecars are there)."""
    names = {entry.value: entry.label for entry in categories}
    write_category_names(path, [names.get(v, "") for v in range(max(names, default=-1) + 1)])
    write_style(path, categories)

    def describe(dst) -> None:
        dst.write_colormap(1, {entry.value: (*entry.colour, 255) for entry in categories})
        dst.update_tags(1, **{str(value): name for value, name in names.items()})
        dst.set_band_description(1, f"{what} ({NODATA} = nodata)")

    bands = values if isinstance(values, Mosaic) else values[None].astype(np.uint8)
    write_cog(path, bands, grid, tags, describe, NODATA)


def _describe_probabilities(classes: Sequence[str]):
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


def sidecars(path: Path) -> tuple[Path, Path]:
    """The files a map of categories has beside it (:func:`write_categories`): its category
    names and its QGIS style."""
    return sidecar_path(path), style_path(path)


def sidecar_path(path: Path) -> Path:
    """Where GDAL looks for an image's auxiliary metadata (PAM)."""
    return Path(f"{path}.aux.xml")
