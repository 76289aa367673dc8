"""One grid for a region whose tiles lie in several UTM zones: the output grid (default the
European LAEA grid, EPSG:3035, in cells of ``--cell`` metres), scene maps reprojected onto
it, and the rule that takes each cell from one scene where tiles overlap.

* **Grid**: the union of the scenes' footprints in the output CRS, its corners snapped to
  whole cells of the CRS's origin, so two runs over overlapping regions share cell edges.
* **Reprojection** (``rasterio.warp.reproject``): class probabilities bilinearly, a class
  or a mask by nearest neighbour. A cell no source pixel covers is NaN.
* **Overlap rule**: among the scenes of one acquisition date that observe a cell (covered
  and not masked), the cell is taken from the scene whose footprint centre is nearest the
  cell's centre. Every cell some scene observes gets a value (no gap at a seam) and no
  observation is counted twice (tiles of one date overlap by ~5 km: the same pixels).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from pyproj import Proj
from rasterio.crs import CRS
from rasterio.transform import Affine
from rasterio.warp import Resampling, reproject, transform_bounds, transform_geom

from bigearthnet.core.errors import ConfigError, InputError
from bigearthnet.formats.region_folder import GridRecord, cell_centres

DEFAULT_CRS = "EPSG:3035"
DEFAULT_CELL_M = 600.0
AREA_BLOCK_CELLS = 1_000_000  # cells whose areal scale is computed at once
MAX_CELLS = 40_000 * 40_000  # a continent at 100 m; more is a CRS that cannot hold the region


@dataclass(frozen=True)
class Footprint:
    """A scene map's extent: its CRS and bounds (left, bottom, right, top)."""

    crs: str
    bounds: tuple[float, float, float, float]

    def bounds_in(self, crs: str) -> tuple[float, float, float, float]:
        """The bounds in ``crs`` (densified edges); once per footprint and CRS: the grid is
        sized from them and each scene's window cut by them."""
        return _bounds_in(self, crs)

    def outside_area_of(self, crs: str, margin_deg: float = 2.0) -> bool:
        """Whether the footprint's centre lies outside ``crs``'s area of use (widened by
        ``margin_deg``): a scene another CRS should map, or a stray of another region."""
        from pyproj import CRS as ProjCRS

        area = ProjCRS.from_user_input(crs).area_of_use
        if area is None:
            return False
        lon, lat = self.centre_in("EPSG:4326")
        west, south, east, north = area.bounds
        inside_lon = west - margin_deg <= lon <= east + margin_deg
        if west > east:  # an area across the antimeridian
            inside_lon = lon >= west - margin_deg or lon <= east + margin_deg
        return not (inside_lon and south - margin_deg <= lat <= north + margin_deg)

    def centre_in(self, crs: str) -> tuple[float, float]:
        left, bottom, right, top = self.bounds
        point = {"type": "Point", "coordinates": ((left + right) / 2, (bottom + top) / 2)}
        x, y = transform_geom(self.crs, crs, point)["coordinates"]
        return float(x), float(y)


@dataclass(frozen=True)
class RegionGrid:
    """The output grid: ``width`` x ``height`` cells of ``cell`` metres in ``crs``."""

    crs: str
    transform: Affine
    width: int
    height: int

    @property
    def cell(self) -> float:
        return float(self.transform.a)

    def cell_areas_km2(self) -> np.ndarray:
        """(height, width) float32 km² of every cell on the ground: the nominal cell over the
        CRS's areal scale at its centre. That scale is 1 in an equal-area CRS (the default
        LAEA); elsewhere it is not (Web Mercator's is 1/cos² of the latitude: 2.2 at 48° N),
        so areas are never the nominal cell times a count."""
        proj = Proj(self.crs)
        areas = np.empty((self.height, self.width), np.float32)
        rows = max(1, AREA_BLOCK_CELLS // max(self.width, 1))
        for row in range(0, self.height, rows):
            window = GridWindow(row, 0, min(rows, self.height - row), self.width)
            lon, lat = proj(*self.centres(window), inverse=True)
            scale = proj.get_factors(lon, lat).areal_scale
            areas[window.slices] = self.cell * self.cell / 1e6 / np.asarray(scale)
        return areas

    @classmethod
    def covering(
        cls, footprints: list[Footprint], crs: str = DEFAULT_CRS, cell: float = DEFAULT_CELL_M
    ) -> RegionGrid:
        """The grid that holds every footprint; InputError when ``crs`` cannot hold them."""
        if not footprints:
            raise InputError("no scene to make a region of")
        if not cell > 0:
            raise InputError(f"--cell {cell}: must be positive metres")
        _checked_crs(crs)
        boxes = []
        for fp in footprints:
            try:
                box = fp.bounds_in(str(crs))
            except Exception as err:  # PROJ errors come in several kinds
                raise InputError(f"--crs {crs}: cannot hold a scene in {fp.crs} ({err})") from None
            if not all(math.isfinite(v) for v in box):
                raise InputError(f"--crs {crs}: a scene in {fp.crs} falls outside its domain")
            boxes.append(box)
        left = math.floor(min(b[0] for b in boxes) / cell) * cell
        bottom = math.floor(min(b[1] for b in boxes) / cell) * cell
        right = math.ceil(max(b[2] for b in boxes) / cell) * cell
        top = math.ceil(max(b[3] for b in boxes) / cell) * cell
        width, height = round((right - left) / cell), round((top - bottom) / cell)
        if width * height > MAX_CELLS:
            raise InputError(
                f"--crs {crs} --cell {cell:g}: the region needs {width} x {height} cells; "
                "a CRS that cannot hold the region, or a cell too small"
            )
        return cls(str(crs), Affine(cell, 0.0, left, 0.0, -cell, top), width, height)

    def centres(self, window: GridWindow | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(height, width) x and y of every cell's centre, of the grid or of ``window``."""
        window = window or GridWindow(0, 0, self.height, self.width)
        return cell_centres(list(self.transform), window.row, window.col, window.height,
                            window.width)  # fmt: skip

    def record(self) -> GridRecord:
        """The grid as ``consistency.json`` records it."""
        transform = tuple(float(v) for v in list(self.transform)[:6])
        return GridRecord(self.crs, self.cell, self.width, self.height, transform)


@dataclass(frozen=True)
class GridWindow:
    """A rectangle of grid cells: rows ``row`` .. ``row + height``, columns likewise."""

    row: int
    col: int
    height: int
    width: int

    @property
    def slices(self) -> tuple[slice, slice]:
        return slice(self.row, self.row + self.height), slice(self.col, self.col + self.width)


def window_of(grid: RegionGrid, footprint: Footprint) -> GridWindow | None:
    """The grid cells a footprint reaches (its bounds in the grid's CRS, densified, plus a
    cell for the bilinear kernel), or None when it misses the grid."""
    left, bottom, right, top = footprint.bounds_in(grid.crs)
    cell, x0, y0 = grid.cell, grid.transform.c, grid.transform.f
    col0 = max(0, math.floor((left - x0) / cell) - 1)
    col1 = min(grid.width, math.ceil((right - x0) / cell) + 1)
    row0 = max(0, math.floor((y0 - top) / cell) - 1)
    row1 = min(grid.height, math.ceil((y0 - bottom) / cell) + 1)
    if col1 <= col0 or row1 <= row0:
        return None
    return GridWindow(row0, col0, row1 - row0, col1 - col0)


def warp(
    values: np.ndarray,
    src_crs: str,
    src_transform: Affine,
    grid: RegionGrid,
    window: GridWindow,
    *,
    nodata: float,
    categorical: bool,
) -> np.ndarray:
    """(B, H, W) source bands -> (B, window height, window width) float32 on ``window`` of
    ``grid``, NaN where no source pixel (or only ``nodata``) lies. Classes and masks by
    nearest, values bilinearly. Only the window is allocated and warped: a scene costs its
    own footprint, whatever the size of the region."""
    out = np.full((values.shape[0], window.height, window.width), np.nan, np.float32)
    reproject(
        source=values.astype(np.float32),
        destination=out,
        src_transform=src_transform,
        src_crs=src_crs,
        src_nodata=float(nodata),
        dst_transform=grid.transform @ Affine.translation(window.col, window.row),
        dst_crs=grid.crs,
        dst_nodata=np.nan,
        resampling=Resampling.nearest if categorical else Resampling.bilinear,
    )
    return out


class NearestMosaic:
    """The overlap rule for one acquisition date, one scene at a time: each cell holds the
    values of the observing scene (not NaN there) whose footprint centre is nearest the
    cell's centre; the first added wins a tie. Memory: the mosaic and one scene's window."""

    def __init__(self, grid: RegionGrid, bands: int) -> None:
        self.grid = grid
        self.values = np.full((bands, grid.height, grid.width), np.nan, np.float32)
        self.chosen = np.full((grid.height, grid.width), -1, np.int32)  # scene index
        self.scenes = 0  # scenes offered so far; the next one's index
        self._distance = np.full((grid.height, grid.width), np.inf)

    def add(self, values: np.ndarray, window: GridWindow, centre: tuple[float, float]) -> None:
        """Offer the next scene's (B, h, w) ``values`` on ``window``; its footprint's centre
        in the grid's CRS."""
        index, self.scenes = self.scenes, self.scenes + 1
        rows, cols = window.slices
        xs, ys = self.grid.centres(window)
        distance = np.hypot(xs - centre[0], ys - centre[1])
        nearer = ~np.isnan(values).any(axis=0) & (distance < self._distance[rows, cols])
        self._distance[rows, cols][nearer] = distance[nearer]
        self.chosen[rows, cols][nearer] = index
        target = self.values[:, rows, cols]
        target[:, nearer] = values[:, nearer]


@functools.lru_cache(maxsize=4096)
def _bounds_in(footprint: Footprint, crs: str) -> tuple[float, float, float, float]:
    return transform_bounds(footprint.crs, crs, *footprint.bounds, densify_pts=21)


def projected_crs(text: str) -> str:
    """--crs: a CRS that rasterio knows and that is projected (a grid in metres);
    ConfigError otherwise."""
    _checked_crs(text)
    return text


def _checked_crs(crs: str) -> CRS:
    try:
        parsed = CRS.from_user_input(crs)
    except Exception:
        raise ConfigError(f"--crs {crs}: not a CRS (e.g. EPSG:3035)") from None
    if not parsed.is_projected:
        raise ConfigError(
            f"--crs {crs}: geographic (degrees); the grid needs a projected CRS in metres, "
            "e.g. EPSG:3035 (Europe) or a UTM zone"
        )
    return parsed
