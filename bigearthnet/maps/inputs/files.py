"""Scenes as files GDAL reads: an L2A ``.SAFE`` product folder (JPEG 2000 bands at native
resolutions, ``MTD_MSIL2A.xml``), a folder of single-band GeoTIFFs named by band
(``*B02*.tif``), or one multi-band GeoTIFF at 10 m whose bands are named by ``band_order`` or
by their descriptions (``B02`` or Earth Engine's ``B2``), never taken in an assumed order."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.util import first_line
from bigearthnet.formats.s2_layouts import mgrs_tile
from bigearthnet.maps.inputs.bands import (
    NO_SCL,
    SCL_FACTOR,
    Opened,
    RasterBand,
    SceneError,
    SceneSource,
)
from bigearthnet.maps.radiometry import SceneMetadata, read_product_metadata

PRODUCT_METADATA = "MTD_MSIL2A.xml"
# A SAFE product's band files: T33UXP_20200801T100559_B02_10m.jp2 (tile, sensing time).
SAFE_BAND = re.compile(r"^T(?P<tile>\w{5})_(?P<date>\d{8})T\d{6}_B02_10m\.jp2$")


def open_folder(scene: Path, bands: tuple[str, ...], mask_clouds: bool) -> SceneSource:
    """A SAFE product folder or a folder of band GeoTIFFs."""
    jp2 = sorted(scene.glob("GRANULE/*/IMG_DATA/R*m/*.jp2"))
    found = {b: _band_file(scene, jp2, b, constants.BAND_RESOLUTION_M[b]) for b in bands}
    missing = [b for b, file in found.items() if file is None]
    if missing:
        raise SceneError(f"{scene}: no image of band(s) {', '.join(missing)}")
    scl_file = _band_file(scene, jp2, "SCL", 20) if mask_clouds else None
    if mask_clouds and scl_file is None:
        raise SceneError(f"{scene}: {NO_SCL}")
    opened = Opened()
    readers = {
        b: opened.band(str(f), 1, constants.band_factor(b)) for b, f in sorted(found.items())
    }  # type: ignore[misc]
    scl = opened.band(str(scl_file), 1, SCL_FACTOR) if scl_file else None
    metadata = _metadata(scene, readers)
    form = "SAFE" if jp2 else "band GeoTIFFs"
    return SceneSource(scene, form, dict(readers), scl, metadata, [opened.close],
                       nodata=_gdal_nodata(readers))  # fmt: skip


def safe_tile_and_date(scene: Path) -> tuple[str, dt.date] | None:
    """The MGRS tile and acquisition date a SAFE product's band files are named by (a
    product folder renamed keeps them); None for any other folder."""
    for jp2 in sorted(scene.glob("GRANULE/*/IMG_DATA/R10m/*_B02_10m.jp2")):
        named = SAFE_BAND.match(jp2.name)
        tile = mgrs_tile(named["tile"]) if named else None
        if named and tile:
            return tile, dt.datetime.strptime(named["date"], "%Y%m%d").date()
    return None


def _metadata(scene: Path, readers: dict[str, RasterBand]) -> SceneMetadata:
    product = scene / PRODUCT_METADATA
    offsets, baseline = read_product_metadata(product) if product.is_file() else (None, None)
    return SceneMetadata(
        bands=tuple(readers),
        scales={band: reader.scale_offset() for band, reader in readers.items()},
        scales_from="scale/offset of the bands",
        where={band: reader.name for band, reader in readers.items()},
        product_offsets=offsets,
        product_metadata=str(product),
        baseline=baseline,
        baseline_from=PRODUCT_METADATA,
        dtypes={band: reader.dtype for band, reader in readers.items()},
        product=scene.name.removesuffix(".SAFE") if product.is_file() else "",
    )


def _band_file(scene: Path, jp2: list[Path], band: str, res: int) -> Path | None:
    if jp2:
        pattern = re.compile(rf"_{band}_{res}m\.jp2$")
    else:
        pattern = re.compile(rf"(^|[_\-.]){band}(?=[_\-.]).*\.tiff?$", re.IGNORECASE)
    matches = [p for p in (jp2 or sorted(scene.iterdir())) if pattern.search(p.name)]
    return matches[0] if matches else None


def open_stack(
    file: Path, bands: tuple[str, ...], band_order: Sequence[str] | None, mask_clouds: bool
) -> SceneSource:
    """One multi-band GeoTIFF: bands named by ``band_order``, else by their descriptions."""
    import rasterio

    if mask_clouds:
        raise SceneError(f"{file}: {NO_SCL}")
    try:
        with rasterio.open(file) as src:
            count, descriptions, res = src.count, src.descriptions, src.res
    except rasterio.errors.RasterioIOError as err:
        raise SceneError(f"{file}: cannot read ({first_line(err)})") from None
    if band_order:
        names = [band_name(name) for name in band_order]
    elif all(descriptions):
        names = [band_name(d) for d in descriptions]
    else:
        raise SceneError(
            f"{file}: its bands are not named (no band descriptions): give --band-order "
            "B01,B02,... ('-' for a band to ignore)"
        )
    if len(names) != count:
        raise SceneError(f"{file}: {count} bands, but the band order names {len(names)}")
    unknown = [n for n in names if n not in constants.BANDS and n != "-"]
    if unknown:
        raise SceneError(f"{file}: unknown band name(s) {', '.join(unknown)} in the band order")
    missing = [b for b in bands if b not in names]
    if missing:
        raise SceneError(f"{file}: no band {', '.join(missing)} (see --band-order)")
    if not np.allclose(res, (10.0, 10.0)):
        raise SceneError(f"{file}: {res[0]:g} x {res[1]:g} pixels; a band stack must be at 10 m")
    opened = Opened()
    readers = {n: opened.band(str(file), i + 1, 1) for i, n in enumerate(names) if n in bands}
    return SceneSource(file, "band stack", readers, None, _metadata(file, readers),
                       [opened.close], nodata=_gdal_nodata(readers))  # fmt: skip


def _gdal_nodata(readers: dict[str, RasterBand]) -> dict[str, tuple[float, ...]]:
    return {band: reader.nodata() for band, reader in readers.items()}


def band_name(name: str) -> str:
    """A band's name as this project writes it: Earth Engine's ``B2`` is ``B02``; ``-`` (a
    band to ignore) and unknown names stay as they are (and are refused by name)."""
    match = re.fullmatch(r"B0?(\d{1,2})(A?)", name.strip(), re.IGNORECASE)
    if match is None:
        return name.strip()
    number, narrow = int(match.group(1)), match.group(2).upper()
    return f"B{number}A" if narrow else f"B{number:02d}"
