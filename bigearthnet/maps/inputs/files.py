"""Scenes as files GDAL reads, three forms: an L2A ``.SAFE`` product folder
(:class:`SafeProduct`), a folder of single-band GeoTIFFs named by band (:class:`BandGeoTiffs`),
or one multi-band GeoTIFF at 10 m (:class:`BandStack`)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.constants import SCL
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
from bigearthnet.maps.inputs.form import SceneForm
from bigearthnet.maps.radiometry import SceneMetadata, read_product_metadata

PRODUCT_METADATA = "MTD_MSIL2A.xml"
L1C_METADATA = "MTD_MSIL1C.xml"  # a Level-1C product's: claimed as SAFE, to be refused
# A SAFE product's band files: T33UXP_20200801T100559_B02_10m.jp2 (tile, sensing time).
SAFE_BAND = re.compile(r"^T(?P<tile>\w{5})_(?P<date>\d{8})T\d{6}_B02_10m\.jp2$")
SAFE_IMAGES = "GRANULE/*/IMG_DATA/R*m/*.jp2"


class SafeProduct(SceneForm):
    """An L2A ``.SAFE`` product folder: JPEG 2000 bands at their native resolutions
    (``GRANULE/*/IMG_DATA/R10m/T33UXP_20200801T100559_B02_10m.jp2``) and ``MTD_MSIL2A.xml``;
    a folder holding ``MTD_MSIL1C.xml`` is a Level-1C product, claimed to be refused."""

    name = "SAFE"

    @classmethod
    def claims(cls, ref: str | Path) -> bool:
        path = Path(ref)
        return path.is_dir() and (
            (path / L1C_METADATA).is_file() or next(path.glob(SAFE_IMAGES), None) is not None
        )

    def is_level_1c(self) -> bool:
        return (self.path / L1C_METADATA).is_file() or super().is_level_1c()

    def tile_and_date(self) -> tuple[str, dt.date] | None:
        """The product name in its path, else the tile and date its band files are named by
        (a product folder renamed keeps them)."""
        named = super().tile_and_date()
        if named is not None:
            return named
        for jp2 in sorted(self.path.glob("GRANULE/*/IMG_DATA/R10m/*_B02_10m.jp2")):
            found = SAFE_BAND.match(jp2.name)
            tile = mgrs_tile(found["tile"]) if found else None
            if found and tile:
                return tile, dt.datetime.strptime(found["date"], "%Y%m%d").date()
        return None

    def _open(self, bands, mask_clouds, band_order) -> SceneSource:
        images = sorted(self.path.glob(SAFE_IMAGES))

        def image(band: str) -> Path | None:
            name = re.compile(rf"_{band}_{constants.band_resolution_m(band)}m\.jp2$")
            return next((p for p in images if name.search(p.name)), None)

        return _open_band_files(self, bands, image, mask_clouds)


class BandGeoTiffs(SceneForm):
    """A folder of single-band GeoTIFFs named by band (``*B02*.tif``, ``B8A.tif``,
    ``x_SCL_20m.tif``): any folder no other form claims."""

    name = "band GeoTIFFs"
    catch_all = True

    @classmethod
    def claims(cls, ref: str | Path) -> bool:
        return Path(ref).is_dir()

    def _open(self, bands, mask_clouds, band_order) -> SceneSource:
        files = sorted(self.path.iterdir())

        def image(band: str) -> Path | None:
            name = re.compile(rf"(^|[_\-.]){band}(?=[_\-.]).*\.tiff?$", re.IGNORECASE)
            return next((p for p in files if name.search(p.name)), None)

        return _open_band_files(self, bands, image, mask_clouds)


def _open_band_files(
    scene: SceneForm, bands: tuple[str, ...], image: Callable[[str], Path | None], mask_clouds: bool
) -> SceneSource:
    """A folder's bands, each from its ``image`` (None: missing), and SCL if masking."""
    found = {band: image(band) for band in bands}
    missing = [band for band, file in found.items() if file is None]
    if missing:
        raise SceneError(f"{scene.path}: no image of band(s) {', '.join(missing)}")
    scl_file = image(SCL) if mask_clouds else None
    if mask_clouds and scl_file is None:
        raise SceneError(f"{scene.path}: {NO_SCL}")
    opened = Opened()
    readers = {band: opened.band(str(file), 1, constants.band_factor(band))
               for band, file in sorted(found.items()) if file is not None}  # fmt: skip
    scl = opened.band(str(scl_file), 1, SCL_FACTOR) if scl_file else None
    return SceneSource(scene.path, scene.name, dict(readers), scl, _metadata(scene.path, readers),
                       [opened.close], nodata=_gdal_nodata(readers))  # fmt: skip


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


class BandStack(SceneForm):
    """One multi-band GeoTIFF at 10 m (any file no other form claims), its bands named by
    ``--band-order`` or by their descriptions (``B02`` or Earth Engine's ``B2``), never taken
    in an assumed order."""

    name = "band stack"
    catch_all = True
    takes_band_order = True

    @classmethod
    def claims(cls, ref: str | Path) -> bool:
        return Path(ref).is_file()

    def _open(self, bands, mask_clouds, band_order) -> SceneSource:
        import rasterio

        file = self.path
        if mask_clouds:
            raise SceneError(f"{file}: {NO_SCL}")
        try:
            with rasterio.open(file) as src:
                count, descriptions, res = src.count, src.descriptions, src.res
        except rasterio.errors.RasterioIOError as err:
            raise SceneError(f"{file}: cannot read ({first_line(err)})") from None
        names = _stack_bands(file, count, descriptions, band_order, bands)
        if not np.allclose(res, (constants.GRID_M,) * 2):
            raise SceneError(
                f"{file}: {res[0]:g} x {res[1]:g} pixels; a band stack must be at 10 m"
            )
        opened = Opened()
        readers = {n: opened.band(str(file), i + 1, 1) for i, n in enumerate(names) if n in bands}
        return SceneSource(file, self.name, readers, None, _metadata(file, readers),
                           [opened.close], nodata=_gdal_nodata(readers))  # fmt: skip


def _stack_bands(
    file: Path, count: int, descriptions, band_order: Sequence[str] | None, bands: tuple[str, ...]
) -> list[str]:
    """The band name of each band of the stack (``-``: one to ignore), checked."""
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
    return names


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
