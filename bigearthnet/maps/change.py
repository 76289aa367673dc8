"""``bigearthnet-map change``: two scene maps of one place (two dates) -> how the land
cover changed between them, the dynamic land-cover map.

Inputs are maps written by ``bigearthnet-map scene`` (band 1: top class, 255 = nodata; the
class list in the ``classes`` tag; probabilities in ``<map>.probabilities.tif``). Map B is
put on map A's grid with nearest neighbour when the grids differ (same CRS required).

Output ``CHANGE.tif``, a Cloud-Optimized GeoTIFF (uint16) on A's grid:

- ``from * 100 + to`` (0-based class indices) where the top class changed, e.g. 1203: class
  12 became class 3;
- :data:`NO_CHANGE` (0) where it stayed (0 -> 0 is no change too, so 0 is unambiguous);
- :data:`UNCERTAIN` where ``min_prob`` is given and either date's top-class probability is
  below it;
- :data:`CHANGE_NODATA` where either map has no data.

Beside it: ``CHANGE.tif.transitions.csv`` (from, to, cells, km^2 of every transition found,
the stable ones included), ``CHANGE.qml`` (its QGIS style: no change, uncertain and every
transition found as ``from -> to``, in the colours of the preview) and ``CHANGE.png`` (a
preview of the largest transitions). The map is written last.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bigearthnet.core.declare import check_fields, option
from bigearthnet.core.errors import require_probability
from bigearthnet.core.util import first_line, write_csv
from bigearthnet.formats.class_map import (
    NODATA,
    PROB_SCALE,
    classes_tags,
    linked_tags,
    probabilities_path,
    read_classes,
    transitions_path,
)
from bigearthnet.formats.cog import write_cog
from bigearthnet.formats.qgis_style import StyleEntry, write_style
from bigearthnet.maps.patches import MapError
from bigearthnet.maps.preview import UNCHANGED, LegendEntry, sampled_colours, write_preview
from bigearthnet.maps.scene.output import preview_path, require_map_path

CODE_BASE = 100  # from * CODE_BASE + to: readable as two 2-digit class indices
NO_CHANGE = 0
UNCERTAIN = 65534
CHANGE_NODATA = 65535
DISTINCT = 20  # transitions in colours of their own (tab20); the rest share OTHER_CHANGE
UNSURE, OTHER_CHANGE = (150, 150, 150), (120, 0, 0)
TRANSITION_FIELDS = ("from_index", "from_class", "to_index", "to_class", "changed", "cells", "km2")


@dataclass(frozen=True)
class SceneMap:
    """A scene map read back: top class, top-class probability (or None), its grid."""

    path: Path
    top: np.ndarray  # (rows, cols) uint8, NODATA where no data
    confidence: np.ndarray | None  # (rows, cols) float32, NaN where no data
    crs: Any  # rasterio CRS
    transform: Any  # affine.Affine
    classes: list[str]


@dataclass(frozen=True)
class ChangeSummary:
    changed_km2: float
    stable_km2: float
    uncertain_km2: float
    transitions: int  # distinct from -> to pairs with a change


def read_scene_map(path: Path, *, with_confidence: bool) -> SceneMap:
    """Read a ``bigearthnet-map scene`` output; MapError naming the file otherwise."""
    import rasterio

    try:
        with rasterio.open(path) as src:
            top, crs, transform, tags = src.read(1), src.crs, src.transform, src.tags()
    except rasterio.errors.RasterioIOError as err:
        raise MapError(f"{path}: cannot read ({first_line(err)})") from None
    try:
        classes = read_classes(tags, path)
    except ValueError:
        raise MapError(f"{path}: not a map of bigearthnet-map scene (no class list)") from None
    confidence = None
    if with_confidence:
        probabilities = probabilities_path(path)
        if not probabilities.is_file():
            raise MapError(f"{probabilities}: missing (needed for --min-prob)")
        with rasterio.open(probabilities) as src:
            stored = src.read()
        confidence = np.where(stored[0] == NODATA, np.nan, stored.max(axis=0) / PROB_SCALE)
    return SceneMap(path, top, confidence, crs, transform, classes)


def on_grid_of(b: SceneMap, a: SceneMap) -> SceneMap:
    """``b`` on ``a``'s grid (nearest neighbour); MapError when the CRSs differ."""
    if b.crs != a.crs:
        raise MapError(f"{b.path}: CRS {b.crs} differs from {a.path}'s {a.crs}")
    if b.top.shape == a.top.shape and b.transform == a.transform:
        return b
    from rasterio.warp import Resampling, reproject

    def warp(values: np.ndarray, nodata) -> np.ndarray:
        out = np.full(a.top.shape, nodata, dtype=values.dtype)
        reproject(
            values,
            out,
            src_transform=b.transform,
            src_crs=b.crs,
            src_nodata=nodata,
            dst_transform=a.transform,
            dst_crs=a.crs,
            dst_nodata=nodata,
            resampling=Resampling.nearest,
        )
        return out

    confidence = None
    if b.confidence is not None:
        confidence = warp(b.confidence.astype(np.float32), np.nan)
    return SceneMap(b.path, warp(b.top, NODATA), confidence, a.crs, a.transform, b.classes)


def transition_codes(a: SceneMap, b: SceneMap, *, min_prob: float | None) -> np.ndarray:
    """The change raster (uint16) of two maps on one grid."""
    codes = a.top.astype(np.uint16) * CODE_BASE + b.top.astype(np.uint16)
    codes[a.top == b.top] = NO_CHANGE
    if min_prob is not None:
        assert a.confidence is not None and b.confidence is not None
        with np.errstate(invalid="ignore"):
            unsure = (a.confidence < min_prob) | (b.confidence < min_prob)
        codes[unsure] = UNCERTAIN
    codes[(a.top == NODATA) | (b.top == NODATA)] = CHANGE_NODATA
    return codes


def transition_rows(a: SceneMap, b: SceneMap, codes: np.ndarray, *, cell_km2: float) -> list[list]:
    """One row per (from, to) pair found where the change is known, largest first."""
    known = (codes != CHANGE_NODATA) & (codes != UNCERTAIN)
    pairs, cells = np.unique(
        a.top[known].astype(np.int64) * CODE_BASE + b.top[known], return_counts=True
    )
    rows = []
    for pair, count in sorted(zip(pairs, cells), key=lambda pc: -pc[1]):
        source, target = divmod(int(pair), CODE_BASE)
        rows.append(
            [
                source,
                a.classes[source],
                target,
                a.classes[target],
                "yes" if source != target else "no",
                int(count),
                f"{count * cell_km2:.4f}",
            ]
        )
    return rows


@dataclass(frozen=True)
class ChangeOptions:
    """``bigearthnet-map change``: its options, declared once."""

    before: Path = option(help="the map of the earlier date", positional=True, metavar="A.tif")
    after: Path = option(help="the map of the later date", positional=True, metavar="B.tif")
    out: Path = option(help="the change map to write", check=require_map_path,
                       metavar="CHANGE.tif")  # fmt: skip
    min_prob: float | None = option(
        None, "count a cell only where both dates' top-class probability is at least P, in "
        "(0, 1] (reads A.tif.probabilities.tif and B.tif.probabilities.tif); default: every "
        "cell", check=require_probability, metavar="P",
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)


def map_change(opts: ChangeOptions) -> ChangeSummary:
    """Compare two scene maps and write ``opts.out`` with its table and preview."""
    path_a, path_b, out, min_prob = opts.before, opts.after, opts.out, opts.min_prob
    with_confidence = min_prob is not None
    a = read_scene_map(path_a, with_confidence=with_confidence)
    b = read_scene_map(path_b, with_confidence=with_confidence)
    if a.classes != b.classes:
        raise MapError(f"{path_b}: its class list differs from {path_a}'s")
    b = on_grid_of(b, a)
    codes = transition_codes(a, b, min_prob=min_prob)
    cell_km2 = abs(a.transform.a * a.transform.e) / 1e6
    rows = transition_rows(a, b, codes, cell_km2=cell_km2)
    tags = {  # the two maps named relative to this one (linked_tags, below)
        "from_map": str(path_a),
        "to_map": str(path_b),
        "min_prob": "" if min_prob is None else f"{min_prob:g}",
        **classes_tags(a.classes),
        "code": f"from_index * {CODE_BASE} + to_index; {NO_CHANGE} = no change, "
        f"{UNCERTAIN} = below --min-prob, {CHANGE_NODATA} = nodata",
    }

    def describe(dst) -> None:
        dst.set_band_description(1, f"from*{CODE_BASE}+to (0 = no change)")

    out.parent.mkdir(parents=True, exist_ok=True)
    grid = {"crs": a.crs, "transform": a.transform}
    styles = transition_styles(rows)
    write_csv(transitions_path(out), TRANSITION_FIELDS, rows)
    _preview(preview_path(out), codes, rows, styles, transform=a.transform)
    write_style(out, styles)
    write_cog(out, codes[None], grid, linked_tags(tags, out.parent), describe, CHANGE_NODATA)
    changed = sum(int(r[5]) for r in rows if r[4] == "yes")
    stable = sum(int(r[5]) for r in rows if r[4] == "no")
    return ChangeSummary(
        changed_km2=changed * cell_km2,
        stable_km2=stable * cell_km2,
        uncertain_km2=float((codes == UNCERTAIN).sum()) * cell_km2,
        transitions=sum(1 for r in rows if r[4] == "yes"),
    )


def transition_styles(rows: list[list]) -> list[StyleEntry]:
    """The change map's categories: no change (light grey), uncertain (mid grey), and each
    transition found, the 20 largest in distinct colours, the rest dark red."""
    changes = [r for r in rows if r[4] == "yes"]
    colours = sampled_colours("tab20", min(len(changes), DISTINCT))
    styles = [StyleEntry(NO_CHANGE, UNCHANGED, "no change"),
              StyleEntry(UNCERTAIN, UNSURE, "uncertain (below --min-prob)")]  # fmt: skip
    for i, row in enumerate(changes):
        colour = colours[i] if i < DISTINCT else OTHER_CHANGE
        styles.append(StyleEntry(row[0] * CODE_BASE + row[2], colour, f"{row[1]} -> {row[3]}"))
    return styles


def _preview(path: Path, codes: np.ndarray, rows: list[list], styles: list[StyleEntry], *,
             transform) -> None:  # fmt: skip
    """The change map in its style's colours (nodata white), the largest transitions with
    their km² in the legend."""
    rgb = np.full((*codes.shape, 3), 255, dtype=np.uint8)
    for style in styles:
        rgb[codes == style.value] = style.colour
    cell_km2 = abs(transform.a * transform.e) / 1e6
    km2 = {r[0] * CODE_BASE + r[2]: r[5] * cell_km2 for r in rows if r[4] == "yes"}
    legend = [LegendEntry(s.colour, s.label) for s in styles[:2]] + [
        LegendEntry(s.colour, f"{s.label} ({km2[s.value]:,.2f} km²)")
        for s in styles[2 : 2 + DISTINCT]
    ]
    if len(km2) > DISTINCT:
        legend.append(LegendEntry(OTHER_CHANGE, f"{len(km2) - DISTINCT} other transitions"))
    changed = int(np.isin(codes, list(km2)).sum())
    title = f"land-cover change: {changed} changed cells"
    write_preview(path, rgb, transform=transform, title=title, legend=legend)
