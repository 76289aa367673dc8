"""Land-cover maps of whole Sentinel-2 scenes: 120x120 px windows (1.2 km at 10 m, the
model's input) slid over the scene with a stride, every window's class probabilities spread
over the cells it covers and averaged where windows overlap, so the map's cell is the stride.

The scene is read by :class:`bigearthnet.maps.scene.input.Scene`, strip by strip (120 rows of the
10 m bands and the matching rows of the others, all columns): memory is about
``12 x 2 bytes x 120 x scene width`` per strip plus the batch, ~32 MB for a full 10,980 px
tile. The 20 m and 60 m bands of a window are upsampled by the code preprocessing uses
(:func:`bigearthnet.preprocessing.assembly.assemble`), so a window at a BigEarthNet patch's position
gives exactly that patch's shard image. Ranks take strips round-robin and their cell sums
meet in one allreduce; rank 0 writes the map (:mod:`.output`).

A window is skipped where more than half its 10 m pixels hold no usable data (nodata, as at
the scene's borders, or masked by the scene classification); a cell with more than half
such pixels, or that no window covered, is nodata, never a class.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from bigearthnet.core import distributed
from bigearthnet.maps.scene.input import WINDOW, Scene, Strip
from bigearthnet.preprocessing.assembly import assemble, one_blas_thread


@dataclass(frozen=True)
class WindowBands:
    """One window's bands at native resolution (what :func:`assemble` reads)."""

    bands: dict[str, np.ndarray]


@dataclass
class CellSums:
    """Per map cell: summed class probabilities, how many windows covered it, and (summed
    over the strips that saw it) the fraction of its 10 m pixels without usable data."""

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
    """(column, 120x120xC uint16 image of the scene's bands) of the windows with data of
    the strip at ``row``."""
    return windows_of(scene.strip(row), stride=stride, resampling=resampling)


def windows_of(strip: Strip, *, stride: int, resampling: str) -> Iterator[tuple[int, np.ndarray]]:
    """(column, image) of a strip's windows that are at most half without usable data."""
    width = strip.invalid.shape[1]
    # As preprocessing does: single-threaded BLAS is faster on these tiny products, and a
    # different thread split would round some upsampled values the other way.
    with one_blas_thread():
        yield from _strip_images(strip, width, stride, resampling)


def _strip_images(
    strip: Strip, width: int, stride: int, resampling: str
) -> Iterator[tuple[int, np.ndarray]]:
    strip_bands = tuple(strip.bands)  # the model's bands, in its order (Scene.bands)
    for col in window_origins(width, stride):
        if strip.invalid[:, col : col + WINDOW].mean() > 0.5:
            continue
        bands = {}
        for band, data in strip.bands.items():
            factor = WINDOW // data.shape[0]  # native pixel / 10 m (1 in a 10 m band stack)
            bands[band] = data[:, col // factor : (col + WINDOW) // factor]
        yield col, assemble(WindowBands(bands), resampling, strip_bands)


@dataclass
class StageTimes:
    """Seconds a rank spent reading and resampling windows, and in the model."""

    read: float = 0.0
    predict: float = 0.0


def predict_scene(
    scene: Scene,
    loaded,
    *,
    stride: int,
    resampling: str,
    batch_size: int,
    progress=None,
    times: StageTimes | None = None,
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
    times = StageTimes() if times is None else times
    per_strip = len(window_origins(scene.width, stride))
    for row in window_origins(scene.height, stride)[distributed.rank() :: distributed.size()]:
        started = time.perf_counter()
        strip = scene.strip(row)
        _measure_empty(sums, strip.invalid, row, stride)
        batch = list(windows_of(strip, stride=stride, resampling=resampling))
        times.read += time.perf_counter() - started
        for start in range(0, len(batch), batch_size):
            part = batch[start : start + batch_size]
            started = time.perf_counter()
            scores = loaded.predict(np.stack([image for _, image in part]))
            times.predict += time.perf_counter() - started
            for (col, _), p in zip(part, scores):
                r, c = row // stride, col // stride
                sums.probabilities[r : r + per_window, c : c + per_window] += p
                sums.windows[r : r + per_window, c : c + per_window] += 1
        if progress is not None:
            progress(per_strip)
    parts = (sums.probabilities, sums.windows, sums.empty, sums.looks)
    total = distributed.allreduce_sum(np.concatenate([p.ravel() for p in parts]), "scene_cells")
    cut = np.cumsum([p.size for p in parts])[:-1]
    return CellSums(*(t.reshape(p.shape) for t, p in zip(np.split(total, cut), parts)))


def _measure_empty(sums: CellSums, invalid: np.ndarray, row: int, stride: int) -> None:
    """The unusable fraction of the cells of the strip at ``row`` (a cell is seen by every
    strip that covers it; the fractions are averaged)."""
    cells = WINDOW // stride
    usable = (invalid.shape[1] // stride) * stride
    blocks = invalid[:, :usable].reshape(cells, stride, usable // stride, stride).mean(axis=(1, 3))
    r = row // stride
    sums.empty[r : r + cells, : usable // stride] += blocks
    sums.looks[r : r + cells, : usable // stride] += 1
