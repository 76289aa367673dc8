"""A region across two UTM zones on one LAEA grid: scene maps reprojected, overlapping
tiles resolved cell by cell (the nearest tile centre among the scenes that see the cell),
no gap at the seam, nothing counted twice."""

from __future__ import annotations

import numpy as np
import pytest
from rasterio.transform import Affine
from rasterio.warp import transform as transform_points

from bigearthnet.core.errors import InputError
from bigearthnet.maps.region.grid import (
    Footprint,
    NearestMosaic,
    RegionGrid,
    window_of,
)
from bigearthnet.maps.region.grid import warp_map as warp_file

PIXEL, SIZE = 300.0, 200  # 60 km scenes of 300 m pixels


def _scene(lon: float, lat: float, epsg: int) -> tuple[str, Affine, Footprint]:
    crs = f"EPSG:{epsg}"
    (x,), (y,) = transform_points("EPSG:4326", crs, [lon], [lat])
    left, top = (
        round(x / PIXEL) * PIXEL - SIZE * PIXEL / 2,
        round(y / PIXEL) * PIXEL + SIZE * PIXEL / 2,
    )
    transform = Affine(PIXEL, 0, left, 0, -PIXEL, top)
    return crs, transform, Footprint(crs, (left, top - SIZE * PIXEL, left + SIZE * PIXEL, top))


@pytest.fixture(scope="module")
def two_zones():
    """Tile A in UTM 32 west of 12 E, tile B in UTM 33 east of it, overlapping ~4 km."""
    return [_scene(11.6, 48.0, 32632), _scene(12.35, 48.0, 32633)]


def warp(bands: np.ndarray, crs: str, transform: Affine, grid: RegionGrid, window) -> np.ndarray:
    """(B, H, W) values in [0, 1] (255: unseen) of a scene map on ``crs``, ``transform`` ->
    their values on ``window`` of ``grid``, through a map file as the products warp it."""
    from rasterio.io import MemoryFile
    from rasterio.warp import Resampling

    stored = np.where(bands == 255, 255, np.rint(bands * 250)).astype(np.uint8)
    profile = dict(driver="GTiff", count=len(bands), height=bands.shape[1], dtype="uint8",
                   width=bands.shape[2], crs=crs, transform=transform, nodata=255)  # fmt: skip
    with MemoryFile() as memory:
        with memory.open(**profile) as dst:
            dst.write(stored)
        with memory.open() as src:
            return warp_file(src, grid, window, Resampling.bilinear) / 250


def _inside(grid: RegionGrid, fp: Footprint, margin: float) -> np.ndarray:
    xs, ys = grid.centres()
    px, py = transform_points(grid.crs, fp.crs, xs.ravel(), ys.ravel())
    px, py = np.reshape(px, xs.shape), np.reshape(py, xs.shape)
    left, bottom, right, top = fp.bounds
    return (
        (px > left + margin) & (px < right - margin) & (py > bottom + margin) & (py < top - margin)
    )


def test_two_utm_zones_on_one_grid(two_zones):
    grid = RegionGrid.covering([fp for _, _, fp in two_zones], cell=600)
    assert grid.crs == "EPSG:3035" and grid.cell == 600
    assert grid.transform.c % 600 == 0 and grid.transform.f % 600 == 0  # snapped to the CRS
    mosaic, centres = NearestMosaic(grid, 2), []
    for index, (crs, transform, fp) in enumerate(two_zones):
        bands = np.zeros((2, SIZE, SIZE), np.float32)
        bands[index] = 1.0  # band i says "from scene i"
        window = window_of(grid, fp)
        assert window is not None and window.width < grid.width  # a scene's own window
        centres.append(fp.centre_in(grid.crs))
        mosaic.add(warp(bands, crs, transform, grid, window),
                   window, centres[-1])  # fmt: skip
    taken, chosen = mosaic.values, mosaic.chosen
    in_a, in_b = (_inside(grid, fp, PIXEL) for _, _, fp in two_zones)
    assert (chosen[in_a | in_b] >= 0).all()  # no gap, also along the seam
    assert (in_a & in_b).sum() > 50  # the tiles do overlap
    # Each cell holds one scene's values, never a blend or a sum.
    seen = chosen >= 0
    np.testing.assert_allclose(taken[:, seen].sum(axis=0), 1.0, atol=1e-5)
    # The overlap is split by distance to the tile centres.
    xs, ys = grid.centres()
    nearer_a = np.hypot(xs - centres[0][0], ys - centres[0][1]) < np.hypot(
        xs - centres[1][0], ys - centres[1][1]
    )
    both = in_a & in_b
    np.testing.assert_array_equal(chosen[both], np.where(nearer_a[both], 0, 1))
    # The area is the union's: 2 x 3600 km2 less the overlap, within the cells' edge.
    areas = grid.cell_areas_km2()
    area, overlap = areas[seen].sum(), areas[both].sum()
    assert area == pytest.approx(2 * 3600 - overlap, rel=0.02)


def test_a_cloud_is_filled_by_the_other_tile(two_zones):
    grid = RegionGrid.covering([fp for _, _, fp in two_zones], cell=600)
    mosaic = NearestMosaic(grid, 2)
    for index, (crs, transform, fp) in enumerate(two_zones):
        bands = np.zeros((2, SIZE, SIZE), np.float32)
        bands[index] = 1.0
        if index == 1:
            bands[:, :, :40] = 255  # B's western part (the overlap) under a cloud: nodata
        window = window_of(grid, fp)
        assert window is not None
        mosaic.add(warp(bands, crs, transform, grid, window),
                   window, fp.centre_in(grid.crs))  # fmt: skip
    chosen = mosaic.chosen
    in_a = _inside(grid, two_zones[0][2], PIXEL)
    assert (chosen[in_a] == 0).all()  # A fills B's clouded overlap
    assert (chosen >= 0).sum() > 0


def test_a_crs_that_cannot_hold_the_region(two_zones):
    footprints = [fp for _, _, fp in two_zones]
    with pytest.raises(InputError, match="geographic .degrees.; the grid needs a projected"):
        RegionGrid.covering(footprints, crs="EPSG:4326")
    with pytest.raises(InputError, match="--crs EPSG:99999: not a CRS"):
        RegionGrid.covering(footprints, crs="EPSG:99999")
    with pytest.raises(InputError, match="cannot hold the region"):
        RegionGrid.covering(footprints, cell=0.001)


def test_a_window_warp_is_the_whole_grid_warp_cut_out():
    """Warping a scene map (600 m cells, as the pipeline's) into its window of the grid gives
    what a whole-grid warp gives there, and nothing of the scene falls outside its window.
    The bands are ramps: GDAL approximates the projection per chunk warped (to 0.125 px),
    so on noise the two differ where the chunks do, while a ramp stays a ramp and an offset
    shows. (The products warp each map on its window cut by a fixed lattice: their values
    never depend on the block size, test_region_blocks.py.)"""
    crs, transform, fp = _scene(12.35, 48.0, 32633)
    transform = Affine(600.0, 0, transform.c, 0, -600.0, transform.f)
    fp = Footprint(crs, (transform.c, transform.f - SIZE * 600.0,
                         transform.c + SIZE * 600.0, transform.f))  # fmt: skip
    far = _scene(10.0, 47.0, 32632)[2]
    grid = RegionGrid.covering([fp, far], cell=600)
    ramp = np.arange(SIZE, dtype=np.float32) / SIZE
    bands = np.stack([np.tile(ramp, (SIZE, 1)), np.tile(ramp[:, None], (1, SIZE))])
    everywhere = window_of(grid, Footprint(grid.crs, _grid_bounds(grid)))
    assert everywhere is not None and everywhere.slices == (slice(0, grid.height),
                                                            slice(0, grid.width))  # fmt: skip
    whole = warp(bands, crs, transform, grid, everywhere)
    window = window_of(grid, fp)
    assert window is not None and window.width * window.height < grid.width * grid.height / 2
    part = warp(bands, crs, transform, grid, window)
    rows, cols = window.slices
    both = ~np.isnan(part) & ~np.isnan(whole[:, rows, cols])
    assert both.sum() > 0.9 * (~np.isnan(whole)).sum()
    both = ~np.isnan(part) & ~np.isnan(whole[:, rows, cols])
    assert both.sum() > 0.9 * (~np.isnan(whole)).sum()
    np.testing.assert_allclose(part[both], whole[:, rows, cols][both], atol=1e-3)
    outside = np.ones(whole.shape[1:], bool)
    outside[rows, cols] = False
    assert np.isnan(whole[:, outside]).all()
    assert window_of(grid, Footprint(crs, (0.0, 0.0, 1000.0, 1000.0))) is None  # far away


def _grid_bounds(grid: RegionGrid) -> tuple[float, float, float, float]:
    left, top = grid.transform.c, grid.transform.f
    return left, top - grid.height * grid.cell, left + grid.width * grid.cell, top
