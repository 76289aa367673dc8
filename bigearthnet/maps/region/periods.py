"""The time axis of a region series: each scene's tile and date, and the period it belongs to.

Each scene is identified once (:func:`bigearthnet.maps.inputs.identify`) and its form kept
with it (:attr:`Acquisition.scene`). Tile and date come from what the scene states (its
form's ``tile_and_date``: a STAC item's properties, a Zarr product's metadata, a SAFE's band
files, the standard product name
``S2B_MSIL2A_20200801T100559_N0400_R022_T33UXP_20200801T130116``) or are given in a CSV
(:func:`from_csv`). Every tile is an MGRS tile (``33UXP``) and every date lies in
Sentinel-2's years, from its launch to today: a typo is refused, naming the scene or row,
before any scene is mapped. Periods:

* ``scene-date``: each acquisition date (``2020-08-01``);
* ``month``: ``2020-08``;
* ``season``: meteorological seasons, ``2020-MAM``, ``2020-JJA``, ``2020-SON`` and
  ``2020-DJF`` (December 2020 to February 2021: a winter is named by its December's year);
* ``year``: ``2020``.

A period's label sorts with its start date (:func:`period_start`), so the series is in time
order.
"""

from __future__ import annotations

import csv
import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError
from bigearthnet.formats.s2_layouts import mgrs_tile, named_tile_and_date
from bigearthnet.maps.inputs import MissingScene, SceneForm, identify

Identify = Callable[[str], SceneForm]  # one command's identify: its JSON files parsed once
NO_TILE_AND_DATE = ("no Sentinel-2 L2A product name (S2x_MSIL2A_<date>..._T<tile>_...) "
                    "or metadata to take tile and date from; give them in --scenes-csv "
                    "path,date,tile")  # fmt: skip

PERIODS: tuple[str, ...] = ("scene-date", "month", "season", "year")
SEASONS: dict[int, str] = {
    12: "DJF", 1: "DJF", 2: "DJF", 3: "MAM", 4: "MAM", 5: "MAM",
    6: "JJA", 7: "JJA", 8: "JJA", 9: "SON", 10: "SON", 11: "SON",
}  # fmt: skip
SEASON_START: dict[str, int] = {"DJF": 12, "MAM": 3, "JJA": 6, "SON": 9}


@dataclass(frozen=True)
class Acquisition:
    """One scene of the region: where it is on disk, its MGRS tile and its date; InputError
    naming the scene for a tile that is no MGRS tile or a date outside Sentinel-2's years."""

    path: str
    tile: str  # MGRS tile, e.g. 33UXP
    date: dt.date
    # Its form, identified once; None for a path that is not there: the region skips it,
    # naming it, when its turn to be mapped comes.
    scene: SceneForm | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if mgrs_tile(self.tile) != self.tile:
            raise InputError(f"{self.path}: tile {self.tile!r} is not an MGRS tile (like 33UXP)")
        last = dt.datetime.now(dt.timezone.utc).date() + dt.timedelta(days=1)
        if not constants.SENTINEL2_FIRST_DAY <= self.date <= last:
            raise InputError(
                f"{self.path}: dated {self.date}, outside Sentinel-2's years "
                f"({constants.SENTINEL2_FIRST_DAY} to today)"
            )

    @property
    def utm_zone(self) -> int:
        return int(self.tile[:2])


def of_scene(scene: SceneForm) -> Acquisition:
    """The scene identified, with the tile and date it states (its metadata or product
    name); InputError without."""
    return _acquisition(scene.ref, scene)


def of_path(path: str, identify: Identify = identify) -> Acquisition:
    """The scene at ``path``, identified, with the tile and date it states; one not there,
    with those of its product name (InputError without one)."""
    return _acquisition(path, _identified(path, identify))


def _acquisition(path: str, scene: SceneForm | None) -> Acquisition:
    found = _stated(path, scene)
    if found is None:
        raise InputError(f"{path}: {NO_TILE_AND_DATE}")
    return Acquisition(path, *found, scene=scene)


def _identified(path: str, identify: Identify) -> SceneForm | None:
    try:
        return identify(path)
    except MissingScene:
        return None  # skipped when mapped, named


def _stated(path: str, scene: SceneForm | None) -> tuple[str, dt.date] | None:
    """What the scene states; of a path that is not there, its product name."""
    return scene.tile_and_date() if scene is not None else named_tile_and_date(path)


def from_product_name(path: str) -> Acquisition:
    """The tile and date in ``path``'s Sentinel-2 product name; InputError without one."""
    found = named_tile_and_date(path)
    if found is None:
        raise InputError(
            f"{path}: no Sentinel-2 L2A product name (S2x_MSIL2A_<date>..._T<tile>_...) "
            "to take tile and date from; give them in --scenes-csv path,date,tile"
        )
    return Acquisition(path, *found)


def from_csv(path: Path, identify: Identify = identify) -> list[Acquisition]:
    """``--scenes-csv``: rows ``path,date[,tile]`` (a header row and a spreadsheet's BOM
    allowed; paths relative to the CSV), each row's scene identified (``identify``). Without
    a tile column a row's tile is what its scene states, else the name of its folder or of
    the folder above when that is an MGRS tile (``T32UQU/2020-03-15``,
    ``2020-03-15/T32UQU``); InputError naming the row else, or for a tile that is no MGRS
    tile: never a folder name as a tile, which dropped scenes as "second scenes" of one
    made-up tile."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            table = [r for r in csv.reader(f) if r and any(c.strip() for c in r)]
    except OSError as err:
        raise InputError(f"{path}: unreadable ({err.strerror})") from None
    if table and [c.strip() for c in table[0][:2]] == ["path", "date"]:
        table = table[1:]
    rows = []
    for number, row in enumerate(table, start=1):
        try:
            date = dt.date.fromisoformat(row[1].strip())
        except (IndexError, ValueError):
            raise InputError(f"{path}: row {number}: expected path,date[,tile]") from None
        named = row[0].strip()
        scene = named if named.startswith("/") else (path.parent / named).as_posix()
        given = row[2].strip() if len(row) > 2 else ""
        form = _identified(scene, identify)
        tile = _row_tile(scene, form, given)
        if tile is None:
            what = f"tile {given!r} is not an MGRS tile (like 33UXP)" if given else (
                f"no tile column, and {named} states none (no product name or metadata, no "
                "folder named by a tile): add its tile, path,date,tile")  # fmt: skip
            raise InputError(f"{path}: row {number}: {what}")
        try:
            rows.append(Acquisition(scene, tile, date, scene=form))
        except InputError as err:
            raise InputError(f"{path}: row {number}: {err}") from None
    return rows


def _row_tile(scene: str, form: SceneForm | None, given: str) -> str | None:
    if given:
        return mgrs_tile(given)
    found = _stated(scene, form)
    if found is not None:
        return found[0]
    folder = Path(scene)
    return mgrs_tile(folder.name) or mgrs_tile(folder.parent.name)


def period_of(date: dt.date, kind: str) -> str:
    """The label of the ``kind`` period holding ``date``."""
    if kind == "scene-date":
        return date.isoformat()
    if kind == "month":
        return f"{date.year:04d}-{date.month:02d}"
    if kind == "season":
        season = SEASONS[date.month]
        year = date.year - 1 if date.month in (1, 2) else date.year
        return f"{year:04d}-{season}"
    if kind == "year":
        return f"{date.year:04d}"
    raise InputError(f"--period {kind!r}: expected one of {', '.join(PERIODS)}")


# Each kind's label, as period_of writes it, and its length in months (0: one day).
LABELS: dict[str, tuple[re.Pattern[str], int]] = {
    "scene-date": (re.compile(r"(\d{4})-(\d{2})-(\d{2})"), 0),
    "month": (re.compile(r"(\d{4})-(\d{2})"), 1),
    "season": (re.compile(r"(\d{4})-(DJF|MAM|JJA|SON)"), 3),  # a winter by its December
    "year": (re.compile(r"(\d{4})"), 12),
}


def parse_period(label: str) -> tuple[str, dt.date]:
    """The kind of the period ``label`` and its first day: the one reader of the labels
    :func:`period_of` writes; ValueError for any other text."""
    for kind, (pattern, _) in LABELS.items():
        match = pattern.fullmatch(label)
        if match is None:
            continue
        year, *rest = match.groups()
        if kind == "scene-date":
            return kind, dt.date.fromisoformat(label)
        if kind == "season":
            return kind, dt.date(int(year), SEASON_START[rest[0]], 1)
        return kind, dt.date(int(year), int(rest[0]) if rest else 1, 1)
    raise ValueError(f"not a period label: {label!r}")


def period_start(label: str) -> dt.date:
    """The first day of the period ``label`` (any kind)."""
    return parse_period(label)[1]


def period_end(label: str) -> dt.date:
    """The last day of the period ``label`` (any kind)."""
    kind, start = parse_period(label)
    months = LABELS[kind][1]
    if months == 0:
        return start
    month = start.month - 1 + months
    return dt.date(start.year + month // 12, month % 12 + 1, 1) - dt.timedelta(days=1)


def group_by_period(acquisitions: list[Acquisition], kind: str) -> dict[str, list[Acquisition]]:
    """Period label -> its acquisitions (by date, then tile), periods in time order."""
    groups: dict[str, list[Acquisition]] = {}
    for acq in sorted(acquisitions, key=lambda a: (a.date, a.tile, a.path)):
        groups.setdefault(period_of(acq.date, kind), []).append(acq)
    return dict(sorted(groups.items(), key=lambda item: period_start(item[0])))


def duplicates(acquisitions: list[Acquisition]) -> list[tuple[Acquisition, Acquisition]]:
    """Pairs of scenes of the same tile and date (the second of each is the one to skip)."""
    seen: dict[tuple[str, dt.date], Acquisition] = {}
    pairs = []
    for acq in acquisitions:
        key = (acq.tile, acq.date)
        if key in seen:
            pairs.append((seen[key], acq))
        else:
            seen[key] = acq
    return pairs
