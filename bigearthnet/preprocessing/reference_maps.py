"""reBEN's reference maps (``ARCHIVE/Reference_Maps/``), read for preprocessing.

Each S2 patch of a reBEN archive has ``Reference_Maps/<tile>/<patch_id>/<patch_id>
_reference_map.tif``: CORINE level-3 codes, uint16, nodata 0, 120 x 120 at 10 m on the
patch's own grid. Preprocessing stores it as 19-class indices (``constants.corine_to_19``;
no label: ``constants.NO_LABEL``) next to the patch's image (:mod:`.assembly`).

A map is placed by its georeferencing, never assumed aligned (:func:`read_map`):

* its CRS must be the patch's, its grid north-up with square pixels of 10 m or a whole
  multiple of it (a 20 m map: each 10 m pixel takes the code of the 20 m pixel it lies in,
  exact for a categorical map), its pixel edges on the patch's 10 m grid, and it must cover
  the whole patch; a larger map gives the patch's window;
* anything else - missing, truncated or unreadable, not integer codes, another CRS, a finer
  or rotated grid, a grid offset from the patch's, a map that leaves part of the patch
  uncovered (e.g. a 60 x 60 map at 10 m, or one shifted by 20 m) - is refused for that
  patch (:class:`MapError`; its reason goes to rejects.csv) and the patch keeps its labels
  without a map. A map is never stored shifted or resampled across grids.

Pixels equal to the file's declared nodata, code 0, codes the 19-class nomenclature drops
and codes that are no CORINE code become no label; the last are counted (the manifest's
``unknown_code_pixels``). A map whose classes differ from its patch's labels is kept,
stripped or dropped with its patch as ``--map-label-mismatch`` says (:func:`decide`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError
from bigearthnet.formats import shard_maps
from bigearthnet.preprocessing.geotiff import Raster, read_part

PIXEL_M = constants.PATCH_METRES / constants.PATCH_SIZE  # the patch's grid: 10 m
_GRID_TOLERANCE = 1e-3  # of a 10 m pixel: 1 cm, far below any real misregistration


class MapError(InputError):
    """One patch's reference map cannot be placed; str(err) is the reason (rejects.csv)."""


@dataclass(frozen=True)
class PatchGrid:
    """Where a patch's 10 m bands are: CRS and upper-left corner (120 x 120 px of 10 m)."""

    crs: str
    ulx: float
    uly: float


@dataclass(frozen=True)
class PlacedMap:
    """A reference map on its patch's grid."""

    map19: np.ndarray  # (120, 120) uint8 19-class indices, NO_LABEL for no label
    unknown_pixels: int  # pixels whose value was no CORINE code (and not nodata)


def read_map(path: str, grid: PatchGrid) -> PlacedMap:
    """The map at ``path`` placed on the patch's ``grid``; MapError with the reason if it
    cannot be (see the module docstring)."""
    name = os.path.basename(path)
    raster = read_part(path, "reference map", MapError)
    if raster.data.dtype.kind not in "iu":
        raise MapError(f"reference map {name} holds {raster.data.dtype}, not integer codes")
    codes = raster.data[_window(raster, grid, name)]
    nodata = (codes == 0) | (codes == raster.nodata if raster.nodata is not None else False)
    unknown = int(np.count_nonzero(~nodata & ~constants.is_corine_code(codes)))
    map19 = constants.corine_to_19(codes)
    map19[nodata] = constants.NO_LABEL
    return PlacedMap(map19, unknown)


def _window(raster: Raster, grid: PatchGrid, name: str) -> tuple:
    """The index (slices, or row and column arrays) of the map's pixels under the patch's
    10 m pixels."""
    if raster.crs != grid.crs:
        raise MapError(f"reference map {name} is on {raster.crs}, its patch on {grid.crs}")
    a, b, c, d, e, f = raster.transform
    if b != 0 or d != 0 or a <= 0 or not math.isclose(-e, a):
        raise MapError(f"reference map {name} is not a north-up grid of square pixels")
    factor = a / PIXEL_M
    if factor < 1 - _GRID_TOLERANCE or not _whole(factor):
        raise MapError(
            f"reference map {name} has {a:g} m pixels: not the patch's {PIXEL_M:g} m or a "
            "multiple of it"
        )
    # The patch's corner in 10 m pixels from the map's: whole numbers, or the grids differ.
    right, down = (grid.ulx - c) / PIXEL_M, (f - grid.uly) / PIXEL_M
    if not (_whole(right) and _whole(down)):
        raise MapError(
            f"reference map {name} is off the patch's {PIXEL_M:g} m grid (its corner is "
            f"{c - grid.ulx:+g} m east, {grid.uly - f:+g} m south of the patch's)"
        )
    k, col0, row0 = round(factor), round(right), round(down)
    height, width = raster.data.shape
    size = constants.PATCH_SIZE
    if col0 < 0 or row0 < 0 or col0 + size > width * k or row0 + size > height * k:
        covered = _overlap(col0, width * k) * _overlap(row0, height * k) / size**2
        raise MapError(
            f"reference map {name} covers {covered:.0%} of its patch ({width}x{height} px of "
            f"{a:g} m, its corner {c - grid.ulx:+g} m east, {grid.uly - f:+g} m south of the "
            "patch's)"
        )
    if k == 1:  # the usual case: a window of the map itself (reBEN: the whole map)
        return np.s_[row0 : row0 + size, col0 : col0 + size]
    return np.ix_((row0 + np.arange(size)) // k, (col0 + np.arange(size)) // k)


def _whole(value: float) -> bool:
    return abs(value - round(value)) <= _GRID_TOLERANCE


def _overlap(start: int, extent: int) -> int:
    """10 m pixels of the patch's [0, 120) that a map spanning [-start, extent - start) covers."""
    return max(0, min(constants.PATCH_SIZE, extent - start) - max(0, -start))


@dataclass(frozen=True)
class Decision:
    """What becomes of one patch's map: stored, or absent with a note for rejects.csv; or
    the whole patch rejected (``drop_patch``, the note its reason)."""

    map19: np.ndarray | None
    note: str = ""
    pixels: np.ndarray | None = None  # the stored map's class counts (shard_maps.class_pixels)
    drop_patch: bool = False
    refused: bool = False  # the map could not be placed (note says why)
    map_only: bool = False  # it holds a class the labels lack
    labels_only: bool = False  # the labels name a class it lacks
    unknown_pixels: int = 0


def decide(path: str, grid: PatchGrid, labels19: np.ndarray, policy: str) -> Decision:
    """Read the map at ``path`` for the patch (``grid``, ``labels19``) and apply the
    ``--map-label-mismatch`` policy (keep, drop-map, drop-patch)."""
    try:
        placed = read_map(path, grid)
    except MapError as err:
        return Decision(None, f"reference map refused, patch kept without it: {err}", refused=True)
    pixels = shard_maps.class_pixels(placed.map19)
    in_map = frozenset(np.flatnonzero(pixels[: shard_maps.NO_LABEL_INDEX]).tolist())
    labelled = frozenset(np.flatnonzero(labels19).tolist())
    extra, lacking = sorted(in_map - labelled), sorted(labelled - in_map)
    outcome = Decision(placed.map19, pixels=pixels, map_only=bool(extra),
                       labels_only=bool(lacking), unknown_pixels=placed.unknown_pixels)  # fmt: skip
    if not (extra or lacking) or policy == "keep":
        return outcome
    why = _disagreement(extra, lacking)
    if policy == "drop-map":
        note = f"reference map dropped (--map-label-mismatch drop-map), patch kept: {why}"
        return Decision(None, note, map_only=bool(extra), labels_only=bool(lacking))
    return Decision(None, f"map and labels disagree (--map-label-mismatch drop-patch): {why}",
                    drop_patch=True, map_only=bool(extra), labels_only=bool(lacking))  # fmt: skip


def _disagreement(extra: list[int], lacking: list[int]) -> str:
    parts = []
    if extra:
        parts.append(f"the map holds {_names(extra)}, the labels lack it")
    if lacking:
        parts.append(f"the labels name {_names(lacking)}, the map lacks it")
    return "; ".join(parts)


def _names(classes: list[int]) -> str:
    return " + ".join(constants.CLASSES_19[k] for k in classes)


@dataclass
class MapTally:
    """One shard's map figures (its sidecar's ``maps``), summed into the manifest's
    ``reference_maps`` by :func:`merge`."""

    patches: int = 0
    class_pixels: list[int] = field(default_factory=lambda: [0] * (shard_maps.NO_LABEL_INDEX + 1))
    refused: int = 0
    map_only: int = 0
    labels_only: int = 0
    mismatched: int = 0
    unknown_code_pixels: int = 0

    def add(self, decision: Decision) -> None:
        """Count one patch's decision (also a dropped patch's disagreement)."""
        self.refused += decision.refused
        self.map_only += decision.map_only
        self.labels_only += decision.labels_only
        self.mismatched += decision.map_only or decision.labels_only
        self.unknown_code_pixels += decision.unknown_pixels
        if decision.pixels is not None:
            self.patches += 1
            self.class_pixels = [int(a + b) for a, b in zip(self.class_pixels, decision.pixels)]


def merge(records: list[dict], policy: str) -> shard_maps.MapStats:
    """The manifest's ``reference_maps`` from the shards' sidecar records (their ``split``
    and ``maps``, a :class:`MapTally` as a dict)."""
    stats = shard_maps.MapStats(mismatch_policy=policy)
    totals = dict.fromkeys(("refused", "map_only", "labels_only", "mismatched"), 0)
    totals["unknown_code_pixels"] = 0
    for record in records:
        tally, split = record["maps"], record["split"]
        stats.patches[split] += tally["patches"]
        stats.class_pixels[split] = [
            a + b for a, b in zip(stats.class_pixels[split], tally["class_pixels"])
        ]
        for key in totals:
            totals[key] += tally[key]
    return shard_maps.MapStats(stats.patches, stats.class_pixels, **totals, mismatch_policy=policy)
