"""Land-cover maps of whole Sentinel-2 scenes: 120x120 px windows (1.2 km at 10 m, the
model's input) slid over the scene with a stride, every window's class probabilities spread
over the cells it covers and averaged where windows overlap, so the map's cell is the stride.

Input (:func:`find_bands`): a Sentinel-2 L2A product folder as distributed
(``*.SAFE/GRANULE/*/IMG_DATA/R10m|R20m|R60m/*_B02_10m.jp2`` ..., JPEG 2000 read through
rasterio/GDAL) or a folder of single-band GeoTIFFs named by band (``*B02*.tif``). Each band
is read at its native resolution; the 20 m and 60 m bands of a window are upsampled by the
code preprocessing uses (:func:`bigearthnet.shard_assembly.assemble`), so a window at a
BigEarthNet patch's position gives exactly that patch's shard image. Products of processing
baseline 04.00 and later add ``BOA_ADD_OFFSET`` (-1000) to every reflectance; it is applied,
so values match the archive's.

Reading is by strips of windows (120 rows of the 10 m bands and the matching rows of the
others, all columns): memory is about ``12 x 2 bytes x 120 x scene width`` per strip plus
the batch, ~32 MB for a full 10,980 px tile. Ranks take strips round-robin and their cell
sums meet in one allreduce; rank 0 writes the Cloud-Optimized GeoTIFF (:mod:`scene_output`).

A window is skipped where more than half its 10 m pixels are nodata (0 in every 10 m band,
as at the scene's borders); a cell no window covered is nodata, never a class.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bigearthnet import constants, distributed
from bigearthnet.errors import InputError
from bigearthnet.shard_assembly import assemble

WINDOW = constants.PATCH_SIZE  # 120 px at 10 m
# A stride must keep every window on the 60 m grid (multiples of 6 px) and tile the window
# exactly (so each window covers whole cells).
STRIDES = tuple(s for s in range(6, WINDOW + 1, 6) if WINDOW % s == 0)
BAND_FACTOR = {b: constants.BAND_RESOLUTION_M[b] // 10 for b in constants.BANDS}
# The L2A product metadata numbers its bands 0..12 in this order (B10 has no L2A image).
PRODUCT_BAND_IDS = ("B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09",
                    "B10", "B11", "B12")  # fmt: skip


class SceneError(InputError):
    """A scene that cannot be mapped (missing bands, mismatched grids, too small)."""


@dataclass(frozen=True)
class WindowBands:
    """One window's bands at native resolution (what :func:`assemble` reads)."""

    bands: dict[str, np.ndarray]


def find_bands(scene: Path) -> dict[str, Path]:
    """Band name -> file of the 12 BigEarthNet bands in an L2A SAFE folder or a folder of
    single-band GeoTIFFs; SceneError naming what is missing."""
    if not scene.is_dir():
        raise SceneError(f"{scene}: not a folder (an L2A .SAFE product or band GeoTIFFs)")
    jp2 = sorted(scene.glob("GRANULE/*/IMG_DATA/R*m/*.jp2"))
    found: dict[str, Path] = {}
    for band in constants.BANDS:
        if jp2:
            res = constants.BAND_RESOLUTION_M[band]
            pattern = re.compile(rf"_{band}_{res}m\.jp2$")
        else:
            pattern = re.compile(rf"(^|[_\-.]){band}(?=[_\-.]).*\.tiff?$", re.IGNORECASE)
        matches = [p for p in (jp2 or sorted(scene.iterdir())) if pattern.search(p.name)]
        if matches:
            found[band] = matches[0]
    missing = [b for b in constants.BANDS if b not in found]
    if missing:
        raise SceneError(f"{scene}: no image of band(s) {', '.join(missing)}")
    return found


def boa_offsets(scene: Path) -> dict[str, int]:
    """Band -> BOA_ADD_OFFSET of the product (baseline >= 04.00), else {} (no offset)."""
    metadata = next(iter(sorted(scene.glob("MTD_MSIL2A.xml"))), None)
    if metadata is None:
        return {}
    try:
        root = ET.parse(metadata).getroot()
    except ET.ParseError as err:
        raise SceneError(f"{metadata}: unreadable product metadata ({err})") from None
    offsets = {}
    for element in root.iter("BOA_ADD_OFFSET"):
        band_id = int(element.get("band_id", "-1"))
        if 0 <= band_id < len(PRODUCT_BAND_IDS):
            offsets[PRODUCT_BAND_IDS[band_id]] = int(float(element.text or 0))
    return offsets


class Scene:
    """The 12 bands of a scene, open for windowed reading."""

    def __init__(self, path: Path) -> None:
        import rasterio

        self.path = path
        self.files = find_bands(path)
        self.offsets = boa_offsets(path)
        self._datasets = {}
        try:
            for band, file in self.files.items():
                self._datasets[band] = rasterio.open(file)
        except rasterio.errors.RasterioIOError as err:
            self.close()
            raise SceneError(f"{path}: cannot read a band ({err})") from None
        self._check_grids()
        reference = self._datasets["B02"]
        self.crs, self.transform = reference.crs, reference.transform
        self.height, self.width = reference.height, reference.width
        if self.height < WINDOW or self.width < WINDOW:
            raise SceneError(
                f"{path}: {self.width}x{self.height} px at 10 m, smaller than one "
                f"{WINDOW}x{WINDOW} window"
            )

    def _check_grids(self) -> None:
        reference = self._datasets["B02"]
        for band, dataset in self._datasets.items():
            factor = BAND_FACTOR[band]
            if dataset.crs != reference.crs:
                raise SceneError(f"{self.files[band]}: CRS {dataset.crs} differs from B02's")
            same_size = (dataset.width * factor, dataset.height * factor) == (
                reference.width,
                reference.height,
            )
            if not same_size or not np.allclose(dataset.bounds, reference.bounds, atol=1e-3):
                raise SceneError(f"{self.files[band]}: footprint differs from B02's")

    def close(self) -> None:
        for dataset in self._datasets.values():
            dataset.close()

    def read_b02(self, window) -> np.ndarray:
        return self._datasets["B02"].read(1, window=window)

    def strip(self, row: int) -> dict[str, np.ndarray]:
        """All columns of the window rows starting at 10 m row ``row``, each band at its
        native resolution, offsets applied (uint16, 0 stays 0: nodata)."""
        from rasterio.windows import Window

        out = {}
        for band, dataset in self._datasets.items():
            factor = BAND_FACTOR[band]
            window = Window(0, row // factor, dataset.width, WINDOW // factor)
            data = dataset.read(1, window=window)
            offset = self.offsets.get(band, 0)
            if offset:
                shifted = data.astype(np.int32) + offset
                data = np.where(data == 0, 0, np.clip(shifted, 1, 65535)).astype(np.uint16)
            out[band] = data
        return out


@dataclass
class CellSums:
    """Per map cell: summed class probabilities, how many windows covered it, and (summed
    over the strips that saw it) the fraction of its 10 m pixels without data."""

    probabilities: np.ndarray  # (rows, cols, C) float64
    windows: np.ndarray  # (rows, cols) float64
    empty: np.ndarray  # (rows, cols) float64: sum of nodata fractions
    looks: np.ndarray  # (rows, cols) float64: strips that measured it

    def has_data(self) -> np.ndarray:
        """Cells covered by a window and mostly data (a border cell is nodata)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return (self.windows > 0) & (self.empty / self.looks <= 0.5)

    def mean(self) -> np.ndarray:
        """(rows, cols, C) probabilities, NaN where no window covered the cell."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.probabilities / self.windows[..., None]


def window_origins(size: int, stride: int) -> list[int]:
    """Origins of the windows along one axis (the last window ends inside the scene)."""
    return list(range(0, size - WINDOW + 1, stride))


def strip_windows(
    scene: Scene, row: int, stride: int, resampling: str
) -> Iterator[tuple[int, np.ndarray]]:
    """(column, 120x120x12 uint16 image) of the windows of one strip with data."""
    strip = scene.strip(row)
    for col in window_origins(scene.width, stride):
        bands = {
            band: data[:, col // BAND_FACTOR[band] : (col + WINDOW) // BAND_FACTOR[band]]
            for band, data in strip.items()
        }
        if nodata_mask(bands["B02"]).mean() > 0.5:
            continue
        yield col, assemble(WindowBands(bands), resampling)


def nodata_mask(b02: np.ndarray) -> np.ndarray:
    """10 m pixels without data (0 in B02: L2A products fill nodata with 0 in every band)."""
    return b02 == 0


def predict_scene(
    scene: Scene, loaded, *, stride: int, resampling: str, batch_size: int, progress=None
) -> CellSums:
    """Collective: every rank scores its strips; the cell sums of all ranks, on all ranks."""
    per_window = WINDOW // stride
    rows, cols = math.ceil(scene.height / stride), math.ceil(scene.width / stride)
    sums = CellSums(
        np.zeros((rows, cols, loaded.num_classes)),
        np.zeros((rows, cols)),
        np.zeros((rows, cols)),
        np.zeros((rows, cols)),
    )
    origins = window_origins(scene.height, stride)
    for row in origins[distributed.rank() :: distributed.size()]:
        _measure_empty(sums, scene, row, stride)
        batch = list(strip_windows(scene, row, stride, resampling))
        for start in range(0, len(batch), batch_size):
            part = batch[start : start + batch_size]
            scores = loaded.predict(np.stack([image for _, image in part]))
            for (col, _), p in zip(part, scores):
                r, c = row // stride, col // stride
                sums.probabilities[r : r + per_window, c : c + per_window] += p
                sums.windows[r : r + per_window, c : c + per_window] += 1
        if progress is not None:
            progress(len(batch))
    parts = (sums.probabilities, sums.windows, sums.empty, sums.looks)
    total = distributed.allreduce_sum(np.concatenate([p.ravel() for p in parts]), "scene_cells")
    cut = np.cumsum([p.size for p in parts])[:-1]
    return CellSums(*(t.reshape(p.shape) for t, p in zip(np.split(total, cut), parts)))


def _measure_empty(sums: CellSums, scene: Scene, row: int, stride: int) -> None:
    """The nodata fraction of the cells of the strip at ``row`` (a cell is seen by every
    strip that covers it; the fractions are averaged)."""
    from rasterio.windows import Window

    b02 = scene.read_b02(Window(0, row, scene.width, WINDOW))
    empty = nodata_mask(b02)
    cells = WINDOW // stride
    usable = (scene.width // stride) * stride
    blocks = empty[:, :usable].reshape(cells, stride, usable // stride, stride).mean(axis=(1, 3))
    r = row // stride
    sums.empty[r : r + cells, : usable // stride] += blocks
    sums.looks[r : r + cells, : usable // stride] += 1
