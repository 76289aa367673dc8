"""How well a region series matches the truth of a synthetic region (``bigearthnet-synth
region``): the figures the region series is held to, on the series' own grid.

The truth is a class per LAEA block and date. A grid cell wholly inside one block has one
true class; a cell straddling two blocks holds both and has none, so every figure is over
*interior* cells (the cell and the windows it was mapped from inside one block) that the
series observed:

* ``agreement``: per period, the share of observed interior cells whose raw period map has
  the true class of that date (``scene-date`` periods: one date each);
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
from bigearthnet.formats.region_folder import GridRecord, read_consistency
from bigearthnet.synthetic.region import read_truth


@dataclass(frozen=True)
class SeriesScore:
    agreement: list[float]  # per period
    flicker_removed: float
    lasting_recall: float
    lasting_cells: int
    stable_changed: float
    stable_cells: int

    def summary(self) -> str:
        return (
            f"agreement {min(self.agreement):.3f} (worst period), flicker removed "
            f"{self.flicker_removed:.0%}, lasting changes kept {self.lasting_recall:.0%} of "
            f"{self.lasting_cells} cells, stable cells changed {self.stable_changed:.1%} of "
            f"{self.stable_cells}"
        )


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
    row, col, interior = _cells_in_blocks(truth, record.grid)
    classes = truth["classes"][:, row, col]  # (T, h, w)
    maps = np.ma.stack([_read(out / "periods" / f"{p}.tif") for p in periods])
    raw, observed = maps.data, ~np.ma.getmaskarray(maps)
    agreement = [
        float((raw[t] == classes[t])[observed[t] & interior].mean()) for t in range(len(periods))
    ]
    rates = record.flicker_rate
    removed = 1.0 - rates["consistent"] / rates["raw"] if rates["raw"] else 1.0
    found = _read(out / "first_change.tif").data.astype(np.int32) - 1  # -1 none
    changed = _read(out / "changes.tif").data
    lasting_at = np.full(row.shape, -1)
    touched = np.zeros(row.shape, bool)
    for event in truth["events"]:
        r, c = event["block"]
        block = (row == r) & (col == c)
        touched |= block
        if event["kind"] == "lasting":
            lasting_at[block] = event["date_index"]
    periods_index = np.arange(len(periods))[:, None, None]
    seen_before = (observed & (periods_index < lasting_at)).any(axis=0)
    seen_after = (observed & (periods_index >= lasting_at)).sum(axis=0) >= 2
    lasting = interior & (lasting_at >= 0) & seen_before & seen_after
    kept = np.abs(found[lasting] - lasting_at[lasting]) <= 1
    stable = interior & ~touched & observed.any(axis=0)
    return SeriesScore(
        agreement=agreement,
        flicker_removed=removed,
        lasting_recall=float(kept.mean()) if lasting.any() else 1.0,
        lasting_cells=int(lasting.sum()),
        stable_changed=float((changed[stable] > 0).mean()) if stable.any() else 0.0,
        stable_cells=int(stable.sum()),
    )


def _cells_in_blocks(truth: dict, grid: GridRecord) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each grid cell's block (row, col) and whether the cell lies wholly inside it, with a
    cell's width of margin for the windows it was mapped from."""
    x, y = grid.centres()
    size = truth["block_m"]
    fcol = (x - truth["left"]) / size
    frow = (truth["top"] - y) / size
    col, row = np.floor(fcol).astype(int), np.floor(frow).astype(int)
    inside = (col >= 0) & (col < truth["cols"]) & (row >= 0) & (row < truth["rows"])
    margin = grid.cell_m / size
    fx, fy = fcol - col, frow - row
    interior = inside & (fx > margin) & (fx < 1 - margin) & (fy > margin) & (fy < 1 - margin)
    return row.clip(0, truth["rows"] - 1), col.clip(0, truth["cols"] - 1), interior


def _read(path: Path) -> np.ma.MaskedArray:
    """Band 1, its nodata cells masked."""
    import rasterio

    with rasterio.open(path) as src:
        return src.read(1, masked=True)
