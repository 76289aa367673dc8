"""Reading single-band BigEarthNet GeoTIFFs fast, with rasterio as the general fallback.

BigEarthNet ships each band of each patch as a tiny (0.8-29 KB) uncompressed, striped,
single-band uint16 GeoTIFF, and reBEN each reference map as a deflated one. Opening such a
file through GDAL costs far more than reading it, and preprocessing opens 12 of them per
patch, 7 million in all for v1. For exactly that layout (strips, uncompressed or deflate
with or without the horizontal predictor) we parse the TIFF header ourselves and view or
inflate the strips as a numpy array; any other layout (other compressions, tiles, BigTIFF,
several bands) goes through rasterio, so the fast path is an optimisation and never a
restriction.

Geo-referencing comes from the GeoTIFF tags too: the upper-left corner (ModelTiepoint),
the pixel size (ModelPixelScale) and the EPSG code of the projected CRS (GeoKeyDirectory,
key 3072). Where those are absent or unusual, rasterio answers instead.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bigearthnet.core.errors import InputError
from bigearthnet.core.util import first_line

# TIFF tag numbers used below (TIFF 6.0 and GeoTIFF 1.0 specifications).
_WIDTH, _HEIGHT, _BITS, _COMPRESSION = 256, 257, 258, 259
_STRIP_OFFSETS, _SAMPLES, _ROWS_PER_STRIP, _STRIP_COUNTS = 273, 277, 278, 279
_PLANAR, _PREDICTOR, _TILE_WIDTH, _SAMPLE_FORMAT, _GDAL_NODATA = 284, 317, 322, 339, 42113
_DEFLATE = (8, 32946)  # Adobe deflate, and the older code of the same zlib streams
_PIXEL_SCALE, _TIEPOINT, _GEOKEYS = 33550, 33922, 34735
_PROJECTED_CRS_KEY = 3072  # ProjectedCSTypeGeoKey
_GEOGRAPHIC_CRS_KEY = 2048  # GeographicTypeGeoKey
_RASTER_TYPE_KEY, _PIXEL_IS_POINT = 1025, 2  # GTRasterTypeGeoKey: tiepoints at pixel centres

# TIFF field type -> struct code and size.
_FIELD_TYPES = {1: "B", 2: "s", 3: "H", 4: "I", 5: "II", 7: "B", 11: "f", 12: "d", 16: "Q"}
_FIELD_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 7: 1, 11: 4, 12: 8, 16: 8}
_DTYPES = {(1, 8): "u1", (1, 16): "u2", (1, 32): "u4", (2, 16): "i2", (2, 32): "i4", (3, 32): "f4"}


class GeoTiffError(InputError):
    """A GeoTIFF that cannot be read; the message says why in a few words."""


@dataclass(frozen=True)
class Raster:
    """One band: pixels plus where they are on Earth."""

    data: np.ndarray
    crs: str  # "EPSG:32633" where the file names an EPSG code, else WKT
    ulx: float  # upper-left corner, CRS units (metres for UTM)
    uly: float
    pixel_size: float
    nodata: float | None
    # The affine transform as GDAL and rasterio order it, (a, b, c, d, e, f): x = a*col +
    # b*row + c, y = d*col + e*row + f; north-up files have b = d = 0 and e = -pixel_size.
    transform: tuple[float, float, float, float, float, float] = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)


class _Unsupported(Exception):
    """Layout outside the fast path: let rasterio read it."""


def read_band(path: str | Path) -> Raster:
    """Read band 1 of a GeoTIFF; raises GeoTiffError (missing, truncated, unreadable)."""
    path = Path(path)
    try:
        with open(path, "rb", buffering=0) as f:  # one unbuffered read of the whole file
            blob = f.readall()
    except FileNotFoundError:
        raise GeoTiffError(f"missing file {path.name}") from None
    except OSError as err:
        raise GeoTiffError(f"cannot read {path.name}: {err.strerror}") from None
    try:
        return _parse(blob, path.name)
    except _Unsupported:
        return _read_with_rasterio(path)
    except (struct.error, IndexError, KeyError) as err:
        raise GeoTiffError(f"{path.name} is not a valid TIFF ({err})") from None


def read_part(path: str | Path, what: str, error: type[InputError]) -> Raster:
    """:func:`read_band` for one file of a patch (``what``: "band B02", "reference map"), a
    failure raised as ``error`` with the reason rejects.csv records: "missing band B02
    (NAME_B02.tif)" or "band B02: NAME_B02.tif is truncated (...)"."""
    try:
        return read_band(path)
    except GeoTiffError as err:
        if str(err).startswith("missing file"):
            raise error(f"missing {what} ({Path(path).name})") from None
        raise error(f"{what}: {err}") from None


def read_tags(blob: bytes, name: str = "TIFF") -> dict[int, tuple]:
    """The tags of a TIFF's first image directory (tag number -> values), from its bytes;
    GeoTiffError when it is not a (classic) TIFF. The project's one TIFF tag reader."""
    order, tags = _header_and_tags(blob, name)
    return tags


def _header_and_tags(blob: bytes, name: str) -> tuple[str, dict[int, tuple]]:
    if len(blob) < 8:
        raise GeoTiffError(f"{name} is truncated ({len(blob)} bytes)")
    order = {b"II": "<", b"MM": ">"}.get(blob[:2])
    if order is None:
        raise GeoTiffError(f"{name} is not a TIFF file")
    magic, ifd_offset = struct.unpack(order + "HI", blob[2:8])
    if magic == 43:
        raise _Unsupported  # BigTIFF
    if magic != 42:
        raise GeoTiffError(f"{name} is not a TIFF file")
    return order, _read_ifd(blob, order, ifd_offset, name)


def _parse(blob: bytes, name: str) -> Raster:
    order, tags = _header_and_tags(blob, name)
    return _decode(blob, order, tags, name)


def _read_ifd(blob: bytes, order: str, offset: int, name: str) -> dict[int, tuple]:
    if offset + 2 > len(blob):
        raise GeoTiffError(f"{name} is truncated (no image directory)")
    (count,) = struct.unpack_from(order + "H", blob, offset)
    # All 12-byte entries (tag, type, count, value-or-offset) in one unpack.
    entries = struct.unpack_from(order + "HHII" * count, blob, offset + 2)
    tags: dict[int, tuple] = {}
    for i in range(count):
        tag, ftype, n, value = entries[4 * i : 4 * i + 4]
        if ftype not in _FIELD_TYPES:
            continue
        size = _FIELD_SIZES[ftype] * n
        where = offset + 2 + 12 * i + 8 if size <= 4 else value
        if where + size > len(blob):
            raise GeoTiffError(f"{name} is truncated (tag {tag} beyond end of file)")
        if ftype == 2:
            tags[tag] = (blob[where : where + n].rstrip(b"\0").decode("latin-1"),)
        else:
            code = _FIELD_TYPES[ftype]
            tags[tag] = struct.unpack_from(order + code * n, blob, where)
    return tags


def _decode(blob: bytes, order: str, tags: dict[int, tuple], name: str) -> Raster:
    compression = tags.get(_COMPRESSION, (1,))[0]
    predictor = tags.get(_PREDICTOR, (1,))[0]
    if compression not in (1, *_DEFLATE) or predictor not in (1, 2) or _TILE_WIDTH in tags:
        raise _Unsupported
    if tags.get(_SAMPLES, (1,))[0] != 1 or tags.get(_PLANAR, (1,))[0] != 1:
        raise _Unsupported
    width, height = tags[_WIDTH][0], tags[_HEIGHT][0]
    dtype_key = (tags.get(_SAMPLE_FORMAT, (1,))[0], tags.get(_BITS, (1,))[0])
    if dtype_key not in _DTYPES:
        raise _Unsupported
    dtype = np.dtype(order + _DTYPES[dtype_key])
    offsets, counts = tags[_STRIP_OFFSETS], tags[_STRIP_COUNTS]
    if max(o + c for o, c in zip(offsets, counts)) > len(blob):
        raise GeoTiffError(f"{name} is truncated (pixel data beyond end of file)")
    if compression == 1:
        blob, start = _raw_strips(blob, offsets, counts, width * height * dtype.itemsize, name)
    else:
        blob, start = _inflated_strips(blob, offsets, counts, width * height * dtype.itemsize, name)
    # Strips contiguous (the usual case): view the pixels in place; astype makes the copy.
    pixels = np.frombuffer(blob, dtype=dtype, count=width * height, offset=start)
    data = pixels.reshape(height, width).astype(dtype.newbyteorder("="))
    if predictor == 2:  # horizontal differencing: each value is stored minus its left one
        data = np.cumsum(data, axis=1, dtype=data.dtype)  # integers wrap as the encoder's did
    crs = _epsg_from_geokeys(tags.get(_GEOKEYS))
    point = _geokey(tags.get(_GEOKEYS), _RASTER_TYPE_KEY) == _PIXEL_IS_POINT
    if crs is None or point or _TIEPOINT not in tags or _PIXEL_SCALE not in tags:
        raise _Unsupported  # unusual geo-referencing: GDAL knows more variants than we do
    tie, scale = tags[_TIEPOINT], tags[_PIXEL_SCALE]
    ulx = tie[3] - tie[0] * scale[0]
    uly = tie[4] + tie[1] * scale[1]
    nodata = _parse_nodata(tags.get(_GDAL_NODATA))
    transform = (float(scale[0]), 0.0, float(ulx), 0.0, -float(scale[1]), float(uly))
    return Raster(data, crs, float(ulx), float(uly), float(scale[0]), nodata, transform)


def _raw_strips(blob: bytes, offsets, counts, needed: int, name: str) -> tuple[bytes, int]:
    """(buffer, offset of the first pixel) of uncompressed strips."""
    if sum(counts) < needed:
        raise GeoTiffError(f"{name} is truncated (strips hold {sum(counts)} of {needed} bytes)")
    if not all(offsets[i] + counts[i] == offsets[i + 1] for i in range(len(offsets) - 1)):
        return b"".join(blob[o : o + c] for o, c in zip(offsets, counts)), 0
    return blob, offsets[0]


def _inflated_strips(blob: bytes, offsets, counts, needed: int, name: str) -> tuple[bytes, int]:
    """(buffer, 0) of deflated strips, inflated and joined."""
    try:
        pixels = b"".join(zlib.decompress(blob[o : o + c]) for o, c in zip(offsets, counts))
    except zlib.error as err:
        raise GeoTiffError(f"{name} is truncated or damaged (deflate: {err})") from None
    if len(pixels) < needed:
        raise GeoTiffError(f"{name} is truncated (strips hold {len(pixels)} of {needed} bytes)")
    return pixels, 0


def _epsg_from_geokeys(keys: tuple | None) -> str | None:
    for key in (_PROJECTED_CRS_KEY, _GEOGRAPHIC_CRS_KEY):
        value = _geokey(keys, key)
        if value is not None and value < 32767:
            return f"EPSG:{value}"
    return None


def _geokey(keys: tuple | None, wanted: int) -> int | None:
    """A short GeoKey's value held in the directory itself; None where it is absent."""
    if not keys or len(keys) < 4:
        return None
    for i in range(keys[3]):
        key, location, _count, value = keys[4 + 4 * i : 8 + 4 * i]
        if key == wanted and location == 0:
            return int(value)
    return None


def _parse_nodata(value: tuple | None) -> float | None:
    if not value:
        return None
    try:
        return float(value[0])
    except ValueError:
        return None


def _read_with_rasterio(path: Path) -> Raster:
    import rasterio  # imported lazily: the fast path needs no GDAL start-up
    from rasterio.errors import RasterioIOError

    try:
        with rasterio.open(path) as src:
            data = src.read(1)
            epsg = src.crs.to_epsg() if src.crs else None
            crs = f"EPSG:{epsg}" if epsg else (src.crs.to_wkt() if src.crs else "")
            t = src.transform
            return Raster(data, crs, t.c, t.f, abs(t.a), src.nodata, (t.a, t.b, t.c, t.d, t.e, t.f))
    except RasterioIOError as err:
        raise GeoTiffError(f"{path.name} is unreadable ({first_line(err)})") from None
