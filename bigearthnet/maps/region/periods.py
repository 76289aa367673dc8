"""The time axis of a region series: each scene's tile and date, and the period it belongs to.

Tile and date come from the standard Sentinel-2 product name
(``S2B_MSIL2A_20200801T100559_N0400_R022_T33UXP_20200801T130116``: the first date is the
acquisition, the ``T``-field the MGRS tile) or are given. Periods:

* ``scene-date``: each acquisition date (``2020-08-01``);
* ``month``: ``2020-08``;
* ``season``: meteorological seasons, ``2020-MAM``, ``2020-JJA``, ``2020-SON`` and
  ``2020-DJF`` (December 2020 to February 2021: a winter is named by its December's year);
* ``year``: ``2020``.

A period's label sorts with its start date (:func:`period_start`), so the series is in time
order.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from bigearthnet.core.errors import InputError
from bigearthnet.formats.s2_layouts import PRODUCT_NAME

PERIODS: tuple[str, ...] = ("scene-date", "month", "season", "year")
SEASONS: dict[int, str] = {
    12: "DJF", 1: "DJF", 2: "DJF", 3: "MAM", 4: "MAM", 5: "MAM",
    6: "JJA", 7: "JJA", 8: "JJA", 9: "SON", 10: "SON", 11: "SON",
}  # fmt: skip
SEASON_START: dict[str, int] = {"DJF": 12, "MAM": 3, "JJA": 6, "SON": 9}


@dataclass(frozen=True)
class Acquisition:
    """One scene of the region: where it is on disk, its MGRS tile and its date."""

    path: str
    tile: str  # MGRS tile, e.g. 33UXP
    date: dt.date

    @property
    def utm_zone(self) -> int:
        return int(self.tile[:2])


def from_product_name(path: str) -> Acquisition:
    """The tile and date in ``path``'s Sentinel-2 product name; InputError without one."""
    found = PRODUCT_NAME.search(path)
    if found is None:
        raise InputError(
            f"{path}: no Sentinel-2 L2A product name (S2x_MSIL2A_<date>..._T<tile>_...) "
            "to take tile and date from; give them in --scenes-csv path,date,tile"
        )
    return Acquisition(path, found["tile"], dt.datetime.strptime(found["date"], "%Y%m%d").date())


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


def period_start(label: str) -> dt.date:
    """The first day of the period ``label`` (any kind)."""
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", label):
        return dt.date.fromisoformat(label)
    if re.fullmatch(r"\d{4}-\d{2}", label):
        return dt.date(int(label[:4]), int(label[5:]), 1)
    if re.fullmatch(r"\d{4}-(DJF|MAM|JJA|SON)", label):
        return dt.date(int(label[:4]), SEASON_START[label[5:]], 1)
    if re.fullmatch(r"\d{4}", label):
        return dt.date(int(label), 1, 1)
    raise ValueError(f"not a period label: {label!r}")


def period_end(label: str) -> dt.date:
    """The last day of the period ``label`` (any kind)."""
    start = period_start(label)
    months = {10: 0, 7: 1, 8: 3, 4: 12}[len(label)]  # day, month, season (2020-JJA), year
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
