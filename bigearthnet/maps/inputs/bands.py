"""A scene open for reading, whatever its form: each band a :class:`BandReader` on its native
grid, the scene classification band if asked for, and what the metadata say of the values
(:class:`~bigearthnet.maps.radiometry.SceneMetadata`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from bigearthnet.core.constants import SCL, band_factor
from bigearthnet.core.errors import InputError
from bigearthnet.core.util import first_line
from bigearthnet.maps.radiometry import SceneMetadata

SCL_FACTOR = band_factor(SCL)  # SCL is delivered at 20 m
# Clouds are masked by default (maps.scene.options): a scene without SCL says what to do.
NO_SCL = ("clouds are masked (the default), which needs the scene classification band (SCL); "
          "--no-mask-clouds maps it unmasked")  # fmt: skip


class SceneError(InputError):
    """A scene that cannot be mapped (missing bands, mismatched grids, too small)."""


class BandReader(Protocol):
    """One band of a scene on its native grid (``factor`` x 10 m pixels)."""

    name: str  # the file, asset or array to name in a message
    factor: int
    crs: Any  # rasterio CRS
    transform: Any  # rasterio Affine of the native grid
    width: int
    height: int
    dtype: str  # of the stored values ("uint16"): float data are refused (radiometry)

    def read(self, row: int, col: int, height: int, width: int) -> np.ndarray: ...


class RasterBand:
    """A band of a file GDAL reads (JPEG 2000, GeoTIFF, COG; a local path or a URL)."""

    def __init__(self, dataset, index: int, factor: int, name: str) -> None:
        self.dataset, self.index, self.factor, self.name = dataset, index, factor, name
        self.crs, self.transform = dataset.crs, dataset.transform
        self.width, self.height = dataset.width, dataset.height
        self.dtype = str(dataset.dtypes[index - 1])

    def read(self, row: int, col: int, height: int, width: int) -> np.ndarray:
        from rasterio.windows import Window

        try:
            return self.dataset.read(self.index, window=Window(col, row, width, height))
        except Exception as err:  # GDAL's decoders raise several types on a damaged file
            raise SceneError(f"{self.name}: cannot read ({first_line(err)})") from None

    def scale_offset(self) -> tuple[float, float]:
        """The band's GDAL scale and offset (1 and 0 when it states none)."""
        return self.dataset.scales[self.index - 1], self.dataset.offsets[self.index - 1]

    def nodata(self) -> tuple[float, ...]:
        """The band's GDAL nodata value, () when it states none."""
        return nodata_values([self.dataset.nodatavals[self.index - 1]])


class ArrayBand:
    """A band of an array store (Zarr) with its grid given beside it.

    Strips are read top to bottom, each 120 px high, from chunks of 1,830 px (EOPF's at
    10 m): the chunks under a strip (a chunk row, the columns read) are decoded once, whole,
    and kept until a read leaves them, rather than decoded again for each of the 15 strips
    they hold; a small block (the radiometry check's sample) decodes only its own chunks."""

    def __init__(self, array, factor: int, name: str, crs, transform) -> None:
        self.array, self.factor, self.name = array, factor, name
        self.crs, self.transform = crs, transform
        self.height, self.width = (int(n) for n in array.shape)
        self.dtype = str(array.dtype)
        chunks = getattr(array, "chunks", (self.height, self.width))
        self.chunk_rows = int(chunks[0]) or self.height
        self.chunk_cols = int(chunks[1]) or self.width
        self._kept: tuple[int, int, np.ndarray] | None = None  # (first row, first col, chunks)

    def read(self, row: int, col: int, height: int, width: int) -> np.ndarray:
        if not self._holds(row, col, height, width):
            first_row, last_row = _chunk_span(row, height, self.chunk_rows, self.height)
            first_col, last_col = _chunk_span(col, width, self.chunk_cols, self.width)
            try:
                chunks = np.asarray(self.array[first_row:last_row, first_col:last_col])
            except Exception as err:  # a missing or damaged chunk: zarr and codecs raise many
                raise SceneError(f"{self.name}: cannot read ({first_line(err)})") from None
            self._kept = (first_row, first_col, chunks)
        assert self._kept is not None
        first_row, first_col, chunks = self._kept
        return chunks[row - first_row : row - first_row + height,
                      col - first_col : col - first_col + width]  # fmt: skip

    def _holds(self, row: int, col: int, height: int, width: int) -> bool:
        if self._kept is None:
            return False
        first_row, first_col, chunks = self._kept
        rows, cols = chunks.shape
        return (first_row <= row and row + height <= first_row + rows
                and first_col <= col and col + width <= first_col + cols)  # fmt: skip


def _chunk_span(start: int, size: int, chunk: int, total: int) -> tuple[int, int]:
    """The whole chunks covering ``start .. start + size`` along an axis of ``total``."""
    return start // chunk * chunk, min(-(-(start + size) // chunk) * chunk, total)


def nodata_values(declared) -> tuple[float, ...]:
    """The finite numbers among the nodata values a scene's metadata declare (``None``,
    ``"nan"`` and the like dropped): what a band's pixels hold where it has no data."""
    found = []
    for value in declared:
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number) and number not in found:
            found.append(number)
    return tuple(found)


@dataclass
class SceneSource:
    """An open scene: its bands (band name -> reader), SCL or None, what its metadata say,
    how to close what it opened, and each band's declared nodata values (band -> values;
    none declared: the pixels without data are 0, as L2A fills them)."""

    path: Path
    form: str  # "SAFE", "band GeoTIFFs", "band stack", "EOPF Zarr", "STAC item"
    bands: Mapping[str, BandReader]
    scl: BandReader | None
    metadata: SceneMetadata
    closers: list[Callable[[], None]] = field(default_factory=list)
    nodata: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def close(self) -> None:
        for close in self.closers:
            close()
        self.closers.clear()


class Opened:
    """Rasterio datasets opened once per file (a stack's 12 bands share one), closed together;
    a file that cannot be opened is a SceneError naming it (not the scene: a header-only JP2
    is that band's fault)."""

    def __init__(self) -> None:
        self.datasets: dict[str, Any] = {}

    def band(self, href: str, index: int, factor: int, name: str | None = None) -> RasterBand:
        import rasterio

        if href not in self.datasets:
            try:
                self.datasets[href] = rasterio.open(href)
            except rasterio.errors.RasterioIOError as err:
                self.close()
                what = f"{name or href}: cannot read this band"
                raise SceneError(f"{what} ({first_line(err)})") from None
        return RasterBand(self.datasets[href], index, factor, name or href)

    def close(self) -> None:
        for dataset in self.datasets.values():
            dataset.close()
        self.datasets.clear()
