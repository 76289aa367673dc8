"""The same synthetic scene as the products people download besides SAFE: an EOPF Zarr product
(a folder, or zipped) and STAC items with COG assets in Earth Search's and in
Planetary-Computer's style. Their layout facts are :mod:`bigearthnet.formats.s2_layouts`;
the readers are :mod:`bigearthnet.maps.inputs`.

Every form stores what processing baseline 04.00 stores, DN + 1,000, and says so as the real
products do: the Zarr arrays' ``scale_factor`` 0.0001 / ``add_offset`` -0.1; Earth Search
items' ``raster:bands`` scale and offset; Planetary-Computer items nothing but
``s2:processing_baseline``. A reader that assumed the offset, or forgot it, reads every band
1,000 too bright or too dark.

:func:`localise_item` puts the same scene under a real item's metadata instead (the tests'
items from Earth Search, Planetary Computer and CDSE): COGs on the item's own grid, stored as
that catalog stores them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np

from bigearthnet.core import constants
from bigearthnet.formats import s2_layouts as layout
from bigearthnet.formats.s2_layouts import BOA_ADD_OFFSET, REFLECTANCE_SCALE

BASELINE = "04.00"
ASSETS = "assets"  # beside the item files' folder: the COGs of each item


# Each form's test writer (SAFE, band GeoTIFFs and stacks: bigearthnet.synthetic.scene):
# (folder, bands, (epsg, origin, size), STAC properties, product name) -> the scene's path.
# A new input form's writer is an entry here.
FORM_WRITERS: dict[str, Callable[..., Path]] = {
    "zarr": lambda *scene: _write_zarr(*scene, zipped=False, version=3),
    "zarr-zip": lambda *scene: _write_zarr(*scene, zipped=True, version=3),
    "zarr-v2": lambda *scene: _write_zarr(*scene, zipped=False, version=2),  # EOPF's, before 2026
    "stac": lambda *scene: _write_stac(*scene, style="earth-search"),
    "stac-pc": lambda *scene: _write_stac(*scene, style="pc"),
}
FORM_LAYOUTS = tuple(FORM_WRITERS)


def stored(band: str, image: np.ndarray) -> np.ndarray:
    """What baseline 04.00 stores for offset-free DN (nodata 0 stays 0; SCL as it is)."""
    if band == layout.SCL:
        return image
    shifted = np.where(image == 0, 0, image.astype(np.int32) - BOA_ADD_OFFSET)
    return np.clip(shifted, 0, 65535).astype(np.uint16)


def write_form(
    folder: Path,
    bands: dict[str, np.ndarray],
    size: int,
    form: str,
    *,
    epsg: int,
    origin: tuple[float, float],
    name: str,
) -> Path:
    """Write the rendered ``bands`` (offset-free DN, SCL among them) of a ``size`` px scene
    as ``form`` (:data:`FORM_LAYOUTS`) into ``folder``, named ``name`` + ``.zarr``,
    ``.zarr.zip`` or ``.json`` (a STAC item's COGs go to ``folder/../assets/<name>/``);
    returns the scene's path. ``name`` is a product name: tile and date come from it."""
    found = layout.named_tile_and_date(name)
    if found is None:
        raise ValueError(f"{name}: not an L2A product name")
    tile, date = found
    props = {
        "datetime": f"{date.isoformat()}T10:05:59Z",
        "proj:epsg": epsg,
        "s2:mgrs_tile": tile,
        "s2:product_type": "S2MSI2A",
        "s2:processing_baseline": BASELINE,
    }
    return FORM_WRITERS[form](folder, bands, (epsg, origin, size), props, name)


def _centres(origin: float, count: int, step: float) -> np.ndarray:
    return origin + step * (np.arange(count) + 0.5)


def _downsampled(image: np.ndarray, factor: int) -> np.ndarray:
    """Block means: the coarser groups' copies of a finer band."""
    if factor == 1:
        return image
    h, w = image.shape[0] // factor, image.shape[1] // factor
    blocks = image[: h * factor, : w * factor].reshape(h, factor, w, factor)
    return blocks.mean(axis=(1, 3)).round().astype(image.dtype)


def _write_zarr(
    folder: Path, bands, grid, props: dict, name: str, *, zipped: bool, version: Literal[2, 3]
) -> Path:
    import zarr

    epsg, origin, size = grid
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name + (".zarr.zip" if zipped else ".zarr"))
    zip_store = zarr.storage.ZipStore(path, mode="w") if zipped else None
    item: dict[str, Any] = {
        "type": "Feature",
        "stac_version": "1.1.0",
        "id": name,
        "properties": props,
    }
    # Attributes at creation: a zip member is written once (rewriting one duplicates it).
    root = zarr.open_group(zip_store or path, mode="w", zarr_format=version,
                           attributes={layout.ZARR_METADATA: item})  # fmt: skip
    for res in layout.ZARR_RESOLUTIONS:
        group = root.require_group(layout.zarr_group(res))
        factor = constants.resolution_factor(res)
        assert factor is not None  # the product's groups are at native resolutions
        _coordinates(group, origin, size // factor, float(res))
        for band in constants.BANDS:
            if constants.band_factor(band) > factor:
                continue  # each group: its bands, and copies of the finer ones
            image = _downsampled(stored(band, bands[band]), factor // constants.band_factor(band))
            _array(group, band.lower(), image, scaled=True)
    scl_group = root.require_group(layout.ZARR_SCL.rsplit("/", 1)[0])
    _coordinates(scl_group, origin, size // 2, 20.0)
    _array(scl_group, "scl", bands[layout.SCL], scaled=False)
    if zip_store is not None:
        zip_store.close()
    return path


def _named(group, dims: tuple[str, ...], attrs: dict) -> dict:
    """The array's dimension names the way its Zarr version keeps them (xarray's v2 attribute)."""
    if group.metadata.zarr_format == 2:
        return {"attributes": {**attrs, "_ARRAY_DIMENSIONS": list(dims)}}
    return {"attributes": attrs, "dimension_names": dims}


def _coordinates(group, origin: tuple[float, float], count: int, res: float) -> None:
    for axis, values in (
        (layout.ZARR_X, _centres(origin[0], count, res)),
        (layout.ZARR_Y, _centres(origin[1], count, -res)),
    ):
        array = group.create_array(axis, shape=(count,), dtype="float64",
                                   **_named(group, (axis,), {}))  # fmt: skip
        array[:] = values


def _array(group, name: str, image: np.ndarray, scaled: bool) -> None:
    attrs = {"scale_factor": REFLECTANCE_SCALE, "add_offset": BOA_ADD_OFFSET * REFLECTANCE_SCALE,
             "_FillValue": 0} if scaled else {"_FillValue": 0}  # fmt: skip
    chunk = min(image.shape[0], 1830)  # EOPF: 1830 px chunks at 10 m
    array = group.create_array(name, shape=image.shape, dtype=image.dtype, fill_value=0,
                               chunks=(chunk, chunk),
                               **_named(group, ("y", "x"), attrs))  # fmt: skip
    array[:] = image


def _write_stac(items: Path, bands, grid, props: dict, name: str, *, style: str) -> Path:
    """``items/<name>.json`` and its COGs in ``assets/<name>/`` beside ``items`` (so a folder
    of items holds items only); hrefs relative to the item."""
    epsg, origin, _ = grid
    item_path = items / f"{name}.json"
    folder = _assets_folder(items, name)
    assets = {}
    for band in (*constants.BANDS, layout.SCL):
        key = layout.asset_key(band, style)
        path = folder / f"{key}.tif"
        _write_cog(
            path,
            stored(band, bands[band]),
            f"EPSG:{epsg}",
            origin,
            constants.band_resolution_m(band),
        )
        asset: dict[str, Any] = {"href": f"../{ASSETS}/{name}/{path.name}", "roles": ["data"],
                 "type": "image/tiff; application=geotiff; profile=cloud-optimized"}  # fmt: skip
        if style == "earth-search" and band != layout.SCL:
            asset["raster:bands"] = [{"nodata": 0, "data_type": "uint16", "scale":
                                      REFLECTANCE_SCALE, "offset": BOA_ADD_OFFSET *
                                      REFLECTANCE_SCALE}]  # fmt: skip
        assets[key] = asset
    item_path.parent.mkdir(parents=True, exist_ok=True)
    item_path.write_text(json.dumps(_item(name, grid, props, assets), indent=1), encoding="utf-8")
    return item_path


def localise_item(
    item: dict, bands: dict[str, np.ndarray], items: Path, *, plus_offset: bool
) -> Path:
    """``item`` (a real item's metadata, as its catalog wrote it) over the rendered ``bands``
    (offset-free DN, SCL among them): each band asset's COG written on the asset's own grid
    (its ``proj:transform`` origin, ``proj:code`` or the item's ``proj:epsg``), the values
    stored with the +1,000 (``plus_offset``) or harmonised; its href pointed at the COG
    (``items/../assets/<id>/<key>.tif``) and ``proj:shape``/``proj:bbox`` cut to the scene.
    Nothing else of the metadata changes. Returns ``items/<id>.json``."""
    item = json.loads(json.dumps(item))  # the caller's copy stays as it was
    name = item["id"]
    folder = _assets_folder(items, name)
    for band in (*constants.BANDS, layout.SCL):
        key = next(k for k in (layout.asset_key(band, st) for st in layout.STAC_STYLES)
                   if k in item["assets"])  # fmt: skip
        asset = item["assets"][key]
        a, _, x0, _, e, y0 = asset["proj:transform"][:6]
        crs = asset.get("proj:code") or f"EPSG:{item['properties']['proj:epsg']}"
        image = stored(band, bands[band]) if plus_offset else bands[band]
        _write_cog(folder / f"{key}.tif", image, crs, (x0, y0), int(a))
        asset["href"] = f"../{ASSETS}/{name}/{key}.tif"
        asset["proj:shape"] = list(image.shape)
        if "proj:bbox" in asset:
            asset["proj:bbox"] = [x0, y0 + e * image.shape[0], x0 + a * image.shape[1], y0]
    path = items / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(item, indent=1), encoding="utf-8")
    return path


def _assets_folder(items: Path, name: str) -> Path:
    folder = items.parent / ASSETS / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def _write_cog(path: Path, image: np.ndarray, crs: str, origin, res: int) -> None:
    """One band as a COG (nodata 0, as L2A's) with its upper-left corner at ``origin``."""
    import rasterio
    from rasterio.transform import Affine

    height, width = image.shape
    profile = dict(driver="COG", width=width, height=height, count=1, dtype=image.dtype.name,
                   crs=crs, nodata=0, compress="deflate", blocksize=512,
                   transform=Affine(res, 0.0, origin[0], 0.0, -res, origin[1]))  # fmt: skip
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(image, 1)


def _item(name: str, grid, props: dict, assets: dict) -> dict:
    from rasterio.warp import transform_bounds

    epsg, origin, size = grid
    west, south, east, north = transform_bounds(
        f"EPSG:{epsg}", "EPSG:4326", origin[0], origin[1] - size * 10, origin[0] + size * 10,
        origin[1],
    )  # fmt: skip
    ring = [[west, south], [east, south], [east, north], [west, north], [west, south]]
    return {
        "type": "Feature",
        "stac_version": "1.0.0",
        "stac_extensions": ["https://stac-extensions.github.io/raster/v1.1.0/schema.json",
                            "https://stac-extensions.github.io/projection/v1.1.0/schema.json"],
        "id": name,
        "bbox": [west, south, east, north],
        "geometry": {"type": "Polygon", "coordinates": [ring]},
        "properties": props,
        "links": [],
        "assets": assets,
    }  # fmt: skip
