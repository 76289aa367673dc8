"""EOPF Zarr products (``*.zarr`` folders, Zarr v3 or v2; or the same zipped), read with the
zarr library: each band from its native-resolution group, its grid from the ``x``/``y``
coordinates beside it, the CRS and product type from the root's ``stac_discovery`` and the
values' scale/offset from each array's CF attributes (:mod:`bigearthnet.formats.s2_layouts`)."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import warnings
from pathlib import Path

import numpy as np

from bigearthnet.core.constants import GRID_M, resolution_factor
from bigearthnet.core.util import first_line
from bigearthnet.formats import s2_layouts as layout
from bigearthnet.maps.inputs.bands import (
    ArrayBand,
    SceneError,
    SceneSource,
    nodata_values,
)
from bigearthnet.maps.inputs.form import SceneForm
from bigearthnet.maps.radiometry import SceneMetadata


class ZarrProduct(SceneForm):
    """An EOPF Zarr product: a folder with Zarr metadata (v3 ``zarr.json``, v2 ``.zgroup``),
    or a zipped one (``*.zarr.zip``). Its ``stac_discovery`` properties (read once) state
    its CRS, product type, tile and date."""

    name = "EOPF Zarr"

    @classmethod
    def claims(cls, ref: str | Path) -> bool:
        path = Path(ref)
        if path.is_dir():
            return (path / "zarr.json").is_file() or (path / ".zgroup").is_file()
        return path.is_file() and path.name.endswith(".zarr.zip")

    @functools.cached_property
    def properties(self) -> dict:
        """The product's STAC properties (``stac_discovery``); {} when the store has none;
        SceneError for a store that cannot be read."""
        root, store = _open_group(self.path)
        try:
            return _properties(self.path, root, required=False)
        finally:
            if store is not None:
                store.close()

    def is_level_1c(self) -> bool:
        return layout.is_level_1c(self.properties) or super().is_level_1c()

    def tile_and_date(self) -> tuple[str, dt.date] | None:
        """What ``stac_discovery`` states (UTC), else the product name in the path (an
        unreadable product: its name may say; mapping it names the damage)."""
        with contextlib.suppress(SceneError):
            if (stated := self._stated_tile_and_date()) is not None:
                return stated
        return super().tile_and_date()

    def _stated_tile_and_date(self) -> tuple[str, dt.date] | None:
        from pystac.utils import str_to_datetime

        properties = self.properties
        tile, when = layout.tile_of(properties), properties.get("datetime")
        if tile is None or not isinstance(when, str):
            return None
        try:
            return tile, layout.utc_date(str_to_datetime(when))
        except ValueError:
            raise SceneError(f"{self.path}: datetime {when!r} in {layout.ZARR_METADATA}") from None

    def _open(self, bands, mask_clouds, band_order) -> SceneSource:
        scene = self.path
        root, store = _open_group(scene)
        try:
            properties = _properties(scene, root)
            crs = _crs(scene, properties)
            readers = {band: _band(scene, root, layout.zarr_band(band), crs) for band in bands}
            scl = _band(scene, root, layout.ZARR_SCL, crs) if mask_clouds else None
        except BaseException:
            if store is not None:
                store.close()
            raise
        baseline, baseline_key = layout.baseline_of(properties)
        metadata = SceneMetadata(
            bands=bands,
            scales={band: _scale_offset(reader.array) for band, reader in readers.items()},
            scales_from="scale_factor/add_offset of the Zarr arrays",
            where={band: reader.name for band, reader in readers.items()},
            baseline=baseline,
            baseline_from=f"{baseline_key} in {layout.ZARR_METADATA} of the Zarr product",
            dtypes={band: reader.dtype for band, reader in readers.items()},
            product=_product_name(scene, root),
        )
        closers = [store.close] if store is not None else []
        nodata = {band: _fill_values(reader.array) for band, reader in readers.items()}
        return SceneSource(scene, self.name, dict(readers), scl, metadata, closers, nodata)


def _product_name(scene: Path, root) -> str:
    """The product's name: its ``stac_discovery`` id, else the store's name."""
    item = root.attrs.get(layout.ZARR_METADATA)
    found = item.get("id") if isinstance(item, dict) else None
    return str(found) if found else scene.name.removesuffix(".zip").removesuffix(".zarr")


def _open_group(scene: Path):
    try:
        import zarr
    except ImportError:
        raise SceneError(
            f"{scene}: reading Zarr products needs the zarr library (Python >= 3.11): "
            "pip install 'zarr>=3.1'"
        ) from None
    store = zarr.storage.ZipStore(scene, mode="r") if scene.is_file() else None
    try:
        with warnings.catch_warnings():  # v3 consolidated metadata: read, and fine
            warnings.simplefilter("ignore")
            return zarr.open_group(store if store is not None else scene, mode="r"), store
    except Exception as err:  # a damaged zarr.json or zip: zarr raises several types
        if store is not None:
            store.close()
        raise SceneError(f"{scene}: not a readable Zarr product ({first_line(err)})") from None


def _properties(scene: Path, root, required: bool = True) -> dict:
    item = root.attrs.get(layout.ZARR_METADATA)
    properties = item.get("properties") if isinstance(item, dict) else None
    if not isinstance(properties, dict):
        if not required:
            return {}
        raise SceneError(
            f"{scene}: no '{layout.ZARR_METADATA}' properties in the Zarr root attributes "
            "(an EOPF product states its CRS there)"
        )
    return properties


def _crs(scene: Path, properties: dict):
    from rasterio.crs import CRS

    code = properties.get("proj:code") or properties.get("proj:epsg")
    if code in (None, ""):
        raise SceneError(f"{scene}: no proj:epsg or proj:code in {layout.ZARR_METADATA}")
    try:
        return CRS.from_user_input(f"EPSG:{code}" if isinstance(code, int) else code)
    except Exception as err:  # rasterio's CRSError
        raise SceneError(f"{scene}: CRS {code!r}: {first_line(err)}") from None


def _band(scene: Path, root, path: str, crs) -> ArrayBand:
    from rasterio.transform import Affine

    name = f"{scene}/{path}"
    try:
        array = root[path]
        group = root[path.rsplit("/", 1)[0]]
        x = np.asarray(group[layout.ZARR_X][:], dtype=np.float64)
        y = np.asarray(group[layout.ZARR_Y][:], dtype=np.float64)
    except KeyError as err:
        raise SceneError(f"{name}: missing from the product ({first_line(err)})") from None
    except Exception as err:
        raise SceneError(f"{name}: cannot read ({first_line(err)})") from None
    if array.ndim != 2 or array.shape != (y.size, x.size):
        raise SceneError(
            f"{name}: array of shape {tuple(array.shape)}, but its coordinates give "
            f"{y.size} y x {x.size} x"
        )
    dx, dy = _spacing(name, x, "x"), _spacing(name, y, "y")
    factor = resolution_factor(abs(dx))
    if factor is None or not np.isclose(abs(dy), factor * GRID_M):
        raise SceneError(f"{name}: pixels of {abs(dx):g} x {abs(dy):g} m")
    transform = Affine(dx, 0.0, x[0] - dx / 2, 0.0, dy, y[0] - dy / 2)
    return ArrayBand(array, factor, name, crs, transform)


def _spacing(name: str, coords: np.ndarray, axis: str) -> float:
    steps = np.diff(coords)
    if coords.size < 2 or not np.all(np.isfinite(coords)) or not np.allclose(steps, steps[0]):
        raise SceneError(f"{name}: its {axis} coordinates are not a regular grid")
    return float(steps[0])


def _scale_offset(array) -> tuple[float, float] | None:
    attrs = array.attrs
    if "scale_factor" not in attrs and "add_offset" not in attrs:
        return None
    return float(attrs.get("scale_factor", 1.0)), float(attrs.get("add_offset", 0.0))


def _fill_values(array) -> tuple[float, ...]:
    """The array's nodata: its CF ``_FillValue`` and its Zarr ``fill_value`` (what chunks
    never written read as)."""
    return nodata_values([array.attrs.get("_FillValue"), getattr(array, "fill_value", None)])
