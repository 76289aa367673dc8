"""The products of a region series, built from its scene maps on one grid.

Per period ``P`` (in time order):

* ``periods/P.tif`` (COG, top class with the colour table and category names) and
  ``periods/P.tif.probabilities.tif``: the period's observations combined. Each acquisition
  date's scenes are put on the grid (:mod:`.grid`: nearest tile centre where tiles
  overlap); the period's probabilities are the mean over its dates of the cells observed
  (masked clouds and nodata are not observations);
* ``consistent/P.tif``: the smoothed series (:mod:`.series`), unobserved periods bridged.

And once: ``changes.tif`` (class changes per cell in the smoothed series, over its observed
periods), ``first_change.tif`` (1 + the index of the period of the first lasting change; 0
none; the period labels in its tags), ``areas.csv`` (km² per class per period, raw and
smoothed), ``transitions.csv`` (km² per from -> to class between consecutive periods and
first -> last, smoothed), a STAC collection with an item per period (``stac/``,
:mod:`.catalog`), and ``consistency.json``, written last: its presence says the
products are complete. Periods are built one at a time and the series is decoded in blocks
of grid rows from the periods' probability COGs, so memory holds one period's scores, or
one block of rows of every period, never the whole stack.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bigearthnet.core.display import linked_path, linked_text
from bigearthnet.core.util import write_csv
from bigearthnet.formats import region_folder
from bigearthnet.formats.class_map import (
    NODATA,
    linked_tags,
    probabilities_path,
    read_classes,
    scaled,
    unscaled,
    write_categories,
    write_class_map,
)
from bigearthnet.formats.qgis_style import StyleEntry
from bigearthnet.formats.region_folder import (
    CHANGES,
    CONSISTENT,
    FIRST_CHANGE,
    PERIODS,
    ConsistencyRecord,
    SceneEntry,
    SkippedScene,
)
from bigearthnet.maps import radiometry
from bigearthnet.maps.preview import UNCHANGED, sampled_colours
from bigearthnet.maps.region import series
from bigearthnet.maps.region.catalog import write_collection
from bigearthnet.maps.region.grid import (
    Footprint,
    NearestMosaic,
    RegionGrid,
    warp,
    window_of,
)
from bigearthnet.maps.region.periods import Acquisition, group_by_period

# Values (periods x classes x cells) decoded at a time: ~64 MB a float32 copy, a few copies
# live while a block decodes, whatever the region's size.
BLOCK_VALUES = 1 << 24


@dataclass(frozen=True)
class SceneMap:
    """A mapped scene: its acquisition and its map file (probabilities beside it)."""

    acquisition: Acquisition
    path: Path

    @property
    def probabilities(self) -> Path:
        return probabilities_path(self.path)


def memory_needed(grid: RegionGrid, classes: int, periods: int) -> int:
    """Bytes the products step holds at its peak: a period's float32 sums, mosaic, mean and
    scaled copy (4 arrays of classes x cells), the raw and smoothed labels (int16 per period
    and cell) and the change counts."""
    cells = grid.width * grid.height
    return cells * (16 * classes + 4 * periods + 16)


def footprint(scene: SceneMap) -> Footprint:
    import rasterio

    with rasterio.open(scene.path) as src:
        return Footprint(str(src.crs), tuple(src.bounds))  # type: ignore[arg-type]


def scene_entry(scene: SceneMap, out: Path) -> SceneEntry:
    """The scene's row of the scene table, its path relative to the region folder ``out``,
    with how its values were read: its map's tags (what made it:
    :func:`~bigearthnet.maps.scene.mapping.scene_map_tags`)."""
    import rasterio

    with rasterio.open(scene.path) as src:
        tags = src.tags()
    acq = scene.acquisition
    read_as = {key: tags.get(key, "") for key in (*radiometry.TAGS, "product")}
    return SceneEntry(linked_path(acq.path, out), acq.tile, acq.date.isoformat(), **read_as)


def skipped_entry(skipped: SkippedScene, out: Path) -> SkippedScene:
    """A skipped scene as the region folder ``out`` keeps it: its path, and every path in
    its reason, relative to ``out`` (no folder of this machine)."""
    return SkippedScene(linked_path(skipped.path, out), linked_text(skipped.reason, out))


def radiometry_notes(entries: Sequence[SceneEntry]) -> tuple[str, ...]:
    """Where the series mixes readings: scenes whose pixels spoke against their metadata or
    ``--boa-offset``, and a product met twice with two offsets applied."""
    notes = [f"{e.path}: {radiometry.dispute(asdict(e))}" for e in entries
             if radiometry.disputed(asdict(e))]  # fmt: skip
    for product in sorted({e.product for e in entries if e.product}):
        met = [e for e in entries if e.product == product]
        if len({e.radiometry.split(" (")[0] for e in met}) > 1:
            read = "; ".join(f"{e.path}: {e.radiometry}" for e in met)
            notes.append(f"product {product} met {len(met)} times, read two ways: {read}")
    return tuple(notes)


def scene_classes(scene: SceneMap) -> list[str]:
    import rasterio

    with rasterio.open(scene.probabilities) as src:
        return read_classes(src.tags(), scene.probabilities)


def period_scores(
    scenes: list[SceneMap],
    grid: RegionGrid,
    classes: int,
    footprint_of: dict[Path, Footprint],
) -> np.ndarray:
    """(C, height, width) mean probabilities of the scenes' dates, NaN where unobserved.
    Each scene is warped into its own window of the grid and folded into its date's mosaic
    at once: memory holds the period's sums, one date's mosaic and one scene."""
    import rasterio

    total = np.zeros((classes, grid.height, grid.width), np.float32)
    count = np.zeros((grid.height, grid.width), np.int32)
    for date in sorted({s.acquisition.date for s in scenes}):
        mosaic = NearestMosaic(grid, classes)
        for scene in (s for s in scenes if s.acquisition.date == date):
            fp = footprint_of[scene.path]
            window = window_of(grid, fp)
            assert window is not None  # the grid covers every scene's footprint
            with rasterio.open(scene.probabilities) as src:
                stored = src.read()
                crs, transform = str(src.crs), src.transform
            probabilities = unscaled(stored)
            values = np.where(np.isnan(probabilities), NODATA, probabilities)
            observed = warp(values, crs, transform, grid, window, nodata=NODATA,
                            categorical=False)  # fmt: skip
            mosaic.add(observed, window, fp.centre_in(grid.crs))
        seen = mosaic.chosen >= 0
        total[:, seen] += mosaic.values[:, seen]
        count[seen] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / count
    mean[:, count == 0] = np.nan
    return mean


def top_class(scores: np.ndarray) -> np.ndarray:
    """(C, h, w) scores -> (h, w) uint8 top class, NODATA where unobserved."""
    observed = ~np.isnan(scores).any(axis=0)
    return np.where(observed, np.nan_to_num(scores, nan=-1).argmax(axis=0), NODATA).astype(np.uint8)


def write_period(
    folder: Path, label: str, scores: np.ndarray, grid: RegionGrid, classes: Sequence[str],
    tags: dict,
) -> np.ndarray:  # fmt: skip
    """``folder/label.tif`` and its probabilities (companion first); returns the top class."""
    folder.mkdir(parents=True, exist_ok=True)
    labels = top_class(scores)
    write_class_map(folder / f"{label}.tif", labels, _grid(grid), classes, tags,
                    probabilities=scaled(scores))  # fmt: skip
    return labels


def area_rows(
    labels: np.ndarray, periods: list[str], classes: Sequence[str], areas: np.ndarray, kind: str
) -> list[list]:
    """period, series, class, cells, km2 for each period and class present; ``areas`` holds
    each cell's km² (:meth:`RegionGrid.cell_areas_km2`)."""
    rows = []
    for t, period in enumerate(periods):
        known = labels[t] >= 0
        values = labels[t][known]
        cells = np.bincount(values, minlength=len(classes))
        km2 = np.bincount(values, weights=areas[known], minlength=len(classes))
        for value in np.flatnonzero(cells):
            rows.append([period, kind, classes[value], int(cells[value]), f"{km2[value]:.4f}"])
    return rows


def transition_rows(
    labels: np.ndarray, periods: list[str], classes: Sequence[str], areas: np.ndarray
) -> list[list]:
    """from_period, to_period, from_class, to_class, cells, km2 of every class pair between
    consecutive periods and between the first and the last, cells known in both."""
    pairs = [(t, t + 1) for t in range(len(periods) - 1)]
    if len(periods) > 2:
        pairs.append((0, len(periods) - 1))
    rows = []
    size = len(classes) * len(classes)
    for a, b in pairs:
        known = (labels[a] >= 0) & (labels[b] >= 0)
        codes = labels[a][known].astype(np.int64) * len(classes) + labels[b][known]
        cells = np.bincount(codes, minlength=size)
        km2 = np.bincount(codes, weights=areas[known], minlength=size)
        for code in np.flatnonzero(cells):
            src, dst = divmod(int(code), len(classes))
            rows.append([periods[a], periods[b], classes[src], classes[dst], int(cells[code]),
                         f"{km2[code]:.4f}"])  # fmt: skip
    return rows


def build_products(
    out: Path,
    scenes: list[SceneMap],
    *,
    period: str,
    crs: str,
    cell: float,
    persistence: float,
    tags: dict,
    skipped: list[SkippedScene],
) -> ConsistencyRecord:
    """Every product of the series, built aside and swapped into ``out`` once complete
    (:func:`~bigearthnet.formats.region_folder.publish`); returns the consistency record.
    ``tags`` (what made the series) name the run as the maps will lie, in ``out``."""
    staged = region_folder.staging(out)
    in_folders, at_top = linked_tags(tags, out / PERIODS), linked_tags(tags, out)
    classes = scene_classes(scenes[0])
    footprints = {s.path: footprint(s) for s in scenes}  # each map's grid read once
    grid = RegionGrid.covering(list(footprints.values()), crs, cell)
    groups = group_by_period([s.acquisition for s in scenes], period)
    labels_of = list(groups)
    raw = np.empty((len(groups), grid.height, grid.width), np.int16)
    for t, (label, acquisitions) in enumerate(groups.items()):
        members = [s for s in scenes if s.acquisition in acquisitions]
        scores = period_scores(members, grid, len(classes), footprints)
        top = write_period(staged / PERIODS, label, scores, grid, classes, in_folders)
        raw[t] = np.where(top == NODATA, -1, top)
        del scores  # one period's scores at a time: the series reads them back in blocks
    smooth = _decode([probabilities_path(staged / PERIODS / f"{label}.tif") for label in labels_of],
                     grid, len(classes), persistence)  # fmt: skip
    (staged / CONSISTENT).mkdir()
    for t, label in enumerate(labels_of):
        labels = np.where(smooth[t] < 0, NODATA, smooth[t]).astype(np.uint8)
        write_class_map(staged / CONSISTENT / f"{label}.tif", labels, _grid(grid), classes,
                        in_folders)  # fmt: skip
    observed = raw >= 0
    flat = (len(groups), grid.height * grid.width)
    raw_c = series.consistency(raw.reshape(flat), observed.reshape(flat))
    smooth_c = series.consistency(smooth.reshape(flat), observed.reshape(flat))
    ever = observed.any(axis=0)
    _write_change_maps(staged, grid, smooth_c, ever, labels_of, at_top)
    areas = grid.cell_areas_km2()
    write_csv(staged / "areas.csv", ("period", "series", "class", "cells", "km2"),
              area_rows(raw, labels_of, classes, areas, "raw")
              + area_rows(smooth, labels_of, classes, areas, "consistent"))  # fmt: skip
    write_csv(staged / "transitions.csv",
              ("from_period", "to_period", "from_class", "to_class", "cells", "km2"),
              transition_rows(smooth, labels_of, classes, areas))  # fmt: skip
    entries = {s.path: scene_entry(s, out) for s in scenes}
    record = ConsistencyRecord(
        periods=tuple(labels_of),
        period=period,
        grid=grid.record(),
        persistence=persistence,
        scenes=tuple(entries.values()),
        skipped=tuple(skipped_entry(entry, out) for entry in skipped),
        cells_observed={label: int(observed[t].sum()) for t, label in enumerate(labels_of)},
        flicker_rate={"raw": raw_c.flicker_rate, "consistent": smooth_c.flicker_rate},
        lasting_changes=int((smooth_c.first_lasting >= 0).sum()),
        cells_ever_observed=int(ever.sum()),
        observed_km2=float(areas[ever].sum(dtype=np.float64)),
        radiometry_notes=radiometry_notes(list(entries.values())),
    )
    provenance = {k: v for k, v in at_top.items() if k in ("model", "run_dir", "checkpoint")}
    scenes_of = {label: [entries[s.path] for s in scenes if s.acquisition in members]
                 for label, members in groups.items()}  # fmt: skip
    write_collection(staged, grid, scenes_of, classes, provenance)
    region_folder.publish(out, staged, record)
    return record


def _decode(
    probabilities: list[Path], grid: RegionGrid, classes: int, persistence: float
) -> np.ndarray:
    """(T, h, w) smoothed labels, -1 where never observed, decoded in blocks of grid rows
    from the periods' probability COGs: memory holds one block of every period, and the
    series is what the published probabilities give."""
    periods = len(probabilities)
    labels = np.empty((periods, grid.height, grid.width), np.int16)
    step = max(1, BLOCK_VALUES // (periods * classes * grid.width))
    for row in range(0, grid.height, step):
        rows = min(step, grid.height - row)
        block = np.stack([_read_rows(path, row, rows) for path in probabilities])  # T,C,r,w
        scores = unscaled(block)
        cells = scores.transpose(0, 2, 3, 1).reshape(periods, rows * grid.width, classes)
        decoded = series.viterbi(cells.astype(np.float32, copy=False), persistence)
        labels[:, row : row + rows] = decoded.reshape(periods, rows, grid.width)
    return labels


def _read_rows(path: Path, row: int, rows: int) -> np.ndarray:
    """Rows of a COG, the file closed at once: GDAL keeps the decoded tiles of an open file
    (a 512 x 512 tile of every class each), so holding every period open costs far more
    than the rows read (measured: 76 MB for 8 periods of 16 x 15 cells)."""
    import rasterio
    from rasterio.windows import Window

    with rasterio.open(path) as src:
        return src.read(window=Window(0, row, src.width, rows))


def _write_change_maps(out, grid, smooth_c, ever, periods, tags) -> None:
    """``changes.tif`` and ``first_change.tif``, each a map of categories with its style."""
    changes = np.where(ever, np.minimum(smooth_c.changes.reshape(ever.shape), 254), NODATA)
    first = np.where(ever, smooth_c.first_lasting.reshape(ever.shape) + 1, NODATA)
    most = int(changes[ever].max()) if ever.any() else 0
    ramp = [UNCHANGED, *sampled_colours("YlOrRd", most)]
    counts = [StyleEntry(n, colour, f"{n} class change{'s' if n != 1 else ''}")
              for n, colour in enumerate(ramp)]  # fmt: skip
    firsts = [StyleEntry(0, UNCHANGED, "no lasting change")] + [
        StyleEntry(t + 1, colour, f"first lasting change: {label}")
        for t, (label, colour) in enumerate(zip(periods, sampled_colours("viridis", len(periods))))
    ]
    write_categories(out / CHANGES, changes, _grid(grid), tags, counts,
                     "class changes in the consistent series")  # fmt: skip
    write_categories(out / FIRST_CHANGE, first, _grid(grid),
                     dict(tags, periods=json.dumps(periods)), firsts,
                     "1 + index of the period of the first lasting change, 0 none")  # fmt: skip


def _grid(grid: RegionGrid) -> dict:
    return {"crs": grid.crs, "transform": grid.transform}
