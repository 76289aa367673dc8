"""A scene, whatever form it was downloaded in, open for reading: :func:`open_scene_source`.

The forms (each a module): SAFE product folders, band GeoTIFF folders and band stacks
(:mod:`.files`), EOPF Zarr products (:mod:`.zarr_product`), STAC items with COG assets
(:mod:`.stac_item`). Each yields a :class:`~.bands.SceneSource`: the bands on their native
grids, SCL, and what the metadata say of the values, from which
:mod:`bigearthnet.maps.radiometry` decides the offset.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Sequence
from pathlib import Path

from bigearthnet.core import constants
from bigearthnet.core.util import stat_digest
from bigearthnet.formats.s2_layouts import PRODUCT_NAME
from bigearthnet.maps.inputs import files, stac_item, zarr_product
from bigearthnet.maps.inputs.bands import SceneError, SceneSource
from bigearthnet.maps.inputs.refs import split_ref

FORMS = ("SAFE", "band GeoTIFFs", "band stack", "EOPF Zarr", "STAC item")


def open_scene_source(
    scene: Path | str,
    *,
    bands: tuple[str, ...] = constants.BANDS,
    band_order: Sequence[str] | None = None,
    mask_clouds: bool = False,
) -> SceneSource:
    """Open ``scene`` (any of :data:`FORMS`); SceneError naming what is missing or unreadable."""
    path = Path(scene)
    if band_order and not _is_stack(path):
        raise SceneError(f"{scene}: --band-order applies to a multi-band GeoTIFF")
    if stac_item.is_stac(scene):
        return stac_item.open_stac(str(scene), bands, mask_clouds)
    if zarr_product.is_zarr(path):
        return zarr_product.open_zarr(path, bands, mask_clouds)
    if path.is_dir():
        return files.open_folder(path, bands, mask_clouds)
    if path.is_file():
        return files.open_stack(path, bands, band_order, mask_clouds)
    raise SceneError(
        f"{scene}: no such scene (an L2A .SAFE folder, an EOPF .zarr product, a STAC item, "
        "band GeoTIFFs or one band stack)"
    )


def _is_stack(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in (".tif", ".tiff")


def require_l2a(scene: Path | str) -> None:
    """SceneError for a Level-1C product (top-of-atmosphere reflectance; the models learned
    from L2A's surface reflectance), known by its metadata or its product name. Band
    GeoTIFFs say neither and are taken as L2A."""
    path = Path(scene)
    if stac_item.is_stac(scene):
        level_1c = stac_item.is_level_1c(str(scene))
    elif zarr_product.is_zarr(path):
        from bigearthnet.formats.s2_layouts import is_level_1c

        level_1c = is_level_1c(zarr_product.product_properties(path))
    else:
        level_1c = path.is_dir() and any(path.glob("MTD_MSIL1C.xml"))
    if level_1c or "_MSIL1C_" in path.name:
        raise SceneError(
            f"{scene}: a Level-1C product (top-of-atmosphere reflectance); maps take L2A "
            "(surface reflectance: the L2A product of the same scene, or Sen2Cor's output)"
        )


def tile_and_date(scene: Path | str) -> tuple[str, dt.date] | None:
    """The MGRS tile and acquisition date (UTC) ``scene`` states: a STAC item's properties
    (SceneError when they lack them), a Zarr product's ``stac_discovery``, a product name in
    its path, a SAFE product's band file names (a renamed product folder); None when it
    states none."""
    if stac_item.is_stac(scene):
        return stac_item.tile_and_date(str(scene))
    path = Path(scene)
    if zarr_product.is_zarr(path):
        # An unreadable product: its name may say; mapping it names the damage.
        with contextlib.suppress(SceneError):
            if (stated := zarr_product.tile_and_date(path)) is not None:
                return stated
    named = PRODUCT_NAME.search(str(path))
    if named is not None:
        return named["tile"], dt.datetime.strptime(named["date"], "%Y%m%d").date()
    return files.safe_tile_and_date(path) if path.is_dir() else None


def scene_digest(scene: Path | str) -> str:
    """What the scene's files are, without reading them (sizes, mtimes; a STAC item's
    document and local assets): a scene map made from other files is remade."""
    if stac_item.is_stac(scene):
        return stac_item.digest(str(scene))
    try:
        return stat_digest(scene)
    except OSError as err:
        raise SceneError(f"{scene}: unreadable ({err.strerror})") from None


def scene_files(scene: Path | str) -> dict[str, Path]:
    """Every local file ``scene`` is read from, named for a message: the scene itself (a
    product folder, a stack, an item's file or saved search) and a STAC item's local
    assets (path or ``file://`` hrefs)."""
    file, _ = split_ref(scene)
    files = {f"SCENE {scene}": file}
    if stac_item.is_stac(scene):
        for path in stac_item.asset_files(str(scene)):
            files[f"the asset {path} of {scene}"] = path
    return files


__all__ = ["FORMS", "SceneError", "SceneSource", "open_scene_source", "require_l2a",
           "scene_digest", "scene_files", "tile_and_date"]  # fmt: skip
