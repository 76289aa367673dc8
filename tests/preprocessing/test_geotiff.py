"""The fast GeoTIFF reader against rasterio: deflated strips (reBEN's reference maps), the
predictor, and the layouts it leaves to GDAL."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.crs import CRS
from rasterio.transform import Affine

from bigearthnet.preprocessing import geotiff

TRANSFORM = Affine(10.0, 0.0, 500000.0, 0.0, -10.0, 5000040.0)


def _write(path: Path, data: np.ndarray, **options) -> Path:
    profile = dict(driver="GTiff", width=data.shape[1], height=data.shape[0], count=1,
                   dtype=data.dtype.name, crs=CRS.from_epsg(32633), transform=TRANSFORM,
                   nodata=0)  # fmt: skip
    tags = options.pop("tags", {})
    with rasterio.open(path, "w", **profile, **options) as dst:
        dst.update_tags(**tags)
        dst.write(data, 1)
    return path


LAYOUTS = {
    "raw": {},
    "deflate": {"compress": "deflate"},  # GDAL's default: strips of 34 rows
    "deflate-predictor": {"compress": "deflate", "predictor": 2},  # integers only
    "deflate-one-strip": {"compress": "deflate", "blockysize": 120},
}


@pytest.mark.parametrize(
    "dtype, layout",
    [(dtype, layout) for dtype in ("uint16", "uint8", "int16", "float32") for layout in LAYOUTS
     if not (dtype == "float32" and layout == "deflate-predictor")],
)  # fmt: skip
def test_fast_path_reads_what_rasterio_reads(tmp_path, dtype, layout) -> None:
    options = dict(LAYOUTS[layout])
    data = np.random.default_rng(0).integers(0, 600, (120, 120)).astype(dtype)
    path = _write(tmp_path / "band.tif", data, **options)
    geotiff._parse(path.read_bytes(), path.name)  # the fast path, not the fallback
    raster = geotiff.read_band(path)
    np.testing.assert_array_equal(raster.data, data)
    assert raster.data.dtype == data.dtype
    assert raster.transform == tuple(TRANSFORM)[:6] and raster.nodata == 0
    assert (raster.ulx, raster.uly, raster.pixel_size) == (500000.0, 5000040.0, 10.0)


def test_pixel_is_point_goes_to_gdal_and_keeps_the_corner(tmp_path) -> None:
    """A PixelIsPoint file's tiepoint is a pixel centre: taken as the corner it would shift
    everything by half a pixel, so the fast path leaves it to GDAL."""
    data = np.arange(14400, dtype=np.uint16).reshape(120, 120)
    path = _write(tmp_path / "point.tif", data, tags={"AREA_OR_POINT": "Point"})
    tie = geotiff.read_tags(path.read_bytes())[33922]
    assert tie[3:5] == (500005.0, 5000035.0)
    with pytest.raises(geotiff._Unsupported):
        geotiff._parse(path.read_bytes(), path.name)
    raster = geotiff.read_band(path)
    assert raster.transform == tuple(TRANSFORM)[:6]


def test_a_truncated_deflated_file_is_one_reason(tmp_path) -> None:
    data = np.random.default_rng(1).integers(0, 600, (120, 120)).astype(np.uint16)
    path = _write(tmp_path / "map.tif", data, compress="deflate")
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) - 40])
    with pytest.raises(geotiff.GeoTiffError, match="truncated"):
        geotiff.read_band(path)
    # Damaged in place (same length): the inflater says so.
    damaged = bytearray(blob)
    start = geotiff.read_tags(blob)[273][0]
    damaged[start : start + 16] = b"\xff" * 16
    path.write_bytes(bytes(damaged))
    with pytest.raises(geotiff.GeoTiffError, match="map.tif"):
        geotiff.read_band(path)
