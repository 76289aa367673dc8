"""bigearthnet.formats.cog: a COG made from a mosaic of parts written block by block is the
COG of the same bands written whole (values, tags, colour table, category names, scales),
with overviews down to one tile; and copying a large mosaic does not load it (slow)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.transform import Affine
from rio_cogeo.cogeo import cog_validate

from bigearthnet.core import constants
from bigearthnet.formats.class_map import probabilities_path, write_class_map
from bigearthnet.formats.cog import (
    COPY_CACHE_BYTES,
    Mosaic,
    Part,
    open_part,
    overview_factors,
    write_cog,
)

GRID = {"crs": "EPSG:3035", "transform": Affine(10.0, 0, 4_000_000.0, 0, -10.0, 3_000_000.0)}
CLASSES = constants.CLASSES_19


def _parts(folder: Path, top: np.ndarray, scores: np.ndarray, block: int) -> tuple[Mosaic, ...]:
    """Each block's top class (band 1) and probabilities (bands 2-20) in one file."""
    height, width = top.shape
    tops, probabilities = [], []
    for row in range(0, height, block):
        for col in range(0, width, block):
            h, w = min(block, height - row), min(block, width - col)
            path = folder / f"part-{row}-{col}.tif"
            with open_part(path, (1 + len(CLASSES), h, w), "uint8", GRID, 255) as dst:
                dst.write(top[row : row + h, col : col + w], 1)
                dst.write(scores[:, row : row + h, col : col + w],
                          list(range(2, 2 + len(CLASSES))))  # fmt: skip
            tops.append(Part(path, (1,), row, col, h, w))
            probabilities.append(Part(path, tuple(range(2, 2 + len(CLASSES))), row, col, h, w))
    return (Mosaic(1, height, width, "uint8", tuple(tops)),
            Mosaic(len(CLASSES), height, width, "uint8", tuple(probabilities)))  # fmt: skip


def test_a_mosaic_is_the_cog_of_its_bands_written_whole(tmp_path):
    rng = np.random.default_rng(0)
    top = rng.integers(0, 19, (1100, 700)).astype(np.uint8)
    top[:40] = 255
    scores = rng.integers(0, 251, (19, 1100, 700)).astype(np.uint8)
    write_class_map(tmp_path / "whole.tif", top, GRID, CLASSES, {"model": "m"},
                    probabilities=scores)  # fmt: skip
    mosaic, companion = _parts(tmp_path, top, scores, 256)
    write_class_map(tmp_path / "mosaic.tif", mosaic, GRID, CLASSES, {"model": "m"},
                    probabilities=companion)  # fmt: skip
    for name in ("mosaic.tif", probabilities_path("mosaic.tif").name):
        path, whole = tmp_path / name, tmp_path / name.replace("mosaic", "whole")
        assert cog_validate(str(path), quiet=True)[:2] == (True, [])
        with rasterio.open(path) as made, rasterio.open(whole) as expected:
            np.testing.assert_array_equal(made.read(), expected.read())
            assert made.profile == expected.profile and made.tags() == expected.tags()
            assert made.scales == expected.scales
            assert made.descriptions == expected.descriptions
            assert made.overviews(1) == [2, 4]  # 1,100 px down to 275: under one tile
            for level in range(2):  # the whole one's, built before the copy: the driver's
                with (
                    rasterio.open(path, overview_level=level) as a,
                    rasterio.open(whole, overview_level=level) as b,
                ):
                    np.testing.assert_array_equal(a.read(), b.read())
            if made.count == 1:
                assert made.colormap(1) == expected.colormap(1)
                assert made.tags(1) == expected.tags(1)
    assert (tmp_path / "mosaic.tif.aux.xml").read_text() == (
        tmp_path / "whole.tif.aux.xml"
    ).read_text()
    assert not list(tmp_path.glob(".*"))  # no VRT left behind


@pytest.mark.parametrize(
    "height, width", [(512, 512), (513, 40), (300, 2049), (300, 2048), (1728, 1824), (4100, 9)]
)
def test_a_cogs_own_overviews_are_the_drivers(tmp_path, height, width):
    """The overviews a scene map's source is given (:func:`overview_factors`, built before
    the copy) are those the COG driver builds itself: as many, of the same sizes within a
    pixel and, at even sizes (a 1,728 px scene's), the same pixels."""
    from rasterio.shutil import copy as copy_dataset

    bands = np.random.default_rng(height).integers(0, 19, (1, height, width)).astype(np.uint8)
    write_cog(tmp_path / "own.tif", bands, GRID, {}, lambda dst: None, nodata=255)
    plain = tmp_path / "plain.tif"
    profile = dict(GRID, driver="GTiff", height=height, width=width, count=1, dtype="uint8")
    with rasterio.open(plain, "w", **profile) as dst:
        dst.write(bands)
    copy_dataset(plain, tmp_path / "driver.tif", driver="COG", overview_resampling="nearest")
    levels = len(overview_factors(height, width))
    for name in ("own.tif", "driver.tif"):
        with rasterio.open(tmp_path / name) as made:
            assert len(made.overviews(1)) == levels, name
    for level in range(levels):
        with (
            rasterio.open(tmp_path / "own.tif", overview_level=level) as own,
            rasterio.open(tmp_path / "driver.tif", overview_level=level) as driver,
        ):
            # GDAL's overviews round a halving up, the COG driver's down: a 513 px raster's
            # first is 257 px here, 256 there; where the sizes agree, so do the pixels.
            assert all(0 <= a - b <= 1 for a, b in zip(own.shape, driver.shape))
            if own.shape == driver.shape:
                np.testing.assert_array_equal(own.read(), driver.read())


# The peak is the process's own (VmHWM, reset by execve), not ru_maxrss: Linux carries
# ru_maxrss over execve from the forking process, so a child of an xdist worker that had
# grown to 9.6 GB reported 9.6 GB whatever it did itself.
COPY = """
import re, sys
from pathlib import Path
import numpy as np
from rasterio.transform import Affine
from bigearthnet.formats.cog import COPY_CACHE_BYTES, Mosaic, Part, open_part, write_cog
def peak_kb():
    return int(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1))
side, block, folder = int(sys.argv[1]), 4096, Path(sys.argv[2])
grid = {"crs": "EPSG:3035", "transform": Affine(10.0, 0, 4e6, 0, -10.0, 3e6)}
parts = []
for row in range(0, side, block):
    for col in range(0, side, block):
        path = folder / f"p{row}-{col}.tif"
        cells = np.random.default_rng(row + col).integers(0, 19, (1, 64, 64), dtype=np.uint8)
        with open_part(path, (1, block, block), "uint8", grid, 255) as dst:
            dst.write(np.kron(cells, np.ones((1, 64, 64), np.uint8)))
        parts.append(Part(path, (1,), row, col, block, block))
before = peak_kb()
write_cog(folder / "big.tif", Mosaic(1, side, side, "uint8", tuple(parts)), grid, {},
          lambda dst: None, 255)
print(before, peak_kb())
"""


@pytest.mark.slow
def test_copying_a_large_mosaic_does_not_load_it(tmp_path):
    """A 32,768 px square (1 GB of bands) and an 8,192 px one (64 MB): the copy's peak memory
    grows by GDAL's capped block cache at most, never by the raster (measured: 0.21 and
    0.28 GB; 16,384 and 32,768 px: 0.27 GB both)."""
    peaks = {}
    for side in (8192, 32768):
        folder = tmp_path / str(side)
        folder.mkdir()
        done = subprocess.run([sys.executable, "-c", COPY, str(side), str(folder)],
                              capture_output=True, text=True, check=True)  # fmt: skip
        peaks[side] = [int(v) * 1024 for v in done.stdout.split()]  # VmHWM: KB
        with rasterio.open(folder / "big.tif") as src:
            assert src.width == side and side // max(src.overviews(1)) <= 512  # one tile
    assert peaks[32768][1] < 0.5e9
    assert peaks[32768][1] - peaks[8192][1] < COPY_CACHE_BYTES + (32 << 20), peaks
