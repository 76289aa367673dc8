"""A Sentinel-2 scene open for reading by strips: where its 12 bands are, their grids, the
reflectance offset, the area of interest and the pixels without usable data.

Inputs (:func:`find_bands`):

- an L2A product folder as distributed
  (``*.SAFE/GRANULE/*/IMG_DATA/R10m|R20m|R60m/*_B02_10m.jp2`` ..., JPEG 2000 read through
  rasterio/GDAL), each band at its native resolution;
- a folder of single-band GeoTIFFs named by band (``*B02*.tif`` ..., native resolutions);
- one multi-band GeoTIFF at 10 m whose bands are named by ``band_order`` or by the band
  descriptions (``B02`` or Earth Engine's ``B2``), never taken in an assumed order.

Each band's reflectance offset is decided from the scene's metadata by
:mod:`bigearthnet.maps.radiometry` and applied, so values match the archive's. Pixels without
data are 0 in B02 (L2A fills nodata with 0 in every band); with ``mask_clouds`` the scene
classification band (SCL, 20 m) also removes cloud shadows, clouds, cirrus and snow
(:data:`SCL_MASKED`).

A ``bbox`` (scene CRS) is widened to the 60 m grid, so every band's window starts on a
whole native pixel and a window there is read exactly as over the whole scene.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError
from bigearthnet.core.util import first_line
from bigearthnet.maps.radiometry import Radiometry, decide

WINDOW = constants.PATCH_SIZE  # 120 px at 10 m
BAND_FACTOR = {b: constants.BAND_RESOLUTION_M[b] // 10 for b in constants.BANDS}
COARSEST = max(BAND_FACTOR.values())  # 6: the 60 m grid every window origin sits on
# Scene classification (L2A SCL) values that hide the land cover.
SCL_MASKED = {3: "cloud shadow", 8: "cloud, medium probability", 9: "cloud, high probability",
              10: "thin cirrus", 11: "snow or ice"}  # fmt: skip
SCL_FACTOR = 2  # SCL is delivered at 20 m


class SceneError(InputError):
    """A scene that cannot be mapped (missing bands, mismatched grids, too small)."""


@dataclass(frozen=True)
class BandSource:
    """Where one band is: a file, its band index there (1-based), native pixel / 10 m."""

    file: Path
    index: int
    factor: int


@dataclass(frozen=True)
class Strip:
    """The window rows of a strip: each band at native resolution (offsets applied), and
    which 10 m pixels hold no usable data (nodata, or masked by SCL)."""

    bands: dict[str, np.ndarray]
    invalid: np.ndarray  # (WINDOW, width) bool at 10 m


def find_bands(
    scene: Path,
    *,
    band_order: Sequence[str] | None = None,
    bands: tuple[str, ...] = constants.BANDS,
) -> dict[str, BandSource]:
    """Band name -> source of each of ``bands`` (the model's Sentinel-2 bands); SceneError
    naming what is missing."""
    if scene.is_file():
        return _stacked_bands(scene, band_order, bands)
    if not scene.is_dir():
        raise SceneError(f"{scene}: no such scene (an L2A .SAFE folder, band GeoTIFFs or one file)")
    if band_order:
        raise SceneError(f"{scene}: --band-order applies to a multi-band GeoTIFF, not a folder")
    jp2 = sorted(scene.glob("GRANULE/*/IMG_DATA/R*m/*.jp2"))
    found: dict[str, BandSource] = {}
    for band in bands:
        file = _band_file(scene, jp2, band, constants.BAND_RESOLUTION_M[band])
        if file is not None:
            found[band] = BandSource(file, 1, BAND_FACTOR[band])
    missing = [b for b in bands if b not in found]
    if missing:
        raise SceneError(f"{scene}: no image of band(s) {', '.join(missing)}")
    return found


def find_scl(scene: Path) -> BandSource | None:
    """The scene classification band (20 m) of a SAFE folder or a band-GeoTIFF folder."""
    if not scene.is_dir():
        return None
    jp2 = sorted(scene.glob("GRANULE/*/IMG_DATA/R*m/*.jp2"))
    file = _band_file(scene, jp2, "SCL", 20)
    return None if file is None else BandSource(file, 1, SCL_FACTOR)


def _band_file(scene: Path, jp2: list[Path], band: str, res: int) -> Path | None:
    if jp2:
        pattern = re.compile(rf"_{band}_{res}m\.jp2$")
    else:
        pattern = re.compile(rf"(^|[_\-.]){band}(?=[_\-.]).*\.tiff?$", re.IGNORECASE)
    matches = [p for p in (jp2 or sorted(scene.iterdir())) if pattern.search(p.name)]
    return matches[0] if matches else None


def _stacked_bands(
    file: Path, band_order: Sequence[str] | None, bands: tuple[str, ...]
) -> dict[str, BandSource]:
    """One multi-band GeoTIFF: bands named by ``band_order``, else by their descriptions
    (``B02`` or Earth Engine's ``B2``); never in an assumed order."""
    import rasterio

    try:
        with rasterio.open(file) as src:
            count, descriptions, res = src.count, src.descriptions, src.res
    except rasterio.errors.RasterioIOError as err:
        raise SceneError(f"{file}: cannot read ({err})") from None
    if band_order:
        names = [band_name(name) for name in band_order]
    elif all(descriptions):
        names = [band_name(d) for d in descriptions]
    else:
        raise SceneError(
            f"{file}: its bands are not named (no band descriptions): give --band-order "
            "B01,B02,... ('-' for a band to ignore)"
        )
    if len(names) != count:
        raise SceneError(f"{file}: {count} bands, but the band order names {len(names)}")
    unknown = [n for n in names if n not in constants.BANDS and n != "-"]
    if unknown:
        raise SceneError(f"{file}: unknown band name(s) {', '.join(unknown)} in the band order")
    missing = [b for b in bands if b not in names]
    if missing:
        raise SceneError(f"{file}: no band {', '.join(missing)} (see --band-order)")
    if not np.allclose(res, (10.0, 10.0)):
        raise SceneError(f"{file}: {res[0]:g} x {res[1]:g} pixels; a band stack must be at 10 m")
    return {name: BandSource(file, i + 1, 1) for i, name in enumerate(names) if name in bands}


def band_name(name: str) -> str:
    """A band's name as this project writes it: Earth Engine's ``B2`` is ``B02``; ``-`` (a
    band to ignore) and unknown names stay as they are (and are refused by name)."""
    match = re.fullmatch(r"B0?(\d{1,2})(A?)", name.strip(), re.IGNORECASE)
    if match is None:
        return name.strip()
    number, narrow = int(match.group(1)), match.group(2).upper()
    return f"B{number}A" if narrow else f"B{number:02d}"


def require_l2a(scene: Path) -> None:
    """SceneError for a Level-1C product (top-of-atmosphere reflectance; the models learned
    from L2A's surface reflectance), known by its metadata file or its product name. Band
    GeoTIFFs say neither and are taken as L2A."""
    l1c_metadata = scene.is_dir() and any(scene.glob("MTD_MSIL1C.xml"))
    if l1c_metadata or "_MSIL1C_" in scene.name:
        raise SceneError(
            f"{scene}: a Level-1C product (top-of-atmosphere reflectance); maps take L2A "
            "(surface reflectance: the L2A product of the same scene, or Sen2Cor's output)"
        )


def radiometry_of(
    scene: Path, sources: dict[str, BandSource], boa_offset: int | None
) -> Radiometry:
    """The offset of each band of ``sources`` (:mod:`bigearthnet.maps.radiometry`)."""
    return decide(scene, {band: (s.file, s.index) for band, s in sources.items()}, boa_offset)


def band_list(text: str) -> tuple[str, ...]:
    """``B04,B03,-,B02`` -> the band name of each band of a stack, in order."""
    return tuple(name.strip() for name in text.split(","))


def parse_bbox(text: str) -> tuple[float, float, float, float]:
    """``minx,miny,maxx,maxy`` -> floats; ValueError naming what is wrong."""
    try:
        minx, miny, maxx, maxy = (float(v) for v in text.split(","))
    except ValueError:
        raise InputError(f"--bbox wants minx,miny,maxx,maxy (four numbers), got {text!r}") from None
    if not (minx < maxx and miny < maxy):
        raise InputError(f"--bbox {text}: min must be below max on both axes")
    return minx, miny, maxx, maxy


class Scene:
    """The Sentinel-2 ``bands`` of a scene (optionally a bbox of it), open for reading by
    strips. ``height`` and ``width`` are 10 m px of the area read, ``transform`` its grid."""

    def __init__(
        self,
        path: Path,
        *,
        bbox: tuple[float, float, float, float] | None = None,
        band_order: Sequence[str] | None = None,
        mask_clouds: bool = False,
        bands: tuple[str, ...] = constants.BANDS,
        boa_offset: int | None = None,
    ) -> None:
        import rasterio
        from rasterio.transform import Affine

        self.path = path
        self.bands = bands
        require_l2a(path)
        self.sources = find_bands(path, band_order=band_order, bands=bands)
        self.scl = find_scl(path) if mask_clouds else None
        if mask_clouds and self.scl is None:
            raise SceneError(f"{path}: --mask-clouds needs the scene classification band (SCL)")
        files = {s.file for s in self.sources.values()} | ({self.scl.file} if self.scl else set())
        self._open = {}
        for file in sorted(files):
            try:
                self._open[file] = rasterio.open(file)
            except rasterio.errors.RasterioIOError as err:
                self.close()  # the band file to blame, not the scene (a header-only JP2)
                raise SceneError(f"{file}: cannot read this band ({first_line(err)})") from None
        reference = self._open[self.sources["B02"].file]
        self._check_grids(reference)
        try:  # once every band file has opened: a damaged one is named as such first
            self.radiometry = radiometry_of(path, self.sources, boa_offset)
        except InputError:
            self.close()
            raise
        self.offsets = self.radiometry.offsets
        self.crs = reference.crs
        self.row0, self.col0, self.height, self.width = self._area(bbox, reference)
        self.transform = reference.transform @ Affine.translation(self.col0, self.row0)
        if self.height < WINDOW or self.width < WINDOW:
            raise SceneError(
                f"{path}: {self.width}x{self.height} px at 10 m, smaller than one "
                f"{WINDOW}x{WINDOW} window"
            )

    def _check_grids(self, reference) -> None:
        named = dict(self.sources, **({"SCL": self.scl} if self.scl else {}))
        for band, source in named.items():
            dataset = self._open[source.file]
            if dataset.crs is None or dataset.transform.is_identity:
                # A truncated GeoTIFF loses its georeferencing tags before its pixels: say
                # so, rather than that its (absent) CRS differs from B02's.
                raise SceneError(f"{source.file}: no georeferencing (CRS or geotransform) "
                                 "in this band: a truncated or plain TIFF")  # fmt: skip
            if dataset.crs != reference.crs:
                raise SceneError(f"{source.file}: CRS {dataset.crs} differs from B02's")
            size = (dataset.width * source.factor, dataset.height * source.factor)
            if size != (reference.width, reference.height) or not np.allclose(
                dataset.bounds, reference.bounds, atol=1e-3
            ):
                raise SceneError(f"{source.file}: footprint of {band} differs from B02's")

    def _area(self, bbox, reference) -> tuple[int, int, int, int]:
        """(row0, col0, height, width) in 10 m px: the whole scene, or ``bbox`` widened to
        the 60 m grid and clipped to the scene."""
        if bbox is None:
            return 0, 0, reference.height, reference.width
        minx, miny, maxx, maxy = bbox
        origin_x, origin_y = reference.transform.c, reference.transform.f
        px, py = reference.transform.a, -reference.transform.e
        col0 = math.floor((minx - origin_x) / px / COARSEST) * COARSEST
        col1 = math.ceil((maxx - origin_x) / px / COARSEST) * COARSEST
        row0 = math.floor((origin_y - maxy) / py / COARSEST) * COARSEST
        row1 = math.ceil((origin_y - miny) / py / COARSEST) * COARSEST
        col0, row0 = max(col0, 0), max(row0, 0)
        col1, row1 = min(col1, reference.width), min(row1, reference.height)
        if col1 <= col0 or row1 <= row0:
            b = reference.bounds
            raise SceneError(
                f"{self.path}: --bbox {minx:g},{miny:g},{maxx:g},{maxy:g} lies outside the "
                f"scene ({b.left:g},{b.bottom:g},{b.right:g},{b.top:g})"
            )
        return row0, col0, row1 - row0, col1 - col0

    def close(self) -> None:
        for dataset in self._open.values():
            dataset.close()

    def __enter__(self) -> Scene:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def strip(self, row: int) -> Strip:
        """The window rows starting at 10 m row ``row`` of the area, all its columns; the
        bands in the model's order (``self.bands``)."""
        bands = {}
        for band in self.bands:
            data = self._read(self.sources[band], row)
            offset = self.offsets.get(band, 0)
            if offset:
                shifted = data.astype(np.int32) + offset
                data = np.where(data == 0, 0, np.clip(shifted, 1, 65535)).astype(np.uint16)
            bands[band] = data
        invalid = bands["B02"] == 0
        if self.scl is not None:
            scl = self._read(self.scl, row)
            masked = np.isin(scl, list(SCL_MASKED))
            invalid |= masked.repeat(SCL_FACTOR, axis=0).repeat(SCL_FACTOR, axis=1)
        return Strip(bands, invalid)

    def _read(self, source: BandSource, row: int) -> np.ndarray:
        from rasterio.windows import Window

        f = source.factor
        window = Window(self.col0 // f, (self.row0 + row) // f, self.width // f, WINDOW // f)
        try:
            return self._open[source.file].read(source.index, window=window)
        except Exception as err:  # GDAL's decoders raise several types on a damaged file
            raise SceneError(f"{source.file}: cannot read ({first_line(err)})") from None
