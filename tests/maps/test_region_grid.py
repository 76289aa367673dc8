"""A region across two UTM zones on one LAEA grid: scene maps reprojected, overlapping
tiles resolved cell by cell (the nearest tile centre among the scenes that see the cell),
no gap at the seam, nothing counted twice."""

from __future__ import annotations

import numpy as np
import pytest
from rasterio.transform import Affine
from rasterio.warp import transform as transform_points

from bigearthnet.core.errors import InputError
from bigearthnet.maps.region.grid import Footprint, RegionGrid, nearest_observation, warp

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
    observations, centres = [], []
    for index, (crs, transform, fp) in enumerate(two_zones):
        bands = np.zeros((2, SIZE, SIZE), np.float32)
        bands[index] = 1.0  # band i says "from scene i"
        observations.append(warp(bands, crs, transform, grid, nodata=255, categorical=False))
        centres.append(fp.centre_in(grid.crs))
    taken, chosen = nearest_observation(observations, centres, grid)
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
    area = seen.sum() * grid.cell_km2
    overlap = both.sum() * grid.cell_km2
    assert area == pytest.approx(2 * 3600 - overlap, rel=0.02)


def test_a_cloud_is_filled_by_the_other_tile(two_zones):
    grid = RegionGrid.covering([fp for _, _, fp in two_zones], cell=600)
    observations, centres = [], []
    for index, (crs, transform, fp) in enumerate(two_zones):
        bands = np.zeros((2, SIZE, SIZE), np.float32)
        bands[index] = 1.0
        if index == 1:
            bands[:, :, :40] = 255  # B's western part (the overlap) under a cloud: nodata
        observations.append(warp(bands, crs, transform, grid, nodata=255, categorical=False))
        centres.append(fp.centre_in(grid.crs))
    _, chosen = nearest_observation(observations, centres, grid)
    in_a = _inside(grid, two_zones[0][2], PIXEL)
    assert (chosen[in_a] == 0).all()  # A fills B's clouded overlap
    assert (chosen >= 0).sum() > 0


def test_a_crs_that_cannot_hold_the_region(two_zones):
    footprints = [fp for _, _, fp in two_zones]
    with pytest.raises(InputError, match="not a projected CRS"):
        RegionGrid.covering(footprints, crs="EPSG:4326")
    with pytest.raises(InputError, match="not a coordinate reference system"):
        RegionGrid.covering(footprints, crs="EPSG:99999")
    with pytest.raises(InputError, match="cannot hold the region"):
        RegionGrid.covering(footprints, cell=0.001)
