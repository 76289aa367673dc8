"""Cloud-Optimized GeoTIFFs, the one writer: every raster the map commands write (class
maps, their probabilities, change maps) is one, so a GIS reads it tiled, with overviews,
over HTTP range requests (``rio cogeo validate`` passes).

GDAL writes a COG by copying a dataset, so the bands, tags, colour table and descriptions
go into a source dataset first (a hidden sibling: a kill leaves nothing a glob for ``*.tif``
takes), which the COG driver then copies, tiled (512 px), DEFLATE-compressed (level 1 with
the horizontal predictor: :data:`COG_OPTIONS`), with nearest-neighbour overviews down to one
tile, under a temporary name renamed at the end.
The source is either

* a plain GeoTIFF of the bands given as one array (a scene map), or
* a VRT mosaic of parts written block by block (:class:`Mosaic`: a region series at 10 m,
  whose bands never fit in memory at once). GDAL's COG driver reads its source through the
  block cache, a window at a time, and builds the overviews the same way, so the copy's
  memory does not grow with the raster (measured: 0.27 GB for a 16,384 and a 32,768 px
  square alike, the block cache capped at 64 MB; ``tests/formats/test_cog.py``).

What the writing costs (a 10 m scene map's 19 probability bands, 1,824 x 1,728 px, one
core; benchmarks/README.md, P12-10m): parts as DEFLATE, pixel-interleaved, 1.9 s (19.8 MB),
as ZSTD level 1, band-interleaved, 0.3 s (12.1 MB), and the map's one band then reads alone
(its COG 0.56 -> 0.10 s); the COG at DEFLATE's default level 6 3.4-4.0 s (24.1 MB), at
level 1 with the horizontal predictor 1.8-2.2 s (19.1 MB: probabilities vary smoothly, so
the differences compress better than the values). DEFLATE stays, as every GIS reads it.
Of that copy, the overviews took 0.8 of 1.4 s: the driver built them into a temporary
compressed file, then decoded and compressed them again. A scene map's source now holds
its overviews, built uncompressed (nearest, the driver's factors: :func:`overview_factors`),
and the copy takes them as they are: 0.95 s, the same pixels and size (2026-11-28). A
mosaic's copy builds them as before (a VRT holds none).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bigearthnet.core.util import atomic_path, temp_sibling

Describe = Callable[[Any], None]  # sets what the bands carry on an open rasterio dataset
COPY_CACHE_BYTES = 64 << 20  # GDAL's block cache while a COG is copied: its memory
BLOCK_SIZE = 512  # px: the COG's tiles (the driver's default), and its last overview's size
# The COG's compression (module docstring: the cost of each choice).
COG_OPTIONS = {"compress": "DEFLATE", "level": 1, "predictor": "YES"}
# A part's: written once, read once by the copy (ZSTD: any GDAL that reads the parts wrote them).
PART_OPTIONS = {"compress": "ZSTD", "zstd_level": 1, "interleave": "band"}
_VRT_TYPES = {"uint8": "Byte", "uint16": "UInt16", "int16": "Int16", "float32": "Float32"}


@dataclass(frozen=True)
class Part:
    """Bands of a plain GeoTIFF ``path`` (1-based ``bands``) that go to the mosaic's
    rectangle at ``row``, ``col`` (its size: the file's)."""

    path: Path
    bands: tuple[int, ...]
    row: int
    col: int
    height: int
    width: int


@dataclass(frozen=True)
class Mosaic:
    """A raster of ``count`` bands, ``height`` x ``width`` of ``dtype``, held as parts on
    disk; where no part lies, nodata."""

    count: int
    height: int
    width: int
    dtype: str
    parts: tuple[Part, ...]

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.count, self.height, self.width


def plain_profile(grid: Mapping[str, Any], shape: tuple[int, int, int], dtype: str,
                  nodata: int) -> dict:  # fmt: skip
    """The profile of a plain GeoTIFF of ``shape`` (count, rows, cols) on ``grid`` (``crs``,
    ``transform``): what a COG is copied from (uncompressed: it lives a moment), or a part
    of a :class:`Mosaic` (with :data:`PART_OPTIONS`: parts stay until the mosaic is copied)."""
    count, height, width = shape
    return dict(grid, driver="GTiff", height=height, width=width, count=count, dtype=dtype,
                nodata=nodata)  # fmt: skip


def open_part(path: Path, shape: tuple[int, int, int], dtype: str, grid: Mapping[str, Any],
              nodata: int):  # fmt: skip
    """A part of a :class:`Mosaic` open for writing (its bands or windows of them, in any
    order): a plain GeoTIFF of ``shape`` (count, rows, cols) on ``grid``, each band stored
    apart (a mosaic of one band reads only it), :data:`PART_OPTIONS`."""
    import rasterio

    profile = plain_profile(grid, shape, dtype, nodata)
    return rasterio.open(path, "w", **profile, **PART_OPTIONS)


def write_cog(
    path: Path,
    bands: np.ndarray | Mosaic,
    grid: Mapping[str, Any],
    tags: Mapping[str, str],
    describe: Describe,
    nodata: int,
) -> None:
    """``bands`` ((count, rows, cols), their dtype; or a :class:`Mosaic` of parts) on
    ``grid`` (``crs``, ``transform``) as a COG at ``path`` with ``tags``; ``describe`` adds
    band descriptions, colour table, scales."""
    mosaic = isinstance(bands, Mosaic)
    source = Path(f"{temp_sibling(path, 'mosaic')}.vrt") if mosaic else temp_sibling(path, "plain")
    try:
        with _source(source, bands, grid, nodata) as dst:
            dst.update_tags(**tags)
            describe(dst)
        _copy_to_cog(source, path, own_overviews=not mosaic)
    finally:
        source.unlink(missing_ok=True)
        Path(f"{source}.aux.xml").unlink(missing_ok=True)


def _source(path: Path, bands: np.ndarray | Mosaic, grid: Mapping[str, Any], nodata: int):
    """The dataset a COG is copied from, open for its tags and descriptions."""
    import rasterio

    if isinstance(bands, Mosaic):
        _write_vrt(path, bands, grid, nodata)
        return rasterio.open(path, "r+")
    from rasterio.enums import Resampling

    count, height, width = bands.shape
    profile = plain_profile(grid, (count, height, width), bands.dtype.name, nodata)
    dst = rasterio.open(path, "w", **profile)
    dst.write(bands)
    # Built here, uncompressed, the COG copies them as they are: its own pass wrote them
    # compressed to a temporary file, then decoded and compressed them again.
    dst.build_overviews(overview_factors(height, width), Resampling.nearest)
    return dst


def overview_factors(height: int, width: int) -> list[int]:
    """As many overviews as GDAL's COG driver makes by default (``OVERVIEWS=AUTO``):
    halvings until the raster, halved and rounded down, fits one :data:`BLOCK_SIZE` tile
    (2,049 px: 2 and 4; tests/formats/test_cog.py holds the driver to it). Built by
    GDAL's overviews, an odd side's halving is rounded up (513 px: 257, the driver's 256)."""
    factors: list[int] = []
    while height > BLOCK_SIZE or width > BLOCK_SIZE:
        height, width = height // 2, width // 2
        factors.append(2 ** (len(factors) + 1))
    return factors


def _copy_to_cog(source: Path, path: Path, *, own_overviews: bool) -> None:
    """``source`` as a COG at ``path``: with the overviews ``source`` holds
    (``own_overviews``), else with those the driver builds."""
    import rasterio
    from rasterio.shutil import copy as copy_dataset

    overviews = "FORCE_USE_EXISTING" if own_overviews else "AUTO"
    with rasterio.Env(GDAL_CACHEMAX=COPY_CACHE_BYTES), atomic_path(path) as tmp:
        copy_dataset(source, tmp, driver="COG", overview_resampling="nearest",
                     overviews=overviews, blocksize=BLOCK_SIZE, **COG_OPTIONS)  # fmt: skip


def _write_vrt(path: Path, mosaic: Mosaic, grid: Mapping[str, Any], nodata: int) -> None:
    """A GDAL VRT of ``mosaic``'s parts on ``grid``, each band's sources placed by their
    rectangles (the parts' own georeferencing is not read)."""
    from rasterio.crs import CRS

    root = ET.Element("VRTDataset", rasterXSize=str(mosaic.width), rasterYSize=str(mosaic.height))
    ET.SubElement(root, "SRS").text = CRS.from_user_input(grid["crs"]).to_wkt()
    ET.SubElement(root, "GeoTransform").text = ", ".join(
        repr(float(v)) for v in grid["transform"].to_gdal()
    )
    for band in range(mosaic.count):
        element = ET.SubElement(root, "VRTRasterBand", dataType=_VRT_TYPES[mosaic.dtype],
                                band=str(band + 1))  # fmt: skip
        ET.SubElement(element, "NoDataValue").text = str(nodata)
        for part in mosaic.parts:
            source = ET.SubElement(element, "SimpleSource")
            ET.SubElement(source, "SourceFilename", relativeToVRT="0").text = str(part.path)
            ET.SubElement(source, "SourceBand").text = str(part.bands[band])
            size = {"xSize": str(part.width), "ySize": str(part.height)}
            ET.SubElement(source, "SrcRect", {"xOff": "0", "yOff": "0", **size})
            ET.SubElement(source, "DstRect", {"xOff": str(part.col), "yOff": str(part.row), **size})
    ET.ElementTree(root).write(path, encoding="UTF-8", xml_declaration=False)
