"""One grid for a region whose tiles lie in several UTM zones: the output grid (default the
European LAEA grid, EPSG:3035, in cells of ``--cell`` metres), scene maps reprojected onto
it, and the rule that takes each cell from one scene where tiles overlap.

* **Grid**: the union of the scenes' footprints in the output CRS, its corners snapped to
  whole cells of the CRS's origin, so two runs over overlapping regions share cell edges.
* **Blocks**: the products are computed in square blocks of the grid
  (:meth:`RegionGrid.blocks`), so memory is a block's whatever the region's size.
* **Reprojection** (``rasterio.warp.reproject``): class probabilities bilinearly, or
  area-weighted (the mean of the source cells in each grid cell) where the scene map's cells
  are at most half the grid's (10 m maps into a 600 m grid), a class or a mask by nearest
  neighbour. A cell no source pixel covers is NaN; area-weighted, so is a cell more than
  half nodata (as a scene map's own cells). A scene map is read by window, the block's.
* **Finer than the maps**: a cell under :data:`FINEST_CELL_MAP_M` (the finest cell map a
  classifier makes, 6 px windows) needs scene maps at least that fine (the dense head's
  10 m maps): a 600 m map spread over 10 m cells invents detail it never saw
  (:func:`check_map_cell`). At 60 m and more any scene map is taken, as before.
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
from bigearthnet.formats.class_map import NODATA
from bigearthnet.formats.region_folder import GridRecord, cell_centres

DEFAULT_CRS = "EPSG:3035"
DEFAULT_CELL_M = 600.0
CELL_STEP_M = 10.0  # every cell is a whole number of Sentinel-2's 10 m pixels
FINEST_CELL_MAP_M = 60.0  # a classifier's finest scene map: 120 px windows at a 6 px stride
AREA_WEIGHTED_BELOW = 0.5  # scene map cell / grid cell at or under which cells are averaged
WARP_TILE = 256  # cells: scene maps are warped a tile of this lattice at a time (warp_map)
AREA_BLOCK_CELLS = 1_000_000  # cells whose areal scale is computed at once
# Europe (~5,000 km) at 10 m; more is a CRS that cannot hold the region. The products are
# computed in blocks, so memory does not limit the grid: the disk does (checked before).
MAX_CELLS = 500_000 * 500_000


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

    def cell_areas_km2(self, window: GridWindow | None = None) -> np.ndarray:
        """(height, width) float32 km² of every cell of the grid (or of ``window``) on the
        ground: the nominal cell over the CRS's areal scale at its centre. That scale is 1
        in an equal-area CRS (the default LAEA); elsewhere it is not (Web Mercator's is
        1/cos² of the latitude: 2.2 at 48° N), so areas are never the nominal cell times a
        count."""
        window = window or self.whole
        proj = Proj(self.crs)
        areas = np.empty((window.height, window.width), np.float32)
        rows = max(1, AREA_BLOCK_CELLS // max(window.width, 1))
        for row in range(0, window.height, rows):
            part = GridWindow(window.row + row, window.col, min(rows, window.height - row),
                              window.width)  # fmt: skip
            lon, lat = proj(*self.centres(part), inverse=True)
            scale = proj.get_factors(lon, lat).areal_scale
            areas[row : row + part.height] = self.cell * self.cell / 1e6 / np.asarray(scale)
        return areas

    @property
    def whole(self) -> GridWindow:
        return GridWindow(0, 0, self.height, self.width)

    def blocks(self, size: int) -> list[GridWindow]:
        """The grid cut into blocks of ``size`` x ``size`` cells (smaller at the right and
        bottom edges), row by row."""
        return [
            GridWindow(row, col, min(size, self.height - row), min(size, self.width - col))
            for row in range(0, self.height, size)
            for col in range(0, self.width, size)
        ]

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
        window = window or self.whole
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

    @property
    def cells(self) -> int:
        return self.height * self.width

    def within(self, outer: GridWindow) -> tuple[slice, slice]:
        """This window's slices in an array of ``outer`` (which holds it)."""
        row, col = self.row - outer.row, self.col - outer.col
        return slice(row, row + self.height), slice(col, col + self.width)

    def intersection(self, other: GridWindow) -> GridWindow | None:
        row, col = max(self.row, other.row), max(self.col, other.col)
        end_row = min(self.row + self.height, other.row + other.height)
        end_col = min(self.col + self.width, other.col + other.width)
        if end_row <= row or end_col <= col:
            return None
        return GridWindow(row, col, end_row - row, end_col - col)


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


def check_map_cell(map_cell: float, cell: float, what: str) -> None:
    """InputError when a scene map of ``map_cell`` metres cannot feed a grid of ``cell``:
    under :data:`FINEST_CELL_MAP_M` the maps must be at least as fine as the grid."""
    if cell < FINEST_CELL_MAP_M and map_cell > cell:
        raise InputError(
            f"--cell {cell:g}: {what} has cells of {map_cell:g} m (a classifier's cell map); "
            f"cells under {FINEST_CELL_MAP_M:g} m need scene maps as fine, the 10 m maps of a "
            f"model with the dense head: map with such a model, or take --cell "
            f"{FINEST_CELL_MAP_M:g} or more"
        )


def map_resampling(map_cell: float, cell: float) -> Resampling:
    """How a scene map's probabilities go onto grid cells of ``cell`` metres: averaged over
    each cell's area where the map's cells are at most half as large (bilinear would take
    4 of the 3,600 10 m pixels of a 600 m cell), else bilinearly."""
    if map_cell <= AREA_WEIGHTED_BELOW * cell:
        return Resampling.average
    return Resampling.bilinear


def warp_map(src, grid: RegionGrid, window: GridWindow, resampling: Resampling) -> np.ndarray:
    """The bands of the open class-map file ``src`` (stored values, :data:`NODATA` where
    unseen) -> (B, window height, window width) float32 on ``window`` of ``grid``, NaN where
    unseen. GDAL reads only the source window it needs, so a 10 m scene map costs the
    block's share of it; area-weighted, a cell more than half unseen is unseen.

    Warped a tile of :data:`WARP_TILE` cells of the grid's own lattice at a time: GDAL
    approximates the projection along each chunk's rows (to 0.125 px), so a cell's value
    would depend on the chunk it was warped in, and with it on the block size. On a fixed
    lattice it does not: any block made of whole tiles gives the same values."""
    import rasterio

    out = np.full((src.count, window.height, window.width), np.nan, np.float32)
    bands = rasterio.band(src, list(range(1, src.count + 1)))
    for tile in _lattice(window):
        part = np.full((src.count, tile.height, tile.width), np.nan, np.float32)
        reproject(
            source=bands,
            destination=part,
            src_nodata=float(NODATA),
            dst_transform=grid.transform @ Affine.translation(tile.col, tile.row),
            dst_crs=grid.crs,
            dst_nodata=np.nan,
            resampling=resampling,
            NODATA_VALUES_PCT_THRESHOLD=50,
        )
        out[(slice(None), *tile.within(window))] = part
    return out


def _lattice(window: GridWindow) -> list[GridWindow]:
    """``window`` cut by the grid's lattice of :data:`WARP_TILE` cells."""
    tiles = []
    for row in range(window.row - window.row % WARP_TILE, window.row + window.height, WARP_TILE):
        for col in range(window.col - window.col % WARP_TILE, window.col + window.width,
                         WARP_TILE):  # fmt: skip
            tile = window.intersection(GridWindow(row, col, WARP_TILE, WARP_TILE))
            if tile is not None:
                tiles.append(tile)
    return tiles


class NearestMosaic:
    """The overlap rule for one acquisition date, one scene at a time: each cell holds the
    values of the observing scene (not NaN there) whose footprint centre is nearest the
    cell's centre; the first added wins a tie. Over ``block`` of the grid (default: all of
    it). Memory: the mosaic and one scene's window."""

    def __init__(self, grid: RegionGrid, bands: int, block: GridWindow | None = None) -> None:
        self.grid = grid
        self.block = block or grid.whole
        shape = (self.block.height, self.block.width)
        self.values = np.full((bands, *shape), np.nan, np.float32)
        self.chosen = np.full(shape, -1, np.int32)  # scene index
        self.scenes = 0  # scenes offered so far; the next one's index
        self._distance = np.full(shape, np.inf)

    def add(self, values: np.ndarray, window: GridWindow, centre: tuple[float, float]) -> None:
        """Offer the next scene's (B, h, w) ``values`` on ``window`` (inside the block); its
        footprint's centre in the grid's CRS."""
        index, self.scenes = self.scenes, self.scenes + 1
        rows, cols = window.within(self.block)
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
