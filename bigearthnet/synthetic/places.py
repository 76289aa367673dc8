"""Where and when synthetic patches are: Sentinel-2 tiles in the BigEarthNet countries'
UTM zones, their names, acquisition dates and the paired Sentinel-1 acquisitions."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np

# (UTM zone, country, range of tile_y0 in 100 km) - plausible places of the BigEarthNet countries.
_SITES: tuple[tuple[int, str, int, int], ...] = (
    (29, "Portugal", 41, 46),
    (29, "Ireland", 57, 61),
    (31, "Belgium", 56, 57),
    (32, "Luxembourg", 55, 55),
    (32, "Switzerland", 51, 53),
    (33, "Austria", 52, 54),
    (34, "Serbia", 48, 50),
    (34, "Kosovo", 47, 47),
    (34, "Lithuania", 61, 62),
    (35, "Finland", 67, 77),
    (35, "Lithuania", 61, 62),
)
_ZONES: tuple[int, ...] = tuple(sorted({site[0] for site in _SITES}))
COUNTRIES: tuple[str, ...] = tuple(sorted({site[1] for site in _SITES}))


def region_of(country: str) -> int:
    """A country's index: the realistic archive's per-region spectra (:mod:`.spectra`)."""
    return COUNTRIES.index(country)


_TILE_X0: tuple[int, ...] = (300000, 399960, 499980, 600000, 699960)  # Sentinel-2 tile corners
_LAT_BANDS = "CDEFGHJKLMNPQRSTUVWX"
_MGRS_COLS = "ABCDEFGHJKLMNPQRSTUVWXYZ"
_MGRS_ROWS = "ABCDEFGHJKLMNPQRSTUV"
_FIRST_DAY = dt.datetime(2017, 6, 1)  # BigEarthNet acquisitions span June 2017 - May 2018
_DAYS = 365


@dataclass(frozen=True)
class Tile:
    mission: str
    when: dt.datetime
    strip_hour: bool
    zone: int
    mgrs: str
    orbit: int
    x0: int
    y0: int
    country: str
    processed: dt.datetime
    s1_mission: str
    s1_when: dt.datetime


# --------------------------------------------------------------------------- planning


def utm_wkt(zone: int) -> str:
    """WKT of WGS 84 / UTM zone <zone>N exactly as the v1 JSON files spell it."""
    meridian = 6 * zone - 183
    return (
        f'PROJCS["WGS 84 / UTM zone {zone}N",GEOGCS["WGS 84",DATUM["WGS_1984",'
        'SPHEROID["WGS 84",6378137,298.257223563,AUTHORITY["EPSG","7030"]],'
        'AUTHORITY["EPSG","6326"]],PRIMEM["Greenwich",0,AUTHORITY["EPSG","8901"]],'
        'UNIT["degree",0.0174532925199433,AUTHORITY["EPSG","9122"]],'
        'AXIS["Latitude",NORTH],AXIS["Longitude",EAST],AUTHORITY["EPSG","4326"]],'
        'PROJECTION["Transverse_Mercator"],PARAMETER["latitude_of_origin",0],'
        f'PARAMETER["central_meridian",{meridian}],PARAMETER["scale_factor",0.9996],'
        'PARAMETER["false_easting",500000],PARAMETER["false_northing",0],'
        'UNIT["metre",1,AUTHORITY["EPSG","9001"]],AXIS["Easting",EAST],AXIS["Northing",NORTH],'
        f'AUTHORITY["EPSG","326{zone:02d}"]]'
    )


def stamp(when: dt.datetime, strip_hour: bool = False) -> str:
    """YYYYMMDDThhmmss; v1 names lost the hour's leading zero in some products (T94033)."""
    text = when.strftime("%Y%m%dT%H%M%S")
    return text[:9] + text[10:] if strip_hour and when.hour < 10 else text


def plan_tiles(rng: np.random.Generator, num_tiles: int) -> list[Tile]:
    zones = [int(z) for z in rng.permutation(_ZONES)]
    tiles: list[Tile] = []
    names: set[tuple[str, str]] = set()
    while len(tiles) < num_tiles:
        i = len(tiles)
        zone = zones[i % len(zones)]  # consecutive tiles never share a zone
        sites = [s for s in _SITES if s[0] == zone]
        _, country, y_lo, y_hi = sites[int(rng.integers(len(sites)))]
        y0 = int(rng.integers(y_lo, y_hi + 1)) * 100_000 + 40
        strip_hour = i % 3 == 1  # some names lose the hour's leading zero, like the real ones
        hour = 9 if strip_hour else int(rng.integers(9, 12))
        when = _FIRST_DAY + dt.timedelta(
            days=int(rng.integers(_DAYS)),
            hours=hour,
            minutes=int(rng.integers(60)),
            seconds=int(rng.integers(60)),
        )
        mission = "S2A" if rng.random() < 0.5 else "S2B"
        if (mission, stamp(when, strip_hour)) in names:
            continue  # patch names must be unique: draw this tile again
        names.add((mission, stamp(when, strip_hour)))
        lat = (y0 - 60_000) / 110_900  # rough, only to pick the MGRS latitude band
        mgrs = (
            f"{zone:02d}{_LAT_BANDS[int((lat + 80) // 8)]}"
            f"{_MGRS_COLS[int(rng.integers(len(_MGRS_COLS)))]}"
            f"{_MGRS_ROWS[int(rng.integers(len(_MGRS_ROWS)))]}"
        )
        s1_when = when + dt.timedelta(
            days=int(rng.integers(-2, 3)),
            hours=int(rng.choice([-5, 7])),
            seconds=int(rng.integers(3600)),
        )
        tiles.append(
            Tile(
                mission=mission,
                when=when,
                strip_hour=strip_hour,
                zone=zone,
                mgrs=mgrs,
                orbit=int(rng.integers(1, 144)),
                x0=int(rng.choice(_TILE_X0)),
                y0=y0,
                country=country,
                processed=when + dt.timedelta(seconds=int(rng.integers(60, 3 * 3600))),
                s1_mission="S1A" if rng.random() < 0.5 else "S1B",
                s1_when=s1_when,
            )
        )
    return tiles
