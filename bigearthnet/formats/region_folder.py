"""The folder of a region series (``bigearthnet-map region --out DIR``), in one place: its
layout, who owns it, where a scene's map goes, and how a rebuild replaces the products.

::

    DIR/.bigearthnet-region     the mark of a folder this command made (written first)
    DIR/scenes/                 one map per scene (a cache: reused when made alike)
    DIR/periods/ consistent/ stac/ changes.tif first_change.tif areas.csv transitions.csv
    DIR/consistency.json        written last: its presence says the products are complete
    DIR/region.html             the page
    DIR/.blocks-<digest>/r<row>-c<col>/   a block's share of the products, until combined

The products are computed block by block (each block's folder built under a work name and
renamed whole: present means complete, with its figures in ``stats.json``, a
:class:`BlockStats`), possibly by several processes (``--blocks-only K/N``). The digest names
everything that made them (grid, scene maps, options): blocks of another digest are never
combined. The combining step builds the products in a hidden staging folder and swaps them
in once complete (:func:`bigearthnet.core.swap.swap_entries`: the old ones aside, the new
ones in, ``consistency.json`` last), so a rebuild with other options leaves no product of
the earlier one beside the new ones, and a kill during the swap loses neither set: the
next run into the folder finishes it (:func:`recover`). The blocks go then.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bigearthnet.core.errors import InputError
from bigearthnet.core.folders import claim_folder, remove_folders, work_folder, work_folders
from bigearthnet.core.swap import finish_swap, has_journal, swap_entries
from bigearthnet.core.util import atomic_write_json
from bigearthnet.formats.class_map import sidecars

MARK = ".bigearthnet-region"
SCENES = "scenes"
PERIODS = "periods"
CONSISTENT = "consistent"
STAC = "stac"
CONSISTENCY = "consistency.json"
PAGE = "region.html"
CHANGES, FIRST_CHANGE = "changes.tif", "first_change.tif"
CHANGE_MAPS = (CHANGES, FIRST_CHANGE)
# Everything a products build writes, consistency.json aside (it is written last): the
# change maps with the sidecars of a map of categories (category names, QGIS style).
PRODUCTS = (
    PERIODS,
    CONSISTENT,
    STAC,
    *(str(p) for name in CHANGE_MAPS for p in (name, *sidecars(Path(name)))),
    "areas.csv",
    "transitions.csv",
)
STAGING_PREFIX = ".products-"  # then the builder's PID, host and a token
BLOCKS_PREFIX = ".blocks-"  # then the digest of what made them
BLOCK_STATS = "stats.json"
# A block's files: its period probabilities (one file per period, a band per class), the
# raw and consistent top classes (a band per period), the change count and first change.
RAW, SMOOTH, CHANGE_BANDS = "raw.tif", "consistent.tif", "changes.tif"
log = logging.getLogger("bigearthnet")


class RegionFolderError(InputError):
    """``--out`` is not a region folder this command may write."""


def cell_centres(
    transform: Sequence[float], row: int, col: int, height: int, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """(height, width) x and y of the centres of the cells ``row..``, ``col..`` of a north-up
    grid whose affine ``transform`` is (a, b, c, d, e, f): the one formula of the grid's
    cells, for the products and for every reader of ``consistency.json``."""
    a, _, left, _, e, top = transform[:6]
    xs = left + (col + np.arange(width) + 0.5) * a
    ys = top + (row + np.arange(height) + 0.5) * e
    x, y = np.meshgrid(xs, ys)
    return x, y


@dataclass(frozen=True)
class GridRecord:
    """The series' grid: ``width`` x ``height`` cells of ``cell_m`` in ``crs``."""

    crs: str
    cell_m: float
    width: int
    height: int
    transform: tuple[float, ...]  # affine (a, b, c, d, e, f), north up: e = -a

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        """(left, bottom, right, top) in ``crs``."""
        a, _, left, _, e, top = self.transform[:6]
        return left, top + self.height * e, left + self.width * a, top

    def centres(self, row: int = 0, rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """x and y of the centres of the grid's cells (of ``rows`` rows from ``row``)."""
        rows = self.height - row if rows is None else rows
        return cell_centres(self.transform, row, 0, rows, self.width)


@dataclass(frozen=True)
class SceneEntry:
    """A scene of the series, and how its values were read (its map's radiometry tags)."""

    path: str  # relative to the region folder (core.display.linked_path); older: absolute
    tile: str
    date: str  # ISO
    radiometry: str = ""  # the reflectance offset applied, and the evidence for it
    radiometry_metadata: str = ""  # what the metadata said ("none": nothing)
    radiometry_pixels: str = ""  # what the pixels said ("DN +0: ...", "silent: ...")
    radiometry_won: str = ""  # which decided: metadata, pixels or --boa-offset
    product: str = ""  # the product's name, where its files state it


@dataclass(frozen=True)
class SkippedScene:
    path: str  # as SceneEntry.path, once in consistency.json
    reason: str


@dataclass(frozen=True)
class ConsistencyRecord:
    """``consistency.json``: what a complete series is made of and how consistent it is."""

    periods: tuple[str, ...]
    period: str  # scene-date, month, season or year
    grid: GridRecord
    persistence: float
    scenes: tuple[SceneEntry, ...]
    skipped: tuple[SkippedScene, ...]
    cells_observed: dict[str, int]  # period -> cells seen
    flicker_rate: dict[str, float]  # raw, consistent
    lasting_changes: int
    cells_ever_observed: int
    observed_km2: float  # ground km² of the cells ever observed
    # Scenes whose pixels overruled their metadata (or disputed --boa-offset), and products
    # met twice read two ways: the series says where it mixes readings.
    radiometry_notes: tuple[str, ...] = ()
    # The counts flicker_rate comes from: A -> B -> A triples (raw, consistent) of all the
    # triples of three consecutive observed periods (empty in records before blocks).
    flicker_triples: dict[str, int] = field(default_factory=dict)
    triples: int = 0


def write_consistency(out: Path, record: ConsistencyRecord) -> None:
    atomic_write_json(out / CONSISTENCY, asdict(record))


def read_consistency(out: Path) -> ConsistencyRecord:
    """The record of the complete series in ``out``; InputError naming the file when it is
    missing (no complete series) or damaged."""
    path = out / CONSISTENCY
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return ConsistencyRecord(
            **{
                **raw,
                "periods": tuple(raw["periods"]),
                "grid": GridRecord(**{**raw["grid"], "transform": tuple(raw["grid"]["transform"])}),
                "scenes": tuple(SceneEntry(**entry) for entry in raw["scenes"]),
                "skipped": tuple(SkippedScene(**entry) for entry in raw["skipped"]),
                "radiometry_notes": tuple(raw.get("radiometry_notes", ())),
            }
        )
    except FileNotFoundError:
        raise InputError(f"{path}: missing: no complete region series in {out}") from None
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise InputError(f"{path}: not a region series record ({err})") from None


def claim(out: Path) -> None:
    """Make ``out`` a region folder, or check that it is one: absent, empty, or marked by an
    earlier run of this command. Anything else (a file, an unrelated folder) is refused,
    naming it, before anything is written: a region run replaces its products wholesale."""
    claim_folder(out, mark=MARK, made_by="bigearthnet-map region", error=RegionFolderError)
    recover(out)  # a killed build's swap finished before anything reads the folder


def scene_map_path(out: Path, scene: str | Path, tile: str, date: dt.date) -> Path:
    """Where the map of ``scene`` goes: named by tile and date, and by its resolved path, so
    that two scenes whose folders share a name never share a map."""
    digest = hashlib.sha256(str(Path(scene).resolve()).encode()).hexdigest()[:10]
    return out / SCENES / f"{tile}_{date:%Y%m%d}_{digest}.tif"


def staging(out: Path) -> Path:
    """A fresh hidden folder in ``out`` to build the products in, once what earlier builds
    left is settled (:func:`recover`)."""
    recover(out)
    folder = work_folder(out, STAGING_PREFIX)
    folder.mkdir()
    return folder


def recover(out: Path) -> None:
    """What an earlier build left in ``out`` when the process that built it is gone (a
    killed build) or is this one (a build that failed): a swap it began is finished (its
    products are whole: :func:`~bigearthnet.core.swap.finish_swap`), a staging folder it
    was still building is removed. One a live process may still be building stays."""
    stale = [w for w in work_folders(out, STAGING_PREFIX) if w.writer_gone() or w.of_this_process()]
    for begun in [w for w in stale if has_journal(w.path)]:
        stale.remove(begun)
        mine = work_folder(out, STAGING_PREFIX)
        try:
            os.rename(begun.path, mine)  # now this run's alone to finish
        except FileNotFoundError:  # another run claimed it first
            continue
        finish_swap(out, mine)
        log.warning("%s: finished the products' swap a killed build began (%s)", out,
                    begun.path.name)  # fmt: skip
    if stale:
        log.warning("%s: removed the products of an interrupted build: %s", out,
                    remove_folders(stale))  # fmt: skip


def publish(out: Path, staged: Path, record: ConsistencyRecord) -> None:
    """Swap the complete products of ``staged`` in for the earlier ones, the one way
    (:func:`~bigearthnet.core.swap.swap_entries`): ``consistency.json`` goes aside first and
    comes back, the new one, last; nothing old is removed before every new product is in."""
    write_consistency(staged, record)
    swap_entries(out, staged, PRODUCTS, last=CONSISTENCY)


def is_complete(out: Path) -> bool:
    return (out / CONSISTENCY).is_file()


# Areas are summed as whole numbers of 2^-30 km² (a thousandth of a m²): sums of integers
# do not depend on how the grid was cut into blocks and chunks, float sums would.
AREA_UNITS_PER_KM2 = 1 << 30


@dataclass(frozen=True)
class BlockStats:
    """``stats.json`` of a block: where it lies in the grid and the counts the products'
    tables and figures are summed from: cells, and areas in :data:`AREA_UNITS_PER_KM2`."""

    row: int
    col: int
    height: int
    width: int
    observed: bool  # any cell observed; a block never observed has no files but this one
    cells_observed: list[int]  # per period
    raw_cells: list[list[int]]  # [period][class]
    raw_area: list[list[int]]
    consistent_cells: list[list[int]]
    consistent_area: list[list[int]]
    # Per pair of periods (consecutive, then first -> last): "from * classes + to" -> count.
    transition_cells: list[dict[str, int]]
    transition_area: list[dict[str, int]]
    flicker_raw: int
    flicker_consistent: int
    triples: int
    lasting_changes: int
    cells_ever_observed: int
    observed_area: int
    most_changes: int


def blocks_folder(out: Path, digest: str) -> Path:
    """``out``'s folder of blocks made as ``digest`` says, made if absent; folders of other
    digests (another grid, other scene maps or options) are removed: never combined."""
    for other in out.glob(f"{BLOCKS_PREFIX}*"):
        if other.name != f"{BLOCKS_PREFIX}{digest}":
            log.warning("%s: removed blocks of an earlier build made otherwise", other)
            shutil.rmtree(other, ignore_errors=True)
    folder = out / f"{BLOCKS_PREFIX}{digest}"
    folder.mkdir(exist_ok=True)
    stale = [w for w in work_folders(folder, "") if w.writer_gone() or w.of_this_process()]
    remove_folders(stale)  # blocks a killed process left half built
    return folder


def remove_blocks(out: Path) -> None:
    for folder in out.glob(f"{BLOCKS_PREFIX}*"):
        shutil.rmtree(folder, ignore_errors=True)


def block_path(folder: Path, row: int, col: int) -> Path:
    return folder / f"r{row}-c{col}"


def block_done(folder: Path, row: int, col: int) -> bool:
    return (block_path(folder, row, col) / BLOCK_STATS).is_file()


@contextlib.contextmanager
def building_block(folder: Path, row: int, col: int) -> Iterator[Path]:
    """A work folder for the block at ``row``, ``col``; renamed to its name once the body
    has written it whole (another process that finished it first wins: the two are the
    same)."""
    work = work_folder(folder, "")
    work.mkdir()
    try:
        yield work
        try:
            os.rename(work, block_path(folder, row, col))
        except OSError:
            if not block_done(folder, row, col):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def write_block_stats(folder: Path, stats: BlockStats) -> None:
    atomic_write_json(folder / BLOCK_STATS, asdict(stats))


def read_block_stats(folder: Path, row: int, col: int) -> BlockStats:
    path = block_path(folder, row, col) / BLOCK_STATS
    try:
        return BlockStats(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as err:
        raise InputError(f"{path}: not a block's figures ({err})") from None
