"""Scenes as STAC items with one COG asset per band (read with pystac and rasterio).

A scene is an item file, or ``FILE#ID``: the item ``ID`` of a FeatureCollection or
ItemCollection saved in ``FILE`` (a search result; a ``#`` of a path that exists is part of
its name: :mod:`.refs`). Asset hrefs are local paths, relative to the file, ``file://`` URLs
(local paths too), or URLs that GDAL reads when a network exists. The item is read as the
document it is: its ``links`` (a ``root`` or ``self`` on the catalogue's API) are never
followed, so items as the APIs deliver them map offline. Assets are found by Earth Search's
keys (``blue``, ``nir08``, ``scl``), Planetary-Computer-style keys (``B02``, ``B8A``,
``SCL``) or CDSE's (``B02_10m``, ``B8A_20m``, ``SCL_20m``)
(:mod:`bigearthnet.formats.s2_layouts`). What the item says of the values is gathered for
:mod:`bigearthnet.maps.radiometry`: Earth Search's ``earthsearch:boa_offset_applied``; each
band's scale/offset from the asset's ``raster:scale``/``raster:offset`` (raster v2, STAC
1.1), its ``raster:bands`` (STAC 1.0) or ``bands`` (1.1), else the COG's own tags; the
processing baseline (``s2:processing_baseline``, ``processing:version``). Nodata is what the
item (``nodata`` of ``raster:bands``/``bands`` or the asset) or the COG declares.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import hashlib
import json
from pathlib import Path

from bigearthnet.core import constants
from bigearthnet.core.util import first_line
from bigearthnet.formats import s2_layouts as layout
from bigearthnet.maps.inputs.bands import (
    Opened,
    RasterBand,
    SceneError,
    SceneSource,
    nodata_values,
)
from bigearthnet.maps.inputs.form import JsonFiles, SceneForm
from bigearthnet.maps.inputs.refs import REF, absolute_href, local_path, openable, split_ref
from bigearthnet.maps.radiometry import ScaleOffset, SceneMetadata

CATALOG_TYPES = ("Catalog", "Collection")  # a saved catalog's documents, by their "type"


class StacItem(SceneForm):
    """A STAC item: an item file (``*.json``), or ``FILE#ID``, the item ``ID`` of a saved
    search ``FILE``. Its document is read once (through the command's :class:`JsonFiles`:
    the items of one search share one parse) and kept as read; pystac's Item of it once."""

    name = "STAC item"

    @classmethod
    def claims(cls, ref: str | Path) -> bool:
        file, item_id = split_ref(ref)
        return item_id is not None or (file.suffix.lower() == ".json" and file.is_file())

    @functools.cached_property
    def document(self) -> dict:
        """The item's JSON object as read; SceneError naming the file when it is no item."""
        file, item_id = split_ref(self.ref)
        document = self.json_files.read(file)
        if item_id is not None:
            features = document.get("features") if isinstance(document, dict) else None
            matches = [f for f in features or [] if isinstance(f, dict) and f.get("id") == item_id]
            if len(matches) != 1:
                raise SceneError(f"{file}: {len(matches)} items with id {item_id!r}")
            document = matches[0]
        if not isinstance(document, dict) or document.get("type") != "Feature":
            raise SceneError(f"{file}: not a STAC item (a GeoJSON Feature)")
        return document

    @functools.cached_property
    def item(self):
        """The pystac Item of :attr:`document` (its links never followed)."""
        import pystac

        file, _ = split_ref(self.ref)
        try:  # preserve_dict (the default): the document stays as read
            return pystac.Item.from_dict(self.document, href=str(file.resolve()), migrate=True)
        except Exception as err:  # pystac raises several types on a malformed item
            raise SceneError(f"{self.ref}: not a readable STAC item ({first_line(err)})") from None

    def tile_and_date(self) -> tuple[str, dt.date]:
        """The MGRS tile and acquisition date (UTC; a datetime without a zone is UTC) the
        item's properties state; SceneError when they state none."""
        item = self.item
        tile = layout.tile_of(item.properties)
        if tile is None:
            raise SceneError(
                f"{self.ref}: no MGRS tile in its properties (s2:mgrs_tile, grid:code)"
            )
        when = item.datetime or item.common_metadata.start_datetime
        if when is None:
            raise SceneError(f"{self.ref}: the item has no datetime")
        return tile, layout.utc_date(when)

    def is_level_1c(self) -> bool:
        """Level-1C by the item's properties, id, or collection (its ``collection`` field or
        its ``collection`` link: Earth Search's ``sentinel-2-l1c``)."""
        item = self.item
        # The link's href as written (resolving it would reach for the catalog over a network).
        links = [link.get_target_str() or "" for link in item.links if link.rel == "collection"]
        collections = [item.collection_id, *(href.rstrip("/").rsplit("/", 1)[-1] for href in links)]
        return (
            layout.is_level_1c(item.properties)
            or "MSIL1C" in item.id
            or "_L1C" in item.id
            or any(layout.is_level_1c_collection(name) for name in collections)
            or super().is_level_1c()
        )

    def _open(self, bands, mask_clouds, band_order) -> SceneSource:
        item, ref = self.item, self.ref
        opened = Opened()
        try:
            readers = {band: _asset_band(ref, item, band, opened) for band in bands}
            scl = _asset_band(ref, item, layout.SCL, opened) if mask_clouds else None
        except BaseException:
            opened.close()
            raise
        nodata = {band: _nodata(item, band, reader) for band, reader in readers.items()}
        return SceneSource(self.path, self.name, dict(readers), scl, _metadata(item, readers),
                           [opened.close], nodata)  # fmt: skip

    def asset_hrefs(self) -> list[str]:
        """Every band asset's absolute href (SCL's too)."""
        keys = [_asset_key(self.item, band) for band in (*constants.BANDS, layout.SCL)]
        return [_asset_href(self.item, key) for key in keys if key is not None]

    def files(self) -> dict[str, Path]:
        """The item's file (or saved search) and its local assets (path and ``file://``
        hrefs; not remote URLs)."""
        file, _ = split_ref(self.ref)
        found = {f"SCENE {self.ref}": file}
        for href in self.asset_hrefs():
            if (path := local_path(href)) is not None:
                found[f"the asset {path} of {self.ref}"] = path
        return found

    def digest(self) -> str:
        """The item document as read (never as pystac would rewrite it: ``Item.to_dict``
        resolves the root link over the network), and each local asset's size and mtime (a
        remote asset by its href: the item's ``updated`` says when it changed)."""
        hasher = hashlib.sha256(json.dumps(self.document, sort_keys=True).encode())
        for href in self.asset_hrefs():
            path = local_path(href)
            stat = path.stat() if path is not None and path.is_file() else None
            stamp = f"{stat.st_size}\0{stat.st_mtime_ns}" if stat is not None else ""
            hasher.update(f"{href}\0{stamp}\n".encode())
        return hasher.hexdigest()[:16]


def items_in(path: Path, json_files: JsonFiles | None = None) -> list[StacItem]:
    """``--stac-items``: the items of ``path``, each an item file or ``FILE#ID``, each once,
    identified (every file parsed once, through ``json_files``).

    ``path`` is an item file; a FeatureCollection/ItemCollection file (a saved search:
    ``FILE#ID`` of each feature); a catalog or collection file, as pystac's ``save`` writes
    them (its items, walked offline through its relative links); or a folder of such files
    (a saved catalog's folder: its ``catalog.json``; item files beside a
    ``collection.json``: the items once). A JSON file that is none of these is refused,
    named: never silently left out."""
    json_files = json_files if json_files is not None else JsonFiles()
    if not path.is_dir():
        refs = _items_of_file(path, json_files)
    else:
        files = sorted(path.glob("*.json"))
        if not files:
            raise SceneError(f"{path}: no STAC item files (*.json) in this folder")
        refs = [ref for file in files for ref in _items_of_file(file, json_files)]
    once: dict[str, str] = {}
    for ref in refs:  # an item file also linked from a catalog beside it: once
        file, item_id = split_ref(ref)
        once.setdefault(f"{file.resolve()}{REF}{item_id or ''}", ref)
    if not once:
        raise SceneError(f"{path}: no STAC items")
    return [StacItem(ref, json_files) for ref in once.values()]


def _items_of_file(path: Path, json_files: JsonFiles) -> list[str]:
    document = json_files.read(path)
    kind = document.get("type") if isinstance(document, dict) else None
    if kind == "Feature":
        return [str(path)]
    if kind in CATALOG_TYPES:
        return _items_of_catalog(path, json_files)
    features = document.get("features") if isinstance(document, dict) else None
    if not isinstance(features, list) or not features:
        raise SceneError(
            f"{path}: neither a STAC item, a saved search (features) nor a STAC catalog or "
            "collection"
        )
    found = [f.get("id") if isinstance(f, dict) else None for f in features]
    if not all(isinstance(i, str) and i for i in found):
        raise SceneError(f"{path}: a feature without an id")
    ids = [str(i) for i in found]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise SceneError(f"{path}: item id(s) {', '.join(repeated)} appear twice")
    return [f"{path}{REF}{item_id}" for item_id in ids]


def _items_of_catalog(path: Path, json_files: JsonFiles) -> list[str]:
    """The item files of a saved catalog or collection and of its children: pystac follows
    its links (relative ones, as ``save`` writes them), reading only files of this machine
    (:func:`.refs.local_path`; a link elsewhere is named), each parsed once with the
    command's other files. The catalog is named to pystac by a ``file://`` URL: pystac
    parses hrefs as URLs, and a ``#`` in a path would end it."""
    import pystac
    from pystac.stac_io import DefaultStacIO

    class LocalFiles(DefaultStacIO):
        def read_text_from_href(self, href: str) -> str:
            return _local(href).read_text(encoding="utf-8")

        def read_json(self, source, *args, **kwargs) -> dict:
            # pystac changes the dict it builds from: its own copy, the parse kept as read
            return copy.deepcopy(json_files.read(_local(str(source))))

    def _local(href: str) -> Path:
        file = local_path(href)
        if file is None:
            raise SceneError(f"a link to {href}, not a file of this machine")
        return file

    try:
        catalog = pystac.read_file(path.resolve().as_uri(), stac_io=LocalFiles())
        if not isinstance(catalog, pystac.Catalog):
            raise SceneError(f"a {type(catalog).__name__}, not a catalog")
        hrefs = [item.get_self_href() or "" for item in catalog.get_items(recursive=True)]
    except Exception as err:  # pystac raises many types on a broken link or document
        raise SceneError(f"{path}: a STAC catalog whose items cannot be read "
                         f"({first_line(err)})") from None  # fmt: skip
    return [str(local_path(href)) for href in hrefs]


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


def _asset_href(item, key: str) -> str:
    """The asset's href, a relative one joined to the item file's folder (by path: pystac's
    own join reads a ``#`` in a folder's name as a URL fragment)."""
    return absolute_href(item.assets[key].href, Path(item.get_self_href()))


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
    href = _asset_href(item, key)
    reader = opened.band(openable(href), 1, 1, name=f"{ref} asset {key} ({href})")
    factor = constants.resolution_factor(abs(reader.transform.a))
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


def _nodata(item, band: str, reader: RasterBand) -> tuple[float, ...]:
    """The band's nodata as the item declares it (``raster:bands`` or STAC 1.1 ``bands``
    entries, or ``nodata`` on the asset) and as its COG does (GDAL nodata)."""
    key = _asset_key(item, band)
    fields = item.assets[key].extra_fields if key else {}
    entries = fields.get("raster:bands") or fields.get("bands") or []
    declared = [entry.get("nodata") for entry in entries[:1] if isinstance(entry, dict)]
    return nodata_values([*declared, fields.get("nodata"), *reader.nodata()])
