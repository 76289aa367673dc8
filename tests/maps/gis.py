"""A map opened as a GIS user opens it: GDAL (through rasterio) and QGIS's default style.

:func:`open_as_gis_user` checks what QGIS, ``gdalinfo`` and ``rio cogeo validate`` would
show of a map of categories: a valid Cloud-Optimized GeoTIFF (tiled, with overviews where
the map is larger than a tile), nodata declared, the ``.qml`` style beside it naming every
value present, and for a uint8 map the colour table and the category names GDAL reads from
the ``.aux.xml`` sidecar, both agreeing with the style.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import rasterio
from rasterio.shutil import copy as copy_dataset
from rio_cogeo.cogeo import cog_validate

from bigearthnet.formats.class_map import read_category_names
from bigearthnet.formats.qgis_style import read_style, style_path

TILE = 512  # the COG driver's block size


def gdal_category_names(path: Path) -> list[str]:
    """Band 1's category names as GDAL itself reads them (its VRT copy writes them out)."""
    vrt = path.parent / "gdal-view" / f"{path.stem}.vrt"
    vrt.parent.mkdir(exist_ok=True)
    copy_dataset(path, vrt, driver="VRT")
    names = [c.text or "" for c in ET.parse(vrt).getroot().iterfind(".//CategoryNames/Category")]
    vrt.unlink()
    assert names == read_category_names(path)  # the project's reader agrees with GDAL
    return names


def open_as_gis_user(path: Path, *, nodata: int = 255) -> dict[int, str]:
    """The labels of ``path``'s values (value -> label, from its QGIS style), once every
    check above has passed."""
    valid, errors, warnings = cog_validate(str(path), quiet=True)
    assert valid and not errors and not warnings, (path, errors, warnings)
    with rasterio.open(path) as src:
        assert src.nodata == nodata and src.count == 1, path
        assert src.block_shapes[0] == (TILE, TILE), src.block_shapes  # tiled, not strips
        if max(src.width, src.height) > TILE:
            assert src.overviews(1), f"{path}: larger than a tile, no overviews"
        values = src.read(1)
        colormap = src.colormap(1) if src.dtypes[0] == "uint8" else None
    styles = read_style(style_path(path))
    labels = {s.value: s.label for s in styles}
    present = {int(v) for v in np.unique(values)} - {nodata}
    assert present <= labels.keys(), f"{path}: values {sorted(present - labels.keys())} unstyled"
    assert all(labels[v] for v in present), labels
    if colormap is not None:  # a palette GeoTIFF: the same colours and names as the style
        assert all(colormap[s.value][:3] == s.colour for s in styles), path
        names = gdal_category_names(path)
        assert all(names[v] == labels[v] for v in present), (names, labels)
    return labels


def assert_no_machine_paths(folder: Path, machine: Path) -> None:
    """Nothing ``folder`` holds to be shared - map tags, styles, sidecars, tables, JSON
    records - names a folder under ``machine`` (where the test made every input): paths
    are kept relative or by name (issue 47)."""
    needle = str(machine)
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.suffix == ".tif":
            with rasterio.open(path) as src:
                tags = {**src.tags(), **src.tags(1)}
            found = {key: value for key, value in tags.items() if needle in value}
            assert not found, (path, found)
        elif path.suffix in (".json", ".csv", ".qml", ".xml"):
            assert needle not in path.read_text(encoding="utf-8"), path
