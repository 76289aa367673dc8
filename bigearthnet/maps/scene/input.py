"""A Sentinel-2 scene open for reading by strips: its 12 bands on their grids, the
reflectance offset, the area of interest and the pixels without usable data.

Inputs, in any form :mod:`bigearthnet.maps.inputs` opens: an L2A ``.SAFE`` product folder, an
EOPF Zarr product, a STAC item with COG assets, a folder of band GeoTIFFs or one band stack.
Each band's reflectance offset is decided from the scene's metadata, checked against a sparse
sample of its own pixels (:meth:`Scene.sample`), by :mod:`bigearthnet.maps.radiometry` and
applied, so values match the archive's. A pixel has no data where any band the model reads
holds the nodata its scene declares (a STAC asset's ``raster:bands`` nodata, a band file's
GDAL nodata, a Zarr array's ``_FillValue`` or ``fill_value``; 0 where nothing is declared:
L2A fills nodata with 0); it is told before the offset is applied, and is 0 in that band
after. With ``mask_clouds`` the scene
classification band (SCL, 20 m) also removes cloud shadows, clouds, cirrus and snow
(:data:`SCL_MASKED`).

A ``bbox`` (scene CRS) is widened to the 60 m grid, so every band's window starts on a
whole native pixel and a window there is read exactly as over the whole scene.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError
from bigearthnet.maps.inputs import SceneForm, identify
from bigearthnet.maps.inputs.bands import SCL_FACTOR, BandReader, SceneError
from bigearthnet.maps.inputs.files import band_name
from bigearthnet.maps.radiometry import (
    PIXEL_BANDS,
    SAMPLE_GRID,
    from_metadata,
    read_pixels,
    settle,
)

WINDOW = constants.PATCH_SIZE  # 120 px at 10 m
COARSEST = 6  # the 60 m grid every window origin sits on
# Scene classification (L2A SCL) values that hide the land cover.
SCL_MASKED = {3: "cloud shadow", 8: "cloud, medium probability", 9: "cloud, high probability",
              10: "thin cirrus", 11: "snow or ice"}  # fmt: skip

__all__ = ["SCL_MASKED", "WINDOW", "Scene", "SceneError", "Strip", "band_list", "band_name",
           "parse_bbox"]  # fmt: skip


@dataclass(frozen=True)
class Strip:
    """The window rows of a strip: each band at native resolution (offsets applied), and
    which 10 m pixels hold no usable data (nodata, or masked by SCL)."""

    bands: dict[str, np.ndarray]
    invalid: np.ndarray  # (WINDOW, width) bool at 10 m


def band_list(text: str) -> tuple[str, ...]:
    """``B04,B03,-,B02`` -> the band name of each band of a stack, in order."""
    return tuple(name.strip() for name in text.split(","))


def parse_bbox(text: str) -> tuple[float, float, float, float]:
    """``minx,miny,maxx,maxy`` -> floats; ValueError naming what is wrong."""
    try:
        minx, miny, maxx, maxy = (float(v) for v in text.split(","))
    except ValueError:
        raise InputError(f"--bbox wants minx,miny,maxx,maxy (four numbers), got {text!r}") from None
    if not all(math.isfinite(v) for v in (minx, miny, maxx, maxy)):
        raise InputError(f"--bbox {text}: every coordinate must be a finite number")
    if not (minx < maxx and miny < maxy):
        raise InputError(f"--bbox {text}: min must be below max on both axes")
    return minx, miny, maxx, maxy


class Scene:
    """The Sentinel-2 ``bands`` of a scene (optionally a bbox of it), open for reading by
    strips. ``height`` and ``width`` are 10 m px of the area read, ``transform`` its grid,
    ``extent`` the whole scene's (height, width).
    ``scene``: identified (:func:`~bigearthnet.maps.inputs.identify`), or a path to
    identify."""

    def __init__(
        self,
        scene: SceneForm | Path | str,
        *,
        bbox: tuple[float, float, float, float] | None = None,
        band_order: Sequence[str] | None = None,
        mask_clouds: bool = False,
        bands: tuple[str, ...] = constants.BANDS,
        boa_offset: int | None = None,
    ) -> None:
        from rasterio.transform import Affine

        self.form = scene if isinstance(scene, SceneForm) else identify(scene)
        self.path = path = self.form.path
        self.bands = bands
        self.form.require_l2a()
        self.source = self.form.open(bands, band_order=band_order, mask_clouds=mask_clouds)
        try:  # once every band has opened: a damaged file is named as such first
            reference = self.source.bands["B02"]
            self._check_grids(reference)
            metadata = self.source.metadata
            found = from_metadata(path, metadata, boa_offset)
            self.scl = self.source.scl
            self.crs = reference.crs
            self.row0, self.col0, self.height, self.width = self._area(bbox, reference)
            self.extent = (reference.height, reference.width)  # the whole scene's, 10 m px
            self.transform = reference.transform @ Affine.translation(self.col0, self.row0)
            if self.height < WINDOW or self.width < WINDOW:
                raise SceneError(
                    f"{path}: {self.width}x{self.height} px at 10 m, smaller than one "
                    f"{WINDOW}x{WINDOW} window"
                )
            pixels = read_pixels(self.sample())
            self.radiometry = settle(path, found, pixels, boa_offset, metadata.bands)
        except InputError:
            self.close()
            raise
        self.offsets: dict[str, int] = dict(self.radiometry.offsets)
        self.product = metadata.product  # the product's name, where its files state it

    def values_tags(self) -> dict[str, str]:
        """How its values were read, for the map's tags: the radiometric readings
        (:meth:`~bigearthnet.maps.radiometry.Radiometry.tags`) and the product's name."""
        return {**self.radiometry.tags(), "product": self.product}

    def _check_grids(self, reference: BandReader) -> None:
        named = dict(self.source.bands, **({"SCL": self.source.scl} if self.source.scl else {}))
        for band, reader in named.items():
            if reader.crs is None or reader.transform.is_identity:
                # A truncated GeoTIFF loses its georeferencing tags before its pixels: say
                # so, rather than that its (absent) CRS differs from B02's.
                raise SceneError(f"{reader.name}: no georeferencing (CRS or geotransform) "
                                 "in this band: a truncated or plain TIFF")  # fmt: skip
            if reader.crs != reference.crs:
                raise SceneError(f"{reader.name}: CRS {reader.crs} differs from B02's")
            size = (reader.width * reader.factor, reader.height * reader.factor)
            corner = (reader.transform.c, reader.transform.f)
            same_corner = np.allclose(corner, (reference.transform.c, reference.transform.f),
                                      atol=1e-3)  # fmt: skip
            if size != (reference.width, reference.height) or not same_corner:
                raise SceneError(f"{reader.name}: footprint of {band} differs from B02's")

    def _area(self, bbox, reference) -> tuple[int, int, int, int]:
        """(row0, col0, height, width) in 10 m px: the whole scene, or ``bbox`` widened to
        the 60 m grid and clipped to the scene."""
        if bbox is None:
            return 0, 0, reference.height, reference.width
        minx, miny, maxx, maxy = bbox
        origin_x, origin_y = reference.transform.c, reference.transform.f
        px, py = reference.transform.a, -reference.transform.e
        col0 = math.floor((minx - origin_x) / px / COARSEST) * COARSEST
        col1 = math.ceil((maxx - origin_x) / px / COARSEST) * COARSEST
        row0 = math.floor((origin_y - maxy) / py / COARSEST) * COARSEST
        row1 = math.ceil((origin_y - miny) / py / COARSEST) * COARSEST
        col0, row0 = max(col0, 0), max(row0, 0)
        col1, row1 = min(col1, reference.width), min(row1, reference.height)
        if col1 <= col0 or row1 <= row0:
            from rasterio.transform import array_bounds

            west, south, east, north = array_bounds(
                reference.height, reference.width, reference.transform
            )
            raise SceneError(
                f"{self.path}: --bbox {minx:g},{miny:g},{maxx:g},{maxy:g} lies outside the "
                f"scene ({west:g},{south:g},{east:g},{north:g})"
            )
        return row0, col0, row1 - row0, col1 - col0

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> Scene:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sample(self) -> dict[str, np.ndarray]:
        """The stored values (no offset) of
        :data:`~bigearthnet.maps.radiometry.PIXEL_BANDS` at the valid pixels of a sparse grid
        of window-sized blocks over the area (radiometry's check)."""
        sampled = tuple(band for band in PIXEL_BANDS if band in self.source.bands)
        found: dict[str, list[np.ndarray]] = {band: [] for band in sampled}
        reading = tuple(dict.fromkeys(("B02", *sampled)))  # B02 says which pixels are valid
        rows, cols = (_spread(size) for size in (self.height, self.width))
        for row in rows:
            for col in cols:
                block = self.strip(row, col, WINDOW, only=reading, stored=True)
                for band in sampled:
                    values = block.bands[band][~block.invalid]
                    found[band].append(values[values != 0])  # L2A's nodata, in every band
        return {band: np.concatenate(parts) for band, parts in found.items()}

    def strip(
        self,
        row: int,
        col: int = 0,
        width: int | None = None,
        *,
        only: tuple[str, ...] | None = None,
        stored: bool = False,
    ) -> Strip:
        """The window rows starting at 10 m row ``row`` of the area, all its columns (or
        ``width`` of them from ``col``: a block); the bands in the model's order
        (``self.bands``), or ``only`` these (B02 among them); offsets applied, unless
        ``stored``: the values as the files store them."""
        width = self.width if width is None else width
        return self.rect(row, col, WINDOW, width, only=only, stored=stored)

    def rect(
        self,
        row: int,
        col: int,
        height: int,
        width: int,
        *,
        only: tuple[str, ...] | None = None,
        stored: bool = False,
    ) -> Strip:
        """``height`` x ``width`` 10 m px from ``row``, ``col`` of the area (on the 60 m
        grid), as :meth:`strip`. It may reach past the area (a large window's context: the
        scene's own pixels there) and past the scene: 0 there, and no usable data."""
        bands = {}
        invalid = np.zeros((height, width), dtype=bool)
        for band in only or self.bands:
            reader = self.source.bands[band]
            data, outside = self._read(reader, row, col, height, width)
            missing = self._nodata(band, data) | outside
            invalid |= missing.repeat(reader.factor, axis=0).repeat(reader.factor, axis=1)
            offset = 0 if stored else self.offsets.get(band, 0)
            if offset:  # never onto 0 either: 0 would read as nodata downstream
                data = np.clip(data.astype(np.int32) + offset, 1, 65535).astype(np.uint16)
            bands[band] = np.where(missing, 0, data).astype(data.dtype, copy=False)
        if self.scl is not None:
            scl, _ = self._read(self.scl, row, col, height, width)
            masked = np.isin(scl, list(SCL_MASKED))
            invalid |= masked.repeat(SCL_FACTOR, axis=0).repeat(SCL_FACTOR, axis=1)
        return Strip(bands, invalid)

    def _nodata(self, band: str, stored: np.ndarray) -> np.ndarray:
        """Where ``band``'s stored values are a nodata value its scene declares (0 when it
        declares none)."""
        missing = np.zeros(stored.shape, dtype=bool)
        for value in self.source.nodata.get(band) or (0,):
            missing |= stored == value
        return missing

    def _read(
        self, reader: BandReader, row: int, col: int, height: int, width: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The band's native pixels of the rectangle (10 m px of the area), and where it lies
        outside the scene (read as 0)."""
        f = reader.factor
        top, left = (self.row0 + row) // f, (self.col0 + col) // f
        rows, cols = height // f, width // f
        r0, c0 = max(top, 0), max(left, 0)
        r1, c1 = min(top + rows, reader.height), min(left + cols, reader.width)
        if (r0, c0, r1, c1) == (top, left, top + rows, left + cols):
            data = reader.read(top, left, rows, cols)
            return data, np.zeros(data.shape, dtype=bool)
        outside = np.ones((rows, cols), dtype=bool)
        if r1 <= r0 or c1 <= c0:
            return np.zeros((rows, cols), dtype=np.dtype(reader.dtype)), outside
        part = reader.read(r0, c0, r1 - r0, c1 - c0)
        data = np.zeros((rows, cols), dtype=part.dtype)
        data[r0 - top : r1 - top, c0 - left : c1 - left] = part
        outside[r0 - top : r1 - top, c0 - left : c1 - left] = False
        return data, outside


def _spread(size: int) -> list[int]:
    """Up to :data:`~bigearthnet.maps.radiometry.SAMPLE_GRID` window origins spread evenly
    over ``size`` px (on the 60 m grid, as every window's)."""
    last = (size - WINDOW) // COARSEST * COARSEST
    count = min(SAMPLE_GRID, last // WINDOW + 1)
    return sorted({round(last * i / max(count - 1, 1)) // COARSEST * COARSEST
                   for i in range(count)})  # fmt: skip
