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

from bigearthnet.core.errors import InputError
from bigearthnet.core.util import first_line
from bigearthnet.maps.radiometry import SceneMetadata

SCL_FACTOR = 2  # SCL is delivered at 20 m


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

    def read(self, row: int, col: int, height: int, width: int) -> np.ndarray: ...


class RasterBand:
    """A band of a file GDAL reads (JPEG 2000, GeoTIFF, COG; a local path or a URL)."""

    def __init__(self, dataset, index: int, factor: int, name: str) -> None:
        self.dataset, self.index, self.factor, self.name = dataset, index, factor, name
        self.crs, self.transform = dataset.crs, dataset.transform
        self.width, self.height = dataset.width, dataset.height

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
    10 m): the chunk row under the strip is decoded once, whole, and kept until a strip
    leaves it, rather than decoded again for each of the 15 strips it holds."""

    def __init__(self, array, factor: int, name: str, crs, transform) -> None:
        self.array, self.factor, self.name = array, factor, name
        self.crs, self.transform = crs, transform
        self.height, self.width = (int(n) for n in array.shape)
        self.chunk_rows = int(getattr(array, "chunks", (self.height,))[0]) or self.height
        self._kept: tuple[int, np.ndarray] | None = None  # (first row, rows of whole chunks)

    def read(self, row: int, col: int, height: int, width: int) -> np.ndarray:
        first = row // self.chunk_rows * self.chunk_rows
        last = min(-(-(row + height) // self.chunk_rows) * self.chunk_rows, self.height)
        if self._kept is None or not (
            self._kept[0] <= row and row + height <= self._kept[0] + len(self._kept[1])
        ):
            try:
                self._kept = (first, np.asarray(self.array[first:last, :]))
            except Exception as err:  # a missing or damaged chunk: zarr and codecs raise many
                raise SceneError(f"{self.name}: cannot read ({first_line(err)})") from None
        start = row - self._kept[0]
        return self._kept[1][start : start + height, col : col + width]


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
