"""Synthetic Sentinel-2 scenes with known land cover, to test scene maps end to end.

A square scene (a few hundred to a few thousand 10 m px) is cut into a grid of blocks, each
one 19-class filled with the spectral signature the synthetic patches use
(:func:`bigearthnet.synthetic.render.class_signatures`), a smooth brightness texture and
sensor noise; the 20 m and 60 m bands are block means of the 10 m field, as a sensor would
see them. A border of ``border`` px is nodata (0 in every band), as at a tile's edge. An
optional cloud (a rectangle) is bright in every band and marked 9 (cloud, high
probability) in the scene classification band (SCL, 20 m; 4 elsewhere, 0 in the border),
which is written with every scene, as in an L2A product.

Written as a folder of single-band GeoTIFFs (``B02.tif`` ...) or as an L2A product folder
(``<name>.SAFE/GRANULE/<granule>/IMG_DATA/R10m/<tile>_<date>_B02_10m.jp2`` ..., lossless
JPEG 2000, ``MTD_MSIL2A.xml`` with ``BOA_ADD_OFFSET`` -1000 and the values stored +1000, as
processing baseline 04.00 does). :class:`SceneTruth` says which class each block holds.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.declare import check_fields, option, reuse
from bigearthnet.core.errors import (
    ConfigError,
    InputError,
    require_positive_int,
)
from bigearthnet.core.folders import REPLACE_FLAG, Owner, Replacing, check_output, publishing
from bigearthnet.core.room import Needs, check_room
from bigearthnet.core.util import atomic_path
from bigearthnet.formats.s2_layouts import BOA_ADD_OFFSET, REFLECTANCE_SCALE
from bigearthnet.synthetic import sizes
from bigearthnet.synthetic.look import LOOKS, Look, SyntheticLook
from bigearthnet.synthetic.places import region_of
from bigearthnet.synthetic.scene_forms import FORM_LAYOUTS, stored, write_form

EPSG = 32633
ORIGIN = (500000.0, 5300040.0)  # upper-left corner, metres
PRODUCT = "S2B_MSIL2A_20200801T100559_N0400_R022_T33UXP_20200801T130116"
SCENE_DATE, SCENE_COUNTRY = dt.date(2020, 8, 1), "Austria"  # PRODUCT's: T33UXP
GRANULE = "L2A_T33UXP_A017956_20200801T100558"
TILE_DATE = "T33UXP_20200801T100559"
CLOUD_REFLECTANCE = 7000  # bright in every band, as thick cloud
SCL_CLOUD, SCL_LAND = 9, 4  # L2A scene classification: cloud high probability, vegetation


@dataclass(frozen=True)
class SceneTruth:
    """Where each class lies: ``classes[i][j]`` is the 19-class index of block (i, j)."""

    size: int  # px at 10 m, square
    block: int  # px per block side
    border: int  # nodata px at every edge
    classes: tuple[tuple[int, ...], ...]
    cloud: tuple[int, int, int, int] | None = None  # row0, col0, row1, col1 (10 m px, even)

    def class_at(self, row: int, col: int) -> int:
        return self.classes[row // self.block][col // self.block]


def render_scene(truth: SceneTruth, seed: int, difficulty: str) -> dict[str, np.ndarray]:
    """Band -> uint16 image at the band's native resolution."""
    grid = np.kron(np.asarray(truth.classes), np.ones((truth.block, truth.block), int))
    cloud = np.zeros(grid.shape, bool)
    if truth.cloud is not None:
        row0, col0, row1, col1 = truth.cloud
        cloud[row0:row1, col0:col1] = True
    seen = Appearance(LOOKS[difficulty], month=SCENE_DATE.month, region=region_of(SCENE_COUNTRY))
    return render_classes(grid, cloud, truth.border, seed, seen)


@dataclass(frozen=True)
class Appearance:
    """How classes look in a scene: the look of its archive (the scene must look like the
    archive its model learned from), in ``month`` and ``region`` (a country's index)."""

    look: Look
    month: int = 8
    region: int = 0


def render_classes(
    grid: np.ndarray, cloud: np.ndarray, border: int, seed: int, seen: Appearance
) -> dict[str, np.ndarray]:
    """A (size, size) 10 m grid of 19-class indices -> band -> uint16 image at the band's
    native resolution, and ``SCL``: bright in every band and SCL cloud where ``cloud`` (a
    mask of even-aligned 2 x 2 blocks), nodata in a ``border`` of px at every edge."""
    rng = np.random.default_rng(seed)
    size = grid.shape[0]
    full = seen.look.field(rng, grid, seen.month, seen.region)
    bands = {}
    for index, band in enumerate(constants.BANDS):
        field = full[index]
        field[cloud] = CLOUD_REFLECTANCE
        factor = constants.band_factor(band)
        native = size // factor
        coarse = field.reshape(native, factor, native, factor).mean(axis=(1, 3))
        noisy = coarse * (1 + 0.01 * rng.standard_normal(coarse.shape)) + 8 * rng.standard_normal(
            coarse.shape
        )
        image = np.clip(np.rint(noisy), 1, 20000).astype(np.uint16)
        edge = border // factor
        if edge:
            image[:edge], image[-edge:], image[:, :edge], image[:, -edge:] = 0, 0, 0, 0
        bands[band] = image
    scl = np.where(cloud[::2, ::2], SCL_CLOUD, SCL_LAND).astype(np.uint8)
    edge = border // 2
    if edge:
        scl[:edge], scl[-edge:], scl[:, :edge], scl[:, -edge:] = 0, 0, 0, 0
    bands["SCL"] = scl
    return bands


def _profile(
    size: int,
    factor: int,
    driver: str,
    dtype: str = "uint16",
    epsg: int = EPSG,
    origin: tuple[float, float] = ORIGIN,
) -> dict:
    from rasterio.crs import CRS
    from rasterio.transform import Affine

    res = 10.0 * factor
    profile = {
        "driver": driver,
        "width": size // factor,
        "height": size // factor,
        "count": 1,
        "dtype": dtype,
        "crs": CRS.from_epsg(epsg),
        "transform": Affine(res, 0.0, origin[0], 0.0, -res, origin[1]),
        "nodata": 0,
    }
    if driver == "JP2OpenJPEG":
        profile.update(QUALITY="100", REVERSIBLE="YES")  # lossless, as ESA's products
    return profile


# Classes the synthetic archive's tiny model tells apart well, in reading order.
DEMO_CLASSES = (0, 2, 5, 8, 11, 13, 14, 16, 18, 9, 17, 3)
SCENE_LAYOUTS = ("safe", "tif", "stack", *FORM_LAYOUTS)
BLOCK_PX = 240
MAX_BLOCKS = constants.S2_TILE_PX // BLOCK_PX  # 45: the scene is one product, one MGRS tile
OWNER = Owner("bigearthnet-synth scene", ".bigearthnet-synth-scene")


def _blocks(flag: str, value: int) -> int:
    require_positive_int(flag, value)
    if value > MAX_BLOCKS:
        raise ConfigError(
            f"{flag} {value}: at most {MAX_BLOCKS} (a Sentinel-2 product covers one MGRS tile "
            f"of 109.8 km; a block is {BLOCK_PX * 10 / 1000} km)"
        )
    return value


@dataclass(frozen=True)
class DemoScene(SyntheticLook):
    """``bigearthnet-synth scene``: a scene of BLOCKS x BLOCKS squares of 240 px cycling
    through :data:`DEMO_CLASSES`; declared once (the command's options)."""

    layout: str = option(
        "safe", "safe: an L2A product folder with JPEG 2000 bands; tif: one GeoTIFF per band; "
        "stack: one 12-band GeoTIFF at 10 m; zarr, zarr-zip, zarr-v2: an EOPF Zarr product "
        "(v3, zipped, v2) in OUT/; "
        "stac, stac-pc: a STAC item (Earth Search's or Planetary Computer's style) in "
        "OUT/items/ with its COGs in OUT/assets/", choices=SCENE_LAYOUTS,
    )  # fmt: skip
    blocks: int = option(3, f"N x N land-cover squares of 240 px (3: a 7.2 km scene), at "
                         f"most {MAX_BLOCKS}: one Sentinel-2 tile", check=_blocks,
                         metavar="N")  # fmt: skip
    overwrite: bool = reuse(Replacing, "overwrite")

    def __post_init__(self) -> None:
        check_fields(self)

    def truth(self) -> SceneTruth:
        n = self.blocks
        cycle = [DEMO_CLASSES[i % len(DEMO_CLASSES)] for i in range(n * n)]
        classes = tuple(tuple(cycle[r * n : (r + 1) * n]) for r in range(n))
        return SceneTruth(size=BLOCK_PX * n, block=BLOCK_PX, border=0, classes=classes)

    def needs(self) -> Needs:
        size = BLOCK_PX * self.blocks
        return sizes.scene_needs(size, self.layout, f"--blocks {self.blocks}")


def write_demo_scene(out: Path, spec: DemoScene) -> tuple[Path, SceneTruth]:
    """``bigearthnet-synth scene``: the scene ``spec`` describes at ``out`` (a new path, an
    empty folder, or with ``spec.overwrite`` a scene folder of this command), built beside
    it and renamed into place; returns the scene's path (what ``bigearthnet-map scene``
    takes) and its truth. InputError, before anything is written, for a path that holds
    anything else or a scene too large for the disk or the memory."""
    out, stack = Path(out), spec.layout == "stack"  # a stack is a file, the rest folders
    if stack and out.exists():  # a file holds no mark: nothing tells it is this command's
        raise InputError(f"{out}: exists; choose a new path ({REPLACE_FLAG} replaces only a "
                         "folder this command made)")  # fmt: skip
    if not stack:
        check_output(out, OWNER, replace=spec.overwrite)
    check_room(out, spec.needs())
    truth = spec.truth()

    def write(path: Path) -> Path:
        return write_scene(path, truth, seed=spec.seed, layout=spec.layout,
                           difficulty=spec.difficulty)  # fmt: skip

    if stack:
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(out) as tmp:
            write(tmp)
        return out, truth
    with publishing(out, OWNER, replace=spec.overwrite) as work:
        scene = write(work)
    return out / scene.relative_to(work), truth


def write_scene(
    out: Path, truth: SceneTruth, *, seed: int = 0, layout: str = "tif", difficulty: str
) -> Path:
    """Write the scene as ``layout``: ``tif`` (band GeoTIFFs in ``out``), ``safe`` (an L2A
    product folder ``out``), ``stack`` (one 12-band GeoTIFF ``out`` at 10 m, the 20/60 m
    bands repeated, bands described by name) or a form of :data:`FORM_LAYOUTS` (in the folder
    ``out``); returns the scene's path (what ``bigearthnet-map scene`` takes)."""
    bands = render_scene(truth, seed, difficulty)
    if layout == "stack":
        write_stack(out, truth, bands)
        return out
    if layout in FORM_LAYOUTS:
        folder = out / "items" if layout.startswith("stac") else out
        return write_form(folder, bands, truth.size, layout, epsg=EPSG, origin=ORIGIN,
                          name=PRODUCT)  # fmt: skip
    return write_bands(out, bands, truth.size, layout)


def write_bands(
    out: Path,
    bands: dict[str, np.ndarray],
    size: int,
    layout: str,
    epsg: int = EPSG,
    origin: tuple[float, float] = ORIGIN,
) -> Path:
    """Write rendered ``bands`` of a ``size`` px scene whose upper-left corner is ``origin``
    in EPSG ``epsg``: ``tif`` (band GeoTIFFs in ``out``) or ``safe`` (an L2A product folder
    ``out``); returns ``out``."""
    import rasterio

    for band, image in bands.items():
        res, factor = constants.band_resolution_m(band), constants.band_factor(band)
        if layout == "safe":
            folder = out / "GRANULE" / GRANULE / "IMG_DATA" / f"R{res}m"
            path = folder / f"{TILE_DATE}_{band}_{res}m.jp2"
            image = stored(band, image)  # DN + 1,000, as baseline 04.00 stores
            driver = "JP2OpenJPEG"
        else:
            folder, path, driver = out, out / f"{band}.tif", "GTiff"
        folder.mkdir(parents=True, exist_ok=True)
        profile = _profile(size, factor, driver, image.dtype.name, epsg, origin)
        with rasterio.open(path, "w", **profile) as dst:
            if layout != "safe" and band != "SCL":  # what the values are: offset-free DN
                dst.scales, dst.offsets = (REFLECTANCE_SCALE,), (0.0,)
            dst.write(image, 1)
    if layout == "safe":
        (out / "MTD_MSIL2A.xml").write_text(_product_metadata(), encoding="utf-8")
    return out


def write_stack(out: Path, truth: SceneTruth, bands: dict[str, np.ndarray]) -> None:
    import rasterio

    profile = dict(_profile(truth.size, 1, "GTiff"), count=len(constants.BANDS))
    out.parent.mkdir(parents=True, exist_ok=True)
    with rasterio.open(out, "w", **profile) as dst:
        for index, band in enumerate(constants.BANDS, start=1):
            factor = constants.band_factor(band)
            dst.write(bands[band].repeat(factor, axis=0).repeat(factor, axis=1), index)
            dst.set_band_description(index, band)
        dst.scales = (REFLECTANCE_SCALE,) * dst.count  # offset-free DN
        dst.offsets = (0.0,) * dst.count


def _product_metadata() -> str:
    offsets = "\n".join(
        f'        <BOA_ADD_OFFSET band_id="{i}">{BOA_ADD_OFFSET}</BOA_ADD_OFFSET>'
        for i in range(13)
    )
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<n1:Level-2A_User_Product xmlns:n1="https://psd-14.sentinel2.eo.esa.int/PSD/User_Product_Level-2A.xsd">
  <n1:General_Info>
    <Product_Info><PROCESSING_BASELINE>04.00</PROCESSING_BASELINE></Product_Info>
    <Product_Image_Characteristics>
      <QUANTIFICATION_VALUES_LIST>
        <BOA_QUANTIFICATION_VALUE unit="none">10000</BOA_QUANTIFICATION_VALUE>
      </QUANTIFICATION_VALUES_LIST>
      <BOA_ADD_OFFSET_VALUES_LIST>
{offsets}
      </BOA_ADD_OFFSET_VALUES_LIST>
    </Product_Image_Characteristics>
  </n1:General_Info>
</n1:Level-2A_User_Product>
"""
