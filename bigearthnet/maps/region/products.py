"""The products of a region series, built from its scene maps on one grid, block by block
(:mod:`.blocks`), and combined:

* per period ``P`` (in time order): ``periods/P.tif`` (COG, top class with the colour table
  and category names) and ``periods/P.tif.probabilities.tif``: the period's observations
  combined. Each acquisition date's scenes are put on the grid (:mod:`.grid`: nearest tile
  centre where tiles overlap); the period's probabilities are the mean over its dates of
  the cells observed (masked clouds and nodata are not observations);
  ``consistent/P.tif``: the smoothed series (:mod:`.series`), unobserved periods bridged;
* once: ``changes.tif`` (class changes per cell in the smoothed series, over its observed
  periods), ``first_change.tif`` (1 + the index of the period of the first lasting change;
  0 none; the period labels in its tags), ``areas.csv`` (km² per class per period, raw and
  smoothed), ``transitions.csv`` (km² per from -> to class between consecutive periods and
  first -> last, smoothed), a STAC collection with an item per period (``stac/``,
  :mod:`.catalog`), and ``consistency.json``, written last: its presence says the
  products are complete.

Each map is a COG copied from a mosaic of the blocks' files (:class:`~bigearthnet.formats.cog
.Mosaic`), and each table and figure is a sum of the blocks' counts: memory is one block's
whatever the region's size. ``share`` computes one process's share of the blocks and stops
(a Slurm array task); the step without it computes what is missing and combines.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from bigearthnet.core.display import linked_path, linked_text
from bigearthnet.core.util import write_csv
from bigearthnet.formats import region_folder
from bigearthnet.formats.class_map import linked_tags, write_categories, write_class_map
from bigearthnet.formats.cog import Mosaic, Part
from bigearthnet.formats.qgis_style import StyleEntry
from bigearthnet.formats.region_folder import (
    AREA_UNITS_PER_KM2,
    CHANGE_BANDS,
    CHANGES,
    CONSISTENT,
    FIRST_CHANGE,
    PERIODS,
    RAW,
    SMOOTH,
    BlockStats,
    ConsistencyRecord,
    SceneEntry,
    SkippedScene,
)
from bigearthnet.maps import radiometry
from bigearthnet.maps.preview import UNCHANGED, sampled_colours
from bigearthnet.maps.region.blocks import compute_block, probabilities_file, transition_pairs
from bigearthnet.maps.region.catalog import write_collection
from bigearthnet.maps.region.plan import SceneMap, SeriesPlan

__all__ = ["SceneMap", "build_products"]
log = logging.getLogger("bigearthnet")


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


def build_products(
    out: Path,
    scenes: list[SceneMap],
    *,
    period: str,
    crs: str,
    cell: float,
    persistence: float,
    block_size: int,
    tags: dict,
    skipped: list[SkippedScene],
    share: tuple[int, int] | None = None,
) -> ConsistencyRecord | None:
    """Every product of the series, built aside and swapped into ``out`` once complete
    (:func:`~bigearthnet.formats.region_folder.publish`); returns the consistency record.
    With ``share`` (K, N): only that share of the blocks, kept for the combining step
    (None). ``tags`` (what made the series) name the run as the maps will lie, in
    ``out``."""
    plan = SeriesPlan.of(scenes, period=period, crs=crs, cell=cell, persistence=persistence,
                         block_size=block_size)  # fmt: skip
    folder = region_folder.blocks_folder(out, plan.digest)
    mine = plan.blocks(share)
    todo = [b for b in mine if not region_folder.block_done(folder, b.row, b.col)]
    for block in todo:
        compute_block(plan, block, folder)
    what = "every block" if share is None else f"share {share[0]}/{share[1]}"
    log.info("%s: %d block(s) of %d cells a side, on a grid of %d x %d cells: %d computed, "
             "%d reused", what, len(mine), plan.block_size, plan.grid.width, plan.grid.height,
             len(todo), len(mine) - len(todo))  # fmt: skip
    if share is not None:
        return None
    stats = [region_folder.read_block_stats(folder, b.row, b.col) for b in plan.blocks()]
    staged = region_folder.staging(out)
    in_folders, at_top = linked_tags(tags, out / PERIODS), linked_tags(tags, out)
    _write_maps(staged, plan, folder, stats, in_folders, at_top)
    labels, classes = list(plan.labels), list(plan.classes)
    write_csv(staged / "areas.csv", ("period", "series", "class", "cells", "km2"),
              area_rows(stats, labels, classes))  # fmt: skip
    write_csv(staged / "transitions.csv",
              ("from_period", "to_period", "from_class", "to_class", "cells", "km2"),
              transition_rows(stats, labels, classes))  # fmt: skip
    entries = {s.path: scene_entry(s, out) for s in scenes}
    flicker = {"raw": sum(s.flicker_raw for s in stats),
               "consistent": sum(s.flicker_consistent for s in stats)}  # fmt: skip
    triples = sum(s.triples for s in stats)
    record = ConsistencyRecord(
        periods=tuple(labels),
        period=period,
        grid=plan.grid.record(),
        persistence=persistence,
        scenes=tuple(entries.values()),
        skipped=tuple(skipped_entry(entry, out) for entry in skipped),
        cells_observed={
            label: sum(s.cells_observed[t] for s in stats) for t, label in enumerate(labels)
        },  # fmt: skip
        flicker_rate={kind: n / triples if triples else 0.0 for kind, n in flicker.items()},
        lasting_changes=sum(s.lasting_changes for s in stats),
        cells_ever_observed=sum(s.cells_ever_observed for s in stats),
        observed_km2=sum(s.observed_area for s in stats) / AREA_UNITS_PER_KM2,
        radiometry_notes=radiometry_notes(list(entries.values())),
        flicker_triples=flicker,
        triples=triples,
    )
    provenance = {k: v for k, v in at_top.items() if k in ("model", "run_dir", "checkpoint")}
    groups = [{m.scene.path for date in p for m in date} for p in plan.periods]
    scenes_of = {label: [entries[s.path] for s in scenes if s.path in members]
                 for label, members in zip(labels, groups)}  # fmt: skip
    write_collection(staged, plan.grid, scenes_of, classes, provenance)
    region_folder.publish(out, staged, record)
    region_folder.remove_blocks(out)
    return record


def _write_maps(staged: Path, plan: SeriesPlan, folder: Path, stats: list[BlockStats],
                in_folders: dict, at_top: dict) -> None:  # fmt: skip
    """Every map of the series, a COG copied from a mosaic of the observed blocks' files."""
    grid, classes = plan.grid, list(plan.classes)
    seen = [s for s in stats if s.observed]

    def mosaic(name: str, bands: list[tuple[int, ...]]) -> Mosaic:
        parts = tuple(Part(region_folder.block_path(folder, s.row, s.col) / name, band, s.row,
                           s.col, s.height, s.width) for s in seen for band in bands)  # fmt: skip
        return Mosaic(len(bands[0]), grid.height, grid.width, "uint8", parts)

    where = {"crs": grid.crs, "transform": grid.transform}
    (staged / PERIODS).mkdir()
    (staged / CONSISTENT).mkdir()
    every_class = tuple(range(1, len(classes) + 1))
    for t, label in enumerate(plan.labels):
        write_class_map(staged / PERIODS / f"{label}.tif", mosaic(RAW, [(t + 1,)]), where,
                        classes, in_folders,
                        probabilities=mosaic(probabilities_file(t), [every_class]))  # fmt: skip
        write_class_map(staged / CONSISTENT / f"{label}.tif", mosaic(SMOOTH, [(t + 1,)]),
                        where, classes, in_folders)  # fmt: skip
    most = max((s.most_changes for s in seen), default=0)
    ramp = [UNCHANGED, *sampled_colours("YlOrRd", most)]
    counts = [StyleEntry(n, colour, f"{n} class change{'s' if n != 1 else ''}")
              for n, colour in enumerate(ramp)]  # fmt: skip
    firsts = [StyleEntry(0, UNCHANGED, "no lasting change")] + [
        StyleEntry(t + 1, colour, f"first lasting change: {label}")
        for t, (label, colour) in enumerate(zip(plan.labels,
                                                sampled_colours("viridis", len(plan.labels))))
    ]  # fmt: skip
    write_categories(staged / CHANGES, mosaic(CHANGE_BANDS, [(1,)]), where, at_top, counts,
                     "class changes in the consistent series")  # fmt: skip
    write_categories(staged / FIRST_CHANGE, mosaic(CHANGE_BANDS, [(2,)]), where,
                     dict(at_top, periods=json.dumps(list(plan.labels))), firsts,
                     "1 + index of the period of the first lasting change, 0 none")  # fmt: skip


def area_rows(stats: list[BlockStats], periods: list[str], classes: Sequence[str]) -> list[list]:
    """period, series, class, cells, km2 for each period and class present, raw then
    consistent: the blocks' counts summed."""
    rows = []
    for kind in ("raw", "consistent"):
        cells = np.sum([getattr(s, f"{kind}_cells") for s in stats], axis=0, dtype=np.int64)
        area = np.sum([getattr(s, f"{kind}_area") for s in stats], axis=0, dtype=np.int64)
        for t, period in enumerate(periods):
            for value in np.flatnonzero(cells[t]):
                rows.append([period, kind, classes[value], int(cells[t][value]),
                             _km2(int(area[t][value]))])  # fmt: skip
    return rows


def transition_rows(
    stats: list[BlockStats], periods: list[str], classes: Sequence[str]
) -> list[list]:
    """from_period, to_period, from_class, to_class, cells, km2 of every class pair between
    consecutive periods and between the first and the last, cells known in both."""
    rows = []
    for p, (a, b) in enumerate(transition_pairs(len(periods))):
        cells: dict[int, int] = {}
        area: dict[int, int] = {}
        for s in stats:
            for key, n in s.transition_cells[p].items():
                cells[int(key)] = cells.get(int(key), 0) + n
                area[int(key)] = area.get(int(key), 0) + s.transition_area[p][key]
        for code in sorted(cells):
            src, dst = divmod(code, len(classes))
            rows.append([periods[a], periods[b], classes[src], classes[dst], cells[code],
                         _km2(area[code])])  # fmt: skip
    return rows


def _km2(units: int) -> str:
    return f"{units / AREA_UNITS_PER_KM2:.4f}"
