"""Scenes as STAC items with one COG asset per band (read with pystac and rasterio).

A scene is an item file, or ``FILE#ID``: the item ``ID`` of a FeatureCollection or
ItemCollection saved in ``FILE`` (a search result). Asset hrefs are local paths, relative to
the file, or URLs that GDAL reads when a network exists. Assets are found by Earth Search's
keys (``blue``, ``nir08``, ``scl``), Planetary-Computer-style keys (``B02``, ``B8A``,
``SCL``) or CDSE's (``B02_10m``, ``B8A_20m``, ``SCL_20m``)
(:mod:`bigearthnet.formats.s2_layouts`). What the item says of the values is gathered for
:mod:`bigearthnet.maps.radiometry`: Earth Search's ``earthsearch:boa_offset_applied``; each
band's scale/offset from the asset's ``raster:scale``/``raster:offset`` (raster v2, STAC
1.1), its ``raster:bands`` (STAC 1.0) or ``bands`` (1.1), else the COG's own tags; the
processing baseline (``s2:processing_baseline``, ``processing:version``).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import re
from pathlib import Path

from bigearthnet.core import constants
from bigearthnet.core.util import first_line
from bigearthnet.formats import s2_layouts as layout
from bigearthnet.maps.inputs.bands import Opened, RasterBand, SceneError, SceneSource
from bigearthnet.maps.radiometry import ScaleOffset, SceneMetadata

REF = "#"  # FILE#ID: an item of a collection file
FACTORS = {10: 1, 20: 2, 60: 6}


def is_stac(ref: str | Path) -> bool:
    """An item file (``*.json``) or an item of a collection file (``FILE#ID``)."""
    text = str(ref)
    return REF in text or (text.endswith(".json") and Path(text).is_file())


def load_item(ref: str | Path):
    """The pystac Item ``ref`` names; SceneError naming the file when it is no item."""
    import pystac

    file, _, item_id = str(ref).partition(REF)
    document = _read_json(Path(file))
    if item_id:
        features = document.get("features") if isinstance(document, dict) else None
        matches = [f for f in features or [] if isinstance(f, dict) and f.get("id") == item_id]
        if len(matches) != 1:
            raise SceneError(f"{file}: {len(matches)} items with id {item_id!r}")
        document = matches[0]
    if not isinstance(document, dict) or document.get("type") != "Feature":
        raise SceneError(f"{file}: not a STAC item (a GeoJSON Feature)")
    try:
        return pystac.Item.from_dict(document, href=str(Path(file).resolve()), migrate=True)
    except Exception as err:  # pystac raises several types on a malformed item
        raise SceneError(f"{ref}: not a readable STAC item ({first_line(err)})") from None


def items_in(path: Path) -> list[str]:
    """``--stac-items``: the items of a FeatureCollection/ItemCollection file (as
    ``FILE#ID``), of a folder of item files, or one item file."""
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise SceneError(f"{path}: no STAC item files (*.json) in this folder")
        return [str(file) for file in files]
    document = _read_json(path)
    if isinstance(document, dict) and document.get("type") == "Feature":
        return [str(path)]
    features = document.get("features") if isinstance(document, dict) else None
    if not isinstance(features, list) or not features:
        raise SceneError(f"{path}: neither a STAC item nor a collection of items (features)")
    found = [f.get("id") if isinstance(f, dict) else None for f in features]
    if not all(isinstance(i, str) and i for i in found):
        raise SceneError(f"{path}: a feature without an id")
    ids = [str(i) for i in found]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise SceneError(f"{path}: item id(s) {', '.join(repeated)} appear twice")
    return [f"{path}{REF}{item_id}" for item_id in ids]


def tile_and_date(ref: str) -> tuple[str, dt.date]:
    """The MGRS tile and acquisition date an item's properties state."""
    item = load_item(ref)
    props = item.properties
    tile = props.get("s2:mgrs_tile") or str(props.get("grid:code", "")).removeprefix("MGRS-")
    if not tile and "mgrs:utm_zone" in props:
        tile = f"{int(props['mgrs:utm_zone']):02d}{props.get('mgrs:latitude_band', '')}"
        tile += str(props.get("mgrs:grid_square", ""))
    if not re.fullmatch(r"\d{2}[A-Z]{3}", str(tile)):
        raise SceneError(f"{ref}: no MGRS tile in its properties (s2:mgrs_tile, grid:code)")
    if item.datetime is None:
        raise SceneError(f"{ref}: the item has no datetime")
    return str(tile), item.datetime.astimezone(dt.timezone.utc).date()


def is_level_1c(ref: str) -> bool:
    """Level-1C by the item's properties, id, or collection (its ``collection`` field or
    its ``collection`` link: Earth Search's ``sentinel-2-l1c``)."""
    item = load_item(ref)
    # The link's href as written (resolving it would reach for the catalog over a network).
    links = [link.get_target_str() or "" for link in item.links if link.rel == "collection"]
    collections = [item.collection_id, *(href.rstrip("/").rsplit("/", 1)[-1] for href in links)]
    return (
        layout.is_level_1c(item.properties)
        or "MSIL1C" in item.id
        or "_L1C" in item.id
        or any(layout.is_level_1c_collection(name) for name in collections)
    )


def open_stac(ref: str, bands: tuple[str, ...], mask_clouds: bool) -> SceneSource:
    item = load_item(ref)
    opened = Opened()
    try:
        readers = {band: _asset_band(ref, item, band, opened) for band in bands}
        scl = _asset_band(ref, item, layout.SCL, opened) if mask_clouds else None
    except BaseException:
        opened.close()
        raise
    return SceneSource(Path(ref), "STAC item", dict(readers), scl, _metadata(item, readers),
                       [opened.close])  # fmt: skip


def _metadata(item, readers: dict[str, RasterBand]) -> SceneMetadata:
    """What the item (else its COGs) says of the values (:mod:`.radiometry`'s evidence)."""
    declared = {band: _declared(item, band) for band in readers}
    if any(pair is not None for pair in declared.values()):
        on_assets = any("raster:scale" in item.assets[key].extra_fields for key in
                        filter(None, (_asset_key(item, band) for band in readers)))  # fmt: skip
        scales = declared
        scales_from = ("raster:scale/raster:offset of the STAC item's assets" if on_assets
                       else "raster:bands of the STAC item")  # fmt: skip
    else:
        scales = {band: reader.scale_offset() for band, reader in readers.items()}
        scales_from = "scale/offset of the COG assets"
    baseline, baseline_key = layout.baseline_of(item.properties)
    applied, applied_key = layout.offset_applied_of(item.properties)
    product = str(item.properties.get("s2:product_uri") or item.id).removesuffix(".SAFE")
    return SceneMetadata(
        bands=tuple(readers),
        scales=scales,
        scales_from=scales_from,
        where={band: reader.name for band, reader in readers.items()},
        baseline=baseline,
        baseline_from=f"{baseline_key} of the STAC item",
        dtypes={band: reader.dtype for band, reader in readers.items()},
        offset_applied=applied,
        offset_applied_from=f"{applied_key} of the STAC item",
        product=product,
    )


def asset_hrefs(ref: str, item=None) -> list[str]:
    """Every band asset's absolute href (for the scene's identity)."""
    item = item or load_item(ref)
    keys = [_asset_key(item, band) for band in (*constants.BANDS, layout.SCL)]
    return [item.assets[key].get_absolute_href() or "" for key in keys if key is not None]


def digest(ref: str) -> str:
    """A digest of what the scene is: the item as stored, and each local asset's size and
    mtime (a URL asset by its href: the item's ``updated`` says when it changed)."""
    item = load_item(ref)
    hasher = hashlib.sha256(json.dumps(item.to_dict(), sort_keys=True).encode())
    for href in asset_hrefs(ref, item):
        path = Path(href)
        stat = f"{path.stat().st_size}\0{path.stat().st_mtime_ns}" if path.is_file() else ""
        hasher.update(f"{href}\0{stat}\n".encode())
    return hasher.hexdigest()[:16]


def _asset_key(item, band: str) -> str | None:
    for style in layout.STAC_STYLES:
        key = layout.asset_key(band, style)
        if key in item.assets:
            return key
    return None


def _asset_band(ref: str, item, band: str, opened: Opened) -> RasterBand:
    key = _asset_key(item, band)
    if key is None:
        tried = ", ".join(layout.asset_key(band, style) for style in layout.STAC_STYLES)
        raise SceneError(f"{ref}: no asset of band {band} (keys {tried})")
    href = item.assets[key].get_absolute_href()
    reader = opened.band(href, 1, 1, name=f"{ref} asset {key} ({href})")
    factor = FACTORS.get(round(abs(reader.transform.a)))
    if factor is None:
        opened.close()
        raise SceneError(f"{reader.name}: pixels of {abs(reader.transform.a):g} m")
    reader.factor = factor
    return reader


def _declared(item, band: str) -> ScaleOffset:
    """(scale, offset) from the asset's own ``raster:scale``/``raster:offset`` (raster v2,
    STAC 1.1: CDSE), else its ``raster:bands`` (STAC 1.0) or ``bands`` (1.1) entry."""
    key = _asset_key(item, band)
    fields = item.assets[key].extra_fields if key else {}
    entries = fields.get("raster:bands") or fields.get("bands") or []
    entry = entries[0] if entries and isinstance(entries[0], dict) else {}
    if "raster:scale" in fields or "raster:offset" in fields:
        entry = fields
    scale = entry.get("scale", entry.get("raster:scale"))
    offset = entry.get("offset", entry.get("raster:offset"))
    if scale is None and offset is None:
        return None
    return float(1.0 if scale is None else scale), float(0.0 if offset is None else offset)


def _read_json(file: Path):
    """The parsed file, read once while it is unchanged: a scene's identity, level, tile,
    date and bands each load its item, and every item of a saved search is in one file
    (parsed once, not once per item). Callers only read what it returns."""
    try:
        stat = file.stat()
        return _parsed(str(file.resolve()), stat.st_mtime_ns, stat.st_size)
    except OSError as err:
        raise SceneError(f"{file}: unreadable ({err.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SceneError(f"{file}: not JSON ({first_line(err)}): truncated?") from None


@functools.lru_cache(maxsize=16)
def _parsed(file: str, mtime_ns: int, size: int):
    return json.loads(Path(file).read_text(encoding="utf-8"))
