"""A block of a region series' grid, computed on its own: every period's mosaic, the
smoothed series, its changes and the counts the tables are summed from. Memory is one
block's (:func:`block_memory`), whatever the region's size, so a 10 m grid of a country
computes as a 600 m one does, a block at a time, and blocks can be shared out among
processes (``--blocks-only K/N``).

Per period ``P`` (in time order), each date's scene maps are warped into the block (each
map read by the block's window: :func:`~.grid.warp_map`), the nearest tile centre taken
where tiles overlap (:class:`~.grid.NearestMosaic`), and the period's probabilities are the
mean over its dates of the cells observed. The block's period probabilities and top class
go to its folder; the series is then decoded in chunks of the block's rows from those
files (:data:`BLOCK_VALUES` at a time), so memory holds one period's scores, or one chunk
of every period, never the block's whole stack.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rasterio.transform import Affine
from rasterio.windows import Window

from bigearthnet.formats import region_folder
from bigearthnet.formats.class_map import NODATA, PROB_SCALE, scaled, unscaled
from bigearthnet.formats.cog import open_part
from bigearthnet.formats.region_folder import (
    AREA_UNITS_PER_KM2,
    CHANGE_BANDS,
    RAW,
    SMOOTH,
    BlockStats,
)
from bigearthnet.maps.region import series
from bigearthnet.maps.region.grid import GridWindow, NearestMosaic, warp_map
from bigearthnet.maps.region.plan import MapOnGrid, SeriesPlan

# Values (periods x classes x cells) decoded at a time: ~64 MB a float32 copy, a few copies
# live while a chunk decodes, whatever the region's size.
BLOCK_VALUES = 1 << 24
# Bytes a decoded value costs at the peak (scores, emissions, posterior, back pointers) and
# GDAL's own buffers (the warper's chunk, the block cache, capped while COGs are copied).
DECODE_BYTES, GDAL_BYTES = 24, 192 << 20


def probabilities_file(t: int) -> str:
    return f"probabilities-{t}.tif"


def block_memory(block_size: int, classes: int, periods: int) -> int:
    """Bytes computing a block of ``block_size`` x ``block_size`` cells holds at its peak:
    a period's float32 sums, one date's mosaic, a scene's warped window and the mean (4
    arrays of classes x cells, and the scaled copy), the mosaic's distances and choices;
    or a decoded chunk of every period; plus GDAL's buffers."""
    cells = block_size * block_size
    mosaic = cells * (17 * classes + 48)
    decode = max(BLOCK_VALUES, periods * classes * block_size) * DECODE_BYTES
    return max(mosaic, decode) + GDAL_BYTES


def products_disk(plan_cells: int, classes: int, periods: int) -> int:
    """Bytes the products of ``plan_cells`` grid cells take on disk at the peak: the blocks'
    files and the COGs made of them (a byte per class and period for the probabilities, a
    byte per period for each of the raw and consistent maps, two for the change maps),
    at :data:`DEFLATE_RATIO`."""
    per_cell = periods * (classes + 2) + 2
    return int(2 * plan_cells * per_cell / DEFLATE_RATIO)


# Size stored / size raw under DEFLATE, the least measured on the products of synthetic
# series (600 m and 10 m cells; class maps compress far more, probabilities least).
DEFLATE_RATIO = 2.0


def compute_block(plan: SeriesPlan, block: GridWindow, folder: Path) -> BlockStats:
    """Compute ``block`` of ``plan`` into ``folder``'s folder of blocks; its figures."""
    maps = [m for m in plan.maps if m.window.intersection(block) is not None]
    with region_folder.building_block(folder, block.row, block.col) as work:
        if maps:
            _periods(plan, block, work)
            stats = _series(plan, block, work)
        else:  # no scene reaches it: no files, nothing observed
            stats = _Counts(plan, block).stats(observed=False)
        region_folder.write_block_stats(work, stats)
    return stats


def _grid_of(plan: SeriesPlan, block: GridWindow) -> dict:
    shift = Affine.translation(block.col, block.row)
    return {"crs": plan.grid.crs, "transform": plan.grid.transform @ shift}


def _periods(plan: SeriesPlan, block: GridWindow, work: Path) -> None:
    """Each period's probabilities (a file each) and top class (a band each of RAW)."""
    classes, shape = len(plan.classes), (block.height, block.width)
    grid = _grid_of(plan, block)
    with open_part(work / RAW, (len(plan.periods), *shape), "uint8", grid, NODATA) as raw:
        for t, dates in enumerate(plan.periods):
            scores = period_scores(plan, dates, block)
            raw.write(top_class(scores), t + 1)
            with open_part(work / probabilities_file(t), (classes, *shape), "uint8", grid,
                           NODATA) as dst:  # fmt: skip
                dst.write(scaled(scores))
            del scores  # one period's scores at a time


def period_scores(
    plan: SeriesPlan, dates: tuple[tuple[MapOnGrid, ...], ...], block: GridWindow
) -> np.ndarray:
    """(C, h, w) mean probabilities over a period's ``dates`` on ``block``, NaN where
    unobserved. Each map is warped into its part of the block and folded into its date's
    mosaic at once: memory holds the period's sums, one date's mosaic and one map's part."""
    import rasterio

    classes = len(plan.classes)
    total = np.zeros((classes, block.height, block.width), np.float32)
    count = np.zeros((block.height, block.width), np.int32)
    for maps in dates:
        mosaic = NearestMosaic(plan.grid, classes, block)
        for placed in maps:
            part = placed.window.intersection(block)
            if part is None:
                continue
            with rasterio.open(placed.scene.probabilities) as src:
                stored = warp_map(src, plan.grid, part, placed.resampling)
            mosaic.add(stored / np.float32(PROB_SCALE), part, placed.centre)
        seen = mosaic.chosen >= 0
        total[:, seen] += mosaic.values[:, seen]
        count[seen] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        total /= count
    total[:, count == 0] = np.nan
    return total


def top_class(scores: np.ndarray) -> np.ndarray:
    """(C, h, w) scores -> (h, w) uint8 top class, NODATA where unobserved."""
    observed = ~np.isnan(scores).any(axis=0)
    return np.where(observed, np.nan_to_num(scores, nan=-1).argmax(axis=0), NODATA).astype(np.uint8)


def _series(plan: SeriesPlan, block: GridWindow, work: Path) -> BlockStats:
    """The smoothed series, changes and counts of a block whose periods are in ``work``,
    decoded in chunks of rows from the period files."""
    import rasterio

    periods, classes, width = len(plan.periods), len(plan.classes), block.width
    step = max(1, BLOCK_VALUES // (periods * classes * width))
    counts = _Counts(plan, block)
    grid = _grid_of(plan, block)
    shape = (block.height, width)
    with (
        open_part(work / SMOOTH, (periods, *shape), "uint8", grid, NODATA) as smooth_file,
        open_part(work / CHANGE_BANDS, (2, *shape), "uint8", grid, NODATA) as change_file,
    ):
        for row in range(0, block.height, step):
            rows = min(step, block.height - row)
            window = Window(0, row, width, rows)
            chunk = np.stack([_read(work / probabilities_file(t), window) for t in range(periods)])
            cells = unscaled(chunk).transpose(0, 2, 3, 1).reshape(periods, rows * width, classes)
            smooth = series.viterbi(cells, plan.persistence, exclusive=plan.exclusive)
            del chunk, cells
            with rasterio.open(work / RAW) as src:
                raw = src.read(window=window).reshape(periods, rows * width).astype(np.int16)
            raw[raw == NODATA] = -1
            observed = raw >= 0
            raw_c = series.consistency(raw, observed)
            smooth_c = series.consistency(smooth, observed)
            ever = observed.any(axis=0)
            changes = np.where(ever, np.minimum(smooth_c.changes, 254), NODATA)
            first = np.where(ever, smooth_c.first_lasting + 1, NODATA)
            labels = np.where(smooth < 0, NODATA, smooth).astype(np.uint8)
            smooth_file.write(labels.reshape(periods, rows, width), window=window)
            change_file.write(np.stack([changes, first]).astype(np.uint8).reshape(2, rows, width),
                              window=window)  # fmt: skip
            part = GridWindow(block.row + row, block.col, rows, width)
            areas = plan.grid.cell_areas_km2(part).ravel().astype(np.float64)
            units = np.rint(areas * AREA_UNITS_PER_KM2)  # whole numbers, exact in float64
            counts.add(raw, smooth, units, raw_c, smooth_c)
    return counts.stats(observed=True)


def _read(path: Path, window: Window) -> np.ndarray:
    """Rows of a block's file, closed at once: GDAL keeps the decoded tiles of an open file,
    so holding every period open costs far more than the rows read."""
    import rasterio

    with rasterio.open(path) as src:
        return src.read(window=window)


def transition_pairs(periods: int) -> list[tuple[int, int]]:
    """The pairs of periods transitions.csv has: consecutive ones, then first -> last."""
    pairs = [(t, t + 1) for t in range(periods - 1)]
    if periods > 2:
        pairs.append((0, periods - 1))
    return pairs


class _Counts:
    """The block's figures, summed over its chunks of cells."""

    def __init__(self, plan: SeriesPlan, block: GridWindow) -> None:
        periods, self.classes = len(plan.periods), len(plan.classes)
        self.block = block
        self.pairs = transition_pairs(periods)
        kinds, shape = ("raw", "smooth"), (periods, self.classes)
        self.cells = {kind: np.zeros(shape, np.int64) for kind in kinds}
        self.area = {kind: np.zeros(shape, np.int64) for kind in kinds}
        size = self.classes * self.classes
        self.moves = np.zeros((len(self.pairs), size), np.int64)
        self.moves_area = np.zeros((len(self.pairs), size), np.int64)
        self.observed = np.zeros(periods, np.int64)
        self.flicker = {"raw": 0, "smooth": 0}
        self.triples = self.lasting = self.ever = self.most = self.ever_area = 0

    def add(self, raw, smooth, areas, raw_c, smooth_c) -> None:
        """A chunk: (T, N) raw and smoothed labels (-1 unknown), (N,) areas of its cells in
        whole units (float64: their sums stay exact)."""
        for kind, labels in (("raw", raw), ("smooth", smooth)):
            for t, known in enumerate(labels >= 0):
                values = labels[t][known]
                self.cells[kind][t] += np.bincount(values, minlength=self.classes)
                self.area[kind][t] += _summed(values, areas[known], self.classes)
        for p, (a, b) in enumerate(self.pairs):
            known = (smooth[a] >= 0) & (smooth[b] >= 0)
            codes = smooth[a][known].astype(np.int64) * self.classes + smooth[b][known]
            self.moves[p] += np.bincount(codes, minlength=self.moves.shape[1])
            self.moves_area[p] += _summed(codes, areas[known], self.moves.shape[1])
        observed = raw >= 0
        ever = observed.any(axis=0)
        self.observed += observed.sum(axis=1)
        self.flicker["raw"] += raw_c.flicker_triples
        self.flicker["smooth"] += smooth_c.flicker_triples
        self.triples += raw_c.triples
        self.lasting += int((smooth_c.first_lasting >= 0).sum())
        self.ever += int(ever.sum())
        self.ever_area += int(areas[ever].sum())
        if ever.any():
            self.most = max(self.most, int(np.minimum(smooth_c.changes[ever], 254).max()))

    def stats(self, *, observed: bool) -> BlockStats:
        found = [np.flatnonzero(row) for row in self.moves]  # the pairs' codes met
        moves = [{str(c): int(row[c]) for c in codes} for row, codes in zip(self.moves, found)]
        moves_area = [{str(c): int(row[c]) for c in codes}
                      for row, codes in zip(self.moves_area, found)]  # fmt: skip
        b = self.block
        return BlockStats(
            b.row, b.col, b.height, b.width, observed and self.ever > 0,
            cells_observed=self.observed.tolist(),
            raw_cells=self.cells["raw"].tolist(), raw_area=self.area["raw"].tolist(),
            consistent_cells=self.cells["smooth"].tolist(),
            consistent_area=self.area["smooth"].tolist(),
            transition_cells=moves, transition_area=moves_area,
            flicker_raw=self.flicker["raw"], flicker_consistent=self.flicker["smooth"],
            triples=self.triples, lasting_changes=self.lasting, cells_ever_observed=self.ever,
            observed_area=self.ever_area, most_changes=self.most,
        )  # fmt: skip


def _summed(values: np.ndarray, units: np.ndarray, size: int) -> np.ndarray:
    """Per value 0 .. size - 1, the sum of the whole ``units`` of its cells, exact (below
    2^53 units, 8 million km², per chunk)."""
    return np.bincount(values, weights=units, minlength=size).astype(np.int64)
