"""Where a Sentinel-2 L2A product's bands are in the forms people download, besides SAFE: one
home for these names, read by :mod:`bigearthnet.maps.inputs` and written by the test writers
of :mod:`bigearthnet.synthetic.scene_forms`.

* **EOPF Zarr** (ESA's products from 2026; Zarr v3, v2 before): each band at its native
  resolution in ``measurements/reflectance/r10m|r20m|r60m/bNN``, the coarser groups also
  holding downsampled copies of the finer bands; the scene classification in
  ``conditions/mask/l2a_classification/r20m/scl``; ``x``/``y`` pixel-centre coordinates
  beside the bands of each group; uint16 values with CF ``scale_factor``/``add_offset``;
  the root attribute ``stac_discovery``, a STAC item whose properties hold ``proj:epsg``
  (or ``proj:code``) and the processing baseline.
* **STAC items with one asset per band** at its native resolution (COGs, or JPEG 2000 in
  CDSE's), keyed in one of three styles:

  - Earth Search (``earth-search``): by colour (``blue``, ``rededge1``, ``nir08``, ...,
    ``scl``), ``raster:bands`` scale 0.0001 and offset -0.1 on every item; its older
    ``sentinel-2-l2a`` collection also states ``earthsearch:boa_offset_applied`` (earlier
    ``sentinel:boa_offset_applied``): true where its pipeline already removed the offset;
  - Planetary Computer (``pc``): ``B01`` ... ``B12``, ``B8A``, ``SCL``, no scale or offset
    (``s2:processing_baseline`` then decides);
  - CDSE's STAC 1.1 items (``cdse``): by band and resolution (``B02_10m``, ``B8A_20m``,
    ``SCL_20m``; coarser copies such as ``B02_60m`` beside them are not used),
    ``raster:scale``/``raster:offset`` on the asset itself (raster extension v2) and the
    baseline as ``processing:version``.

  A Level-1C item is known by its product type or by its collection
  (``sentinel-2-l1c``).
"""

from __future__ import annotations

import datetime as dt
import os
import re

from bigearthnet.core import constants

SCL = constants.SCL  # the scene classification band
# What L2A values mean (decided per scene by bigearthnet.maps.radiometry; written by the test
# writers of bigearthnet.synthetic): DN = 10,000 x reflectance, stored + 1,000 from baseline 04.00.
REFLECTANCE_SCALE = 1e-4  # reflectance per DN, BigEarthNet's and every L2A product's
BOA_ADD_OFFSET = -1000  # DN added to stored values from processing baseline 04.00 on
OFFSET_BASELINE = (4, 0)  # the first processing baseline storing DN + 1,000
# The L2A product metadata numbers its bands 0..12 in this order (B10 has no L2A image).
PRODUCT_BAND_IDS = constants.L1C_BANDS
# The standard product name: the first date is the acquisition, the T-field the MGRS tile.
PRODUCT_NAME = re.compile(
    r"S2[ABCD]_MSIL2A_(?P<date>\d{8})T\d{6}_N\d{4}_R\d{3}_T(?P<tile>\d{2}[A-Z]{3})_"
)

# --- EOPF Zarr
ZARR_REFLECTANCE = "measurements/reflectance"
ZARR_SCL = "conditions/mask/l2a_classification/r20m/scl"
ZARR_RESOLUTIONS = constants.NATIVE_RESOLUTIONS_M  # r10m, r20m, r60m
ZARR_X, ZARR_Y = "x", "y"
ZARR_METADATA = "stac_discovery"  # root attribute: a STAC item (dict)


def zarr_group(res: int) -> str:
    """The group of the bands at ``res`` metres: ``measurements/reflectance/r20m``."""
    return f"{ZARR_REFLECTANCE}/r{res}m"


def zarr_band(band: str) -> str:
    """A band's array at its native resolution: B8A -> ``.../r20m/b8a``."""
    return f"{zarr_group(constants.BAND_RESOLUTION_M[band])}/{band.lower()}"


# --- STAC items
EARTH_SEARCH_KEYS: dict[str, str] = {
    "B01": "coastal", "B02": "blue", "B03": "green", "B04": "red", "B05": "rededge1",
    "B06": "rededge2", "B07": "rededge3", "B08": "nir", "B8A": "nir08", "B09": "nir09",
    "B11": "swir16", "B12": "swir22", SCL: "scl",
}  # fmt: skip
PC_KEYS: dict[str, str] = {band: band for band in (*constants.BANDS, SCL)}
CDSE_KEYS: dict[str, str] = {
    band: f"{band}_{constants.BAND_RESOLUTION_M[band]}m" for band in constants.BANDS
} | {SCL: "SCL_20m"}
STAC_STYLES: dict[str, dict[str, str]] = {
    "earth-search": EARTH_SEARCH_KEYS,
    "pc": PC_KEYS,
    "cdse": CDSE_KEYS,
}
BASELINE_PROPERTIES = ("s2:processing_baseline", "processing:version")
PRODUCT_TYPE_PROPERTIES = ("s2:product_type", "product:type", "processing:level")
# Earth Search's word that its pipeline already took the offset off an item's COGs.
OFFSET_APPLIED_PROPERTIES = ("earthsearch:boa_offset_applied", "sentinel:boa_offset_applied")
L1C_COLLECTION = re.compile(r"(^|[-_/])l1c($|[-_/])", re.IGNORECASE)  # sentinel-2-l1c


def asset_key(band: str, style: str) -> str:
    """The asset key of ``band`` in items of ``style`` (``earth-search`` or ``pc``)."""
    return STAC_STYLES[style][band]


def is_level_1c(properties: dict) -> bool:
    """An item's (or a Zarr product's ``stac_discovery``) properties name Level-1C."""
    values = [str(properties.get(key, "")).upper() for key in PRODUCT_TYPE_PROPERTIES]
    return any(v in ("S2MSI1C", "L1C") or v.endswith("MSIL1C") for v in values)


def is_level_1c_collection(collection: str | None) -> bool:
    """A collection id (or the last part of a collection link) naming Level-1C."""
    return bool(collection) and L1C_COLLECTION.search(str(collection).rstrip("/")) is not None


def baseline_of(properties: dict) -> tuple[str | None, str]:
    """The processing baseline (``05.10``) an item's properties state and the property that
    states it; (None, "") when none does."""
    for key in BASELINE_PROPERTIES:
        value = properties.get(key)
        if value not in (None, ""):
            return str(value), key
    return None, ""


def offset_applied_of(properties: dict) -> tuple[object, str]:
    """Earth Search's ``earthsearch:boa_offset_applied`` (or its older name) as stated, and
    the property's name; (None, "") on items of other catalogs."""
    for key in OFFSET_APPLIED_PROPERTIES:
        if key in properties:
            return properties[key], key
    return None, ""


# --- tile and date, as every form states them
# An MGRS tile as Sentinel-2 names it: UTM zone 01-60, latitude band C-X, a 100 km square of
# two letters; no I or O. (Real rows stop at V; the synthetic regions name squares past it.)
# Product names write it with a T (``T33UXP``).
MGRS_TILE = re.compile(r"T?(0[1-9]|[1-5]\d|60)([C-HJ-NP-X][A-HJ-NP-Z]{2})")


def mgrs_tile(text: object) -> str | None:
    """``text`` as an MGRS tile without the T (``T33UXP``, ``33uxp`` -> ``33UXP``); None
    when it is none (a date, a folder name, zone 61)."""
    match = MGRS_TILE.fullmatch(str(text).strip().upper())
    return "".join(match.groups()) if match else None


def tile_of(properties: dict) -> str | None:
    """The MGRS tile a STAC item's (or a Zarr product's ``stac_discovery``) properties
    state: ``s2:mgrs_tile``, ``grid:code`` (``MGRS-33UXP``) or the ``mgrs:`` fields."""
    stated = properties.get("s2:mgrs_tile") or str(properties.get("grid:code") or "")
    if not stated and "mgrs:utm_zone" in properties:
        zone = properties["mgrs:utm_zone"]
        stated = f"{int(zone):02d}" if str(zone).isdigit() else str(zone)
        stated += f"{properties.get('mgrs:latitude_band', '')}"
        stated += f"{properties.get('mgrs:grid_square', '')}"
    return mgrs_tile(str(stated).removeprefix("MGRS-")) if stated else None


def named_tile_and_date(text: str | os.PathLike) -> tuple[str, dt.date] | None:
    """The MGRS tile and acquisition date of the standard product name in ``text`` (a path
    holding one: ``.../S2B_MSIL2A_20200801T100559_..._T33UXP_...``); None without one."""
    named = PRODUCT_NAME.search(str(text))
    if named is None:
        return None
    return named["tile"], dt.datetime.strptime(named["date"], "%Y%m%d").date()


def utc_date(when: dt.datetime) -> dt.date:
    """The UTC date of ``when``. One without a zone is UTC already (RFC 3339 intends it;
    the machine's own zone would move a scene acquired near midnight to another day)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.astimezone(dt.timezone.utc).date()
