"""A scene map at 10 m from the dense head: the scene's own 10 m grid, a class per pixel.

Large square windows (:mod:`.tiles`) are read with their context (:meth:`Scene.rect`: the
20 m and 60 m bands upsampled by preprocessing's code, as for a patch), run through the
model at once (:class:`~bigearthnet.inference.pixel_model.PixelModel`), and each window's
core is kept: the top class (the official 19-class order) and the probabilities as stored
(round(p x 250), :func:`~bigearthnet.formats.class_map.scaled_pixels`). A pixel without usable
data (a band's nodata, or masked by SCL, 20 m taken to its four 10 m pixels) is nodata;
a window whose core has none is not run.

Memory stays a window's, whatever the scene: ranks take rows of windows round-robin and
write each row's cores into a part file (one GeoTIFF of the top class and the
probabilities, each band apart: :func:`~bigearthnet.formats.cog.open_part`) in a work
folder beside the map; after a barrier rank 0 copies them into the map and its
probabilities companion (:func:`~bigearthnet.formats.class_map.write_class_map` from a
:class:`~bigearthnet.formats.cog.Mosaic` of the parts) and removes the folder. The ranks
must share the map's folder (as they share a region's).
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bigearthnet.core import distributed
from bigearthnet.core.util import temp_sibling, write_csv
from bigearthnet.formats.class_map import NODATA, areas_path, scaled_pixels, write_class_map
from bigearthnet.formats.cog import Mosaic, Part, open_part
from bigearthnet.maps.preview import drawn_step
from bigearthnet.maps.scene.input import Scene
from bigearthnet.maps.scene.output import preview, preview_path
from bigearthnet.maps.scene.tiles import Tiling
from bigearthnet.maps.scene.windows import StageTimes, WindowBands
from bigearthnet.preprocessing.assembly import assemble, one_blas_thread

if TYPE_CHECKING:
    from bigearthnet.inference.pixel_model import PixelRunner


@dataclass(frozen=True)
class PixelMap:
    """What the ranks made: the part files (all ranks'), each class's pixels and the
    nodata pixels (summed over the ranks), the windows run."""

    parts: tuple[Part, ...]
    counts: np.ndarray  # (classes + 1,): pixels per top class, then nodata
    windows: int


def predict_pixels(
    scene: Scene, model: PixelRunner, tiling: Tiling, *, resampling: str, work: Path,
    progress=None, times: StageTimes | None = None,
) -> PixelMap:  # fmt: skip
    """Collective: every rank maps its rows of windows into part files in ``work``; the
    parts and counts of all ranks, on all ranks."""
    from rasterio.windows import Window

    rows, cols = scene_windows(scene, tiling)
    shape = window_shape(scene, tiling)
    times = StageTimes() if times is None else times
    classes = model.classes
    counts = np.zeros(classes + 1)
    windows = 0
    parts = []
    grid = {"crs": scene.crs, "transform": scene.transform}
    for index in range(len(rows))[distributed.rank() :: distributed.size()]:
        row, top, bottom = rows[index]
        part = Part(work / f"row-{index:05d}.tif", (), top, 0, bottom - top, scene.width)
        with open_part(part.path, (1 + classes, part.height, part.width), "uint8", grid,
                       NODATA) as dst:  # fmt: skip
            for col, left, right in cols:
                keep = (slice(top - row, bottom - row), slice(left - col, right - col))
                bands, ran = _window(scene, model, shape, (row, col), keep, resampling,
                                     times)  # fmt: skip
                windows += ran
                counts += np.bincount(bands[0].ravel(), minlength=NODATA + 1)[
                    [*range(classes), NODATA]
                ]
                dst.write(bands, window=Window(left, 0, right - left, part.height))
        parts.append(part)
        if progress is not None:
            progress(len(cols))
    counts = distributed.allreduce_sum(np.append(counts, windows), "pixel_map_counts")
    found = distributed.allgather_object(parts, "pixel_map_parts")
    everything = tuple(sorted((p for rank_parts in found for p in rank_parts), key=lambda p: p.row))
    return PixelMap(everything, counts[:-1].astype(np.int64), int(counts[-1]))


def scene_windows(scene: Scene, tiling: Tiling) -> tuple[list, list]:
    """The windows of ``tiling`` along the area's rows and columns
    (:meth:`Tiling.windows`: at the whole scene's edges they keep up to the edge)."""
    return (tiling.windows(scene.row0, scene.height, scene.extent[0]),
            tiling.windows(scene.col0, scene.width, scene.extent[1]))  # fmt: skip


def window_shape(scene: Scene, tiling: Tiling) -> tuple[int, int]:
    """(height, width) of every window of ``tiling`` on ``scene`` (:meth:`Tiling.side`)."""
    return (tiling.side(scene.row0, scene.height, scene.extent[0]),
            tiling.side(scene.col0, scene.width, scene.extent[1]))  # fmt: skip


def _window(scene: Scene, model: PixelRunner, size: tuple[int, int], origin: tuple[int, int],
            keep: tuple[slice, slice], resampling: str,
            times: StageTimes) -> tuple[np.ndarray, int]:  # fmt: skip
    """(1 + C, rows, cols) uint8 of the ``keep`` part of the window of ``size`` (height,
    width) px at
    ``origin`` (top class, then the stored probabilities; NODATA where no usable data),
    and 1 if the model ran."""
    started = time.perf_counter()
    rect = scene.rect(*origin, *size)
    invalid = rect.invalid[keep]
    if invalid.all():
        times.read += time.perf_counter() - started
        return np.full((1 + model.classes, *invalid.shape), NODATA, np.uint8), 0
    with one_blas_thread():  # as preprocessing: the same rounding of the upsampled values
        image = assemble(WindowBands(rect.bands), resampling, tuple(rect.bands), size=size)
    times.read += time.perf_counter() - started
    started = time.perf_counter()
    probabilities = model(image[None])[0][keep]
    times.predict += time.perf_counter() - started
    bands = np.empty((1 + model.classes, *invalid.shape), np.uint8)
    bands[0] = np.where(invalid, NODATA, probabilities.argmax(axis=-1))
    bands[1:] = scaled_pixels(probabilities, invalid)
    return bands, 1


def write_pixel_map(path: Path, made: PixelMap, scene: Scene, classes: list[str],
                    tags: dict) -> None:  # fmt: skip
    """Rank 0: ``<path>.areas.csv``, the preview, then the class map and its probabilities
    (COGs copied from the parts), the map last."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # an older map goes first: its presence says all is there
    transform = scene.transform
    cell_km2 = abs(transform.a * transform.e) / 1e6
    rows = [[name, int(n), f"{n * cell_km2:.4f}"] for name, n in
            zip([*classes, "nodata"], made.counts)]  # fmt: skip
    write_csv(areas_path(path), ("class", "cells", "km2"), rows)
    top, step = _preview_top(made.parts, scene.height, scene.width)
    preview(preview_path(path), top, transform=transform, classes=classes, tags=tags, step=step)
    count = len(classes)
    on_one = [Part(p.path, (1,), p.row, p.col, p.height, p.width) for p in made.parts]
    on_rest = [Part(p.path, tuple(range(2, count + 2)), p.row, p.col, p.height, p.width)
               for p in made.parts]  # fmt: skip
    size = (scene.height, scene.width)
    grid = {"crs": scene.crs, "transform": transform}
    write_class_map(path, Mosaic(1, *size, "uint8", tuple(on_one)), grid, classes, tags,
                    probabilities=Mosaic(count, *size, "uint8", tuple(on_rest)))  # fmt: skip


def _preview_top(parts: tuple[Part, ...], height: int, width: int) -> tuple[np.ndarray, int]:
    """The top class every ``step`` px (nearest), read from the parts: what the preview
    draws (:func:`~bigearthnet.maps.preview.drawn_step`), not the whole map."""
    import rasterio

    step = drawn_step(height, width)
    top = np.full((math.ceil(height / step), math.ceil(width / step)), NODATA, np.uint8)
    rows = np.arange(0, height, step)
    cols = np.arange(0, width, step)
    for part in parts:
        inside = rows[(rows >= part.row) & (rows < part.row + part.height)]
        if len(inside):
            with rasterio.open(part.path) as src:
                band = src.read(1)
            top[inside // step] = band[inside - part.row][:, cols]
    return top, step


def work_folder(out: Path) -> Path:
    """Collective: a fresh folder beside ``out`` for the part files, the same on all
    ranks."""
    work = temp_sibling(out, "pixels") if distributed.is_root() else None
    work = Path(distributed.broadcast_object(str(work), "pixel_map_work"))
    if distributed.is_root():
        work.mkdir(parents=True)
    distributed.barrier()
    return work


def remove_work(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
