"""How well a region series matches the truth of a synthetic region (``bigearthnet-synth
region``): the figures the region series is held to, on the series' own grid, at any cell
(600 m, or 10 m from the dense head's maps). Every figure is a ratio of counts summed over
the grid, read a band of rows at a time (a 10 m series of a large region never in memory
whole).

The truth is a class per LAEA block and date, with small features inside some blocks
(:mod:`.region_truth`). Per cell and period, against the class at the cell's centre:

* ``pixel_agreement``: per period, the share of observed cells whose raw period map has
  the true class there (``scene-date`` periods: one date each), every cell counted;
* ``boundary_agreement`` and ``inside_agreement``: the same over all periods, for the cells
  near a class boundary (their centre within :data:`BOUNDARY_M` + half a cell of one: the
  cell comes within 30 m of it) and for the others, inside the parcels;
* ``flicker_raw`` and ``flicker_consistent``: A -> B -> A triples over the observed
  periods of the raw and the smoothed series, of all triples (``consistency.json``'s
  counts).

And the figures of the smoother, over *interior* cells only (the cell and the windows it
was mapped from inside one block: a cell straddling two blocks holds both):

* ``agreement``: per period, the share of observed interior cells whose raw period map has
  the block's class of that date;
* ``flicker_removed``: 1 - flicker rate of the consistent series / of the raw one;
* ``lasting_recall``: of the interior cells of blocks that change lastingly, observed
  before the change and in at least two periods from it on (a change seen once cannot be
  told from a look-alike), the share whose ``first_change.tif`` names a period within one
  of the true one;
* ``stable_changed``: of the observed interior cells of blocks with no event, the share
  the consistent series changes at all (``changes.tif`` > 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bigearthnet.core.errors import InputError
from bigearthnet.formats.region_folder import ConsistencyRecord, GridRecord, read_consistency
from bigearthnet.synthetic.region import read_truth
from bigearthnet.synthetic.region_truth import cover_at

BOUNDARY_M = 30.0  # a cell coming this close to a class boundary is a boundary cell
ROWS_AT_ONCE = 256  # grid rows scored at a time


@dataclass(frozen=True)
class SeriesScore:
    agreement: list[float]  # per period, interior cells, the block's class
    flicker_removed: float
    lasting_recall: float
    lasting_cells: int
    stable_changed: float
    stable_cells: int
    pixel_agreement: list[float]  # per period, every observed cell, the class at its centre
    boundary_agreement: float
    boundary_cells: int  # cell-periods observed near a boundary
    inside_agreement: float
    inside_cells: int
    flicker_raw: float
    flicker_consistent: float

    def summary(self) -> str:
        return (
            f"agreement {min(self.agreement):.3f} (worst period), flicker removed "
            f"{self.flicker_removed:.0%}, lasting changes kept {self.lasting_recall:.0%} of "
            f"{self.lasting_cells} cells, stable cells changed {self.stable_changed:.1%} of "
            f"{self.stable_cells}; every cell: agreement {min(self.pixel_agreement):.3f} "
            f"(worst period), {self.boundary_agreement:.3f} within {BOUNDARY_M:g} m of a "
            f"boundary ({self.boundary_cells} cell-periods), {self.inside_agreement:.3f} "
            f"inside ({self.inside_cells}); flicker {self.flicker_raw:.2%} raw, "
            f"{self.flicker_consistent:.2%} consistent"
        )


@dataclass
class _Tally:
    """Counts summed over the grid's bands of rows."""

    periods: int

    def __post_init__(self) -> None:
        zeros = np.zeros(self.periods, np.int64)
        self.interior_agree, self.interior_seen = zeros.copy(), zeros.copy()
        self.pixel_agree, self.pixel_seen = zeros.copy(), zeros.copy()
        self.near = [0, 0]  # agreeing, observed
        self.inside = [0, 0]
        self.lasting = [0, 0]  # kept, counted
        self.stable = [0, 0]  # changed, counted


def score_series(region: Path, out: Path) -> SeriesScore:
    """Score the products in ``out`` (``bigearthnet-map region --period scene-date``) against
    the truth of the synthetic ``region``."""
    if not (region / "truth.json").is_file():
        raise InputError(f"{region / 'truth.json'}: missing (not a synthetic region)")
    truth = read_truth(region)
    record = read_consistency(out)
    # Each scene's path in its form (a .zarr, a STAC item's .json); older truths name folders.
    ours = {(region / scene.get("path", f"scenes/{scene['name']}")).resolve()
            for scene in truth["scenes"]}  # fmt: skip
    # Paths relative to the series folder (absolute in older records: ``out / path`` is it).
    foreign = [s.path for s in record.scenes if (out / s.path).resolve() not in ours]
    if foreign:
        raise InputError(f"{out}: maps {foreign[0]}, not a scene of {region} "
                         f"({len(foreign)} such)")  # fmt: skip
    periods = record.periods
    if len(periods) != len(truth["dates"]):
        raise InputError(f"{out}: {len(periods)} periods, the truth has {len(truth['dates'])} "
                         "dates (map with --period scene-date)")  # fmt: skip
    tally = _Tally(len(periods))
    for row in range(0, record.grid.height, ROWS_AT_ONCE):
        _score_rows(truth, record, out, row, min(ROWS_AT_ONCE, record.grid.height - row), tally)
    return _score(tally, record)


def _score_rows(truth: dict, record: ConsistencyRecord, out: Path, row: int, rows: int,
                tally: _Tally) -> None:  # fmt: skip
    """Add the grid rows ``row`` .. ``row + rows`` to ``tally``."""
    grid = record.grid
    x, y = grid.centres(row, rows)
    block_row, block_col, interior = _cells_in_blocks(truth, grid, x, y)
    periods = record.periods
    maps = np.ma.stack([_read(out / "periods" / f"{p}.tif", row, rows) for p in periods])
    raw, observed = maps.data, ~np.ma.getmaskarray(maps)
    near_within = BOUNDARY_M + grid.cell_m / 2
    for t in range(len(periods)):
        agree = raw[t] == truth["classes"][t][block_row, block_col]
        tally.interior_agree[t] += int(agree[observed[t] & interior].sum())
        tally.interior_seen[t] += int((observed[t] & interior).sum())
        classes, distance = cover_at(truth, x, y, t)
        right, seen = raw[t] == classes, observed[t]
        tally.pixel_agree[t] += int(right[seen].sum())
        tally.pixel_seen[t] += int(seen.sum())
        near = distance <= near_within
        for counts, where in ((tally.near, seen & near), (tally.inside, seen & ~near)):
            counts[0] += int(right[where].sum())
            counts[1] += int(where.sum())
    found = _read(out / "first_change.tif", row, rows).data.astype(np.int32) - 1  # -1 none
    changed = _read(out / "changes.tif", row, rows).data
    lasting_at = np.full(x.shape, -1)
    touched = np.zeros(x.shape, bool)
    for event in truth["events"]:
        r, c = event["block"]
        block = (block_row == r) & (block_col == c)
        touched |= block
        if event["kind"] == "lasting":
            lasting_at[block] = event["date_index"]
    index = np.arange(len(periods))[:, None, None]
    seen_before = (observed & (index < lasting_at)).any(axis=0)
    seen_after = (observed & (index >= lasting_at)).sum(axis=0) >= 2
    lasting = interior & (lasting_at >= 0) & seen_before & seen_after
    tally.lasting[0] += int((np.abs(found[lasting] - lasting_at[lasting]) <= 1).sum())
    tally.lasting[1] += int(lasting.sum())
    stable = interior & ~touched & observed.any(axis=0)
    tally.stable[0] += int((changed[stable] > 0).sum())
    tally.stable[1] += int(stable.sum())


def _score(tally: _Tally, record: ConsistencyRecord) -> SeriesScore:
    def share(part: int | np.integer, whole: int | np.integer, empty: float) -> float:
        return float(part / whole) if whole else empty

    if record.triples:  # the counts; records before blocks kept the rates only
        raw = record.flicker_triples["raw"] / record.triples
        consistent = record.flicker_triples["consistent"] / record.triples
    else:
        raw, consistent = record.flicker_rate["raw"], record.flicker_rate["consistent"]
    return SeriesScore(
        agreement=[share(a, n, 1.0) for a, n in zip(tally.interior_agree, tally.interior_seen)],
        flicker_removed=1.0 - consistent / raw if raw else 1.0,
        lasting_recall=share(tally.lasting[0], tally.lasting[1], 1.0),
        lasting_cells=tally.lasting[1],
        stable_changed=share(tally.stable[0], tally.stable[1], 0.0),
        stable_cells=tally.stable[1],
        pixel_agreement=[share(a, n, 1.0) for a, n in zip(tally.pixel_agree, tally.pixel_seen)],
        boundary_agreement=share(tally.near[0], tally.near[1], 1.0),
        boundary_cells=tally.near[1],
        inside_agreement=share(tally.inside[0], tally.inside[1], 1.0),
        inside_cells=tally.inside[1],
        flicker_raw=raw,
        flicker_consistent=consistent,
    )


def _cells_in_blocks(
    truth: dict, grid: GridRecord, x: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each cell's block (row, col) and whether the cell lies wholly inside it, with a
    cell's width of margin for the windows it was mapped from."""
    size = truth["block_m"]
    fcol = (x - truth["left"]) / size
    frow = (truth["top"] - y) / size
    col, row = np.floor(fcol).astype(int), np.floor(frow).astype(int)
    inside = (col >= 0) & (col < truth["cols"]) & (row >= 0) & (row < truth["rows"])
    margin = grid.cell_m / size
    fx, fy = fcol - col, frow - row
    interior = inside & (fx > margin) & (fx < 1 - margin) & (fy > margin) & (fy < 1 - margin)
    return row.clip(0, truth["rows"] - 1), col.clip(0, truth["cols"] - 1), interior


def _read(path: Path, row: int, rows: int) -> np.ma.MaskedArray:
    """Rows of band 1, its nodata cells masked."""
    import rasterio
    from rasterio.windows import Window

    with rasterio.open(path) as src:
        return src.read(1, masked=True, window=Window(0, row, src.width, rows))
