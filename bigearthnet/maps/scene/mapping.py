"""``bigearthnet-map scene``: a trained run and a Sentinel-2 scene -> a land-cover map, on
one process or N Horovod ranks (each its strips or rows of windows; rank 0 writes): at
10 m from a model's dense head (:mod:`.pixels`), or the classifier's cells (:mod:`.windows`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from bigearthnet.core import constants, distributed
from bigearthnet.core.progress import progress_bar
from bigearthnet.formats.class_map import classes_tags, linked_tags
from bigearthnet.maps.radiometry import dispute
from bigearthnet.maps.scene.input import Scene, SceneError
from bigearthnet.maps.scene.options import PIXEL_CELL_M, MapKind, SceneMapOptions, map_kind
from bigearthnet.maps.scene.output import write_scene_map
from bigearthnet.maps.scene.pixels import (
    predict_pixels,
    remove_work,
    scene_windows,
    window_shape,
    work_folder,
    write_pixel_map,
)
from bigearthnet.maps.scene.tiles import (
    Tiling,
    check_window_memory,
    memory_window,
    window_allowance,
)
from bigearthnet.maps.scene.windows import StageTimes, predict_scene, window_origins

if TYPE_CHECKING:
    from bigearthnet.inference.pixel_model import PixelRunner
    from bigearthnet.inference.predictor import Predictor
    from bigearthnet.maps.inputs import SceneForm

log = distributed.log


def scene_map_tags(
    scene: SceneForm,
    predictor: Predictor,
    *,
    kind: MapKind,
    resampling: str,
    mask_clouds: bool,
    values: Mapping[str, str],
) -> dict[str, str]:
    """What made a scene map, as its tags: the scene (resolved path, and its form's digest:
    its files' sizes and mtimes, a STAC item's content), the model (its provenance with the
    weights' digest, its classes), the map's kind (10 m from the dense head or the
    classifier's cells: :meth:`MapKind.tags`), the options and how the values were read
    (:meth:`~bigearthnet.maps.scene.input.Scene.values_tags`: the reflectance offset applied,
    the metadata's and the pixels' readings, which won). A map whose tags equal these was
    made as this call would make it; any other is remade (a region rerun reuses maps by
    this). The map keeps the paths among them relative to its folder
    (:func:`~bigearthnet.formats.class_map.linked_tags`): its tags name no folder of the
    machine that made it, and the digests say what the files are wherever they lie."""
    return {
        "scene": str(scene.path.resolve()),
        "scene_inputs": scene.digest(),
        **predictor.provenance,
        **classes_tags(predictor.pixel_class_names if kind.pixels else predictor.class_names),
        **kind.tags(),
        "resampling": resampling,
        "clouds_masked": str(mask_clouds),
        **values,  # the reflectance offset applied, and why
    }


def map_scene(form: SceneForm, out: Path, opts: SceneMapOptions, loaded: Predictor) -> dict:
    """Collective (``distributed.init`` first, before ``loaded`` was opened, so that the
    thread pools are sized): map the scene ``form`` identified (any form of
    :mod:`bigearthnet.maps.inputs`) with the model ``loaded`` (a region maps many scenes with
    one): at 10 m from its dense head unless ``--stride`` asks for its classifier's cells
    (:func:`~.options.map_kind`); rank 0 writes ``out``. Returns a summary (windows,
    cells, seconds, windows/s, and this rank's seconds reading and in the model)."""
    source = loaded.provenance.get("export") or loaded.provenance.get("run_dir")
    kind = map_kind(opts, loaded.has_dense_head, source, loaded.provenance["model"])
    classes = loaded.pixel_class_names if kind.pixels else loaded.class_names
    if opts.labels is not None and len(classes) != opts.labels:
        raise SceneError(
            f"{source}: its model predicts {len(classes)} classes"
            f"{' per pixel (its dense head)' if kind.pixels else ''}, not the requested "
            f"{opts.labels}"
        )
    bands = tuple(loaded.bands)
    if any(band in constants.S1_BANDS for band in bands):
        raise SceneError(
            f"{source}: its model takes {constants.describe_bands(bands)}; "
            "scene maps read Sentinel-2 scenes only (a Sentinel-1 scene map is out of scope)"
        )
    if kind.pixels:  # the window, fitting in memory (a scene's are no larger): first
        kind = sized_kind(loaded, kind)
    scene = Scene(form, bbox=opts.bbox, band_order=opts.band_order, bands=bands,
                  mask_clouds=opts.mask_clouds, boa_offset=opts.boa_offset)  # fmt: skip
    method = opts.resampling or loaded.resampling  # as the model's training data was
    tags = scene_map_tags(
        form, loaded, kind=kind, resampling=method, mask_clouds=opts.mask_clouds,
        values=scene.values_tags(),
    )  # fmt: skip
    if scene.radiometry.disputed and distributed.is_root():
        log.warning("%s: %s", form.ref, dispute(scene.radiometry.tags()))
    try:
        if kind.pixels:
            tiling = Tiling(kind.window, margin=kind.margin)
            pixel_model = loaded.pixel_model(window_shape(scene, tiling))
            summary = _map_pixels(scene, out, opts, pixel_model, tiling, method, tags, classes)
        else:
            summary = _map_cells(scene, out, opts, loaded, kind, method, tags)
        if distributed.is_root():
            log.info(
                "scene map %s: %s, %d windows on %d rank(s), %d x %d px of the map, "
                "%.1f windows/s; values read as %s%s", out, kind.describe(),
                summary["windows"], distributed.size(), summary["width"], summary["height"],
                summary["windows_per_s"], scene.radiometry.describe(),
                " (the pixels disagree with the metadata: see its radiometry tags)"
                if scene.radiometry.disputed else "",
            )  # fmt: skip
    finally:
        scene.close()
    return summary


def check_window_fits(loaded: Predictor, kind: MapKind) -> None:
    """InputError naming ``--window`` unless the map's window fits in memory: ``--window``
    as given (:func:`~.tiles.check_window_memory`), else the model's least one
    (:func:`~.tiles.memory_window`); from the model's measured bytes a px
    (:data:`bigearthnet.models.WINDOW_BYTES_PER_PX`), no model built (a region's pre-check
    had built a square ResNet-50 for it). Not collective: each rank checks its own."""
    model = loaded.provenance["model"]
    if kind.window_given:
        check_window_memory(kind.window, model, _allowance())
    else:
        memory_window(model, _allowance())


def sized_kind(loaded: Predictor, kind: MapKind) -> MapKind:
    """Collective: ``kind`` with the window a scene map runs: ``--window`` once it is known
    to fit in memory (as :func:`check_window_fits`), else the largest that fits
    (:func:`~.tiles.memory_window`); a scene's windows are no larger
    (:func:`.pixels.window_shape`). The ranks take the least allowance of them all: one
    window, one tiling, one verdict on every rank."""
    model = loaded.provenance["model"]
    allowance = min(distributed.allgather_object(_allowance(), "scene_map_window_allowance"))
    if kind.window_given:
        check_window_memory(kind.window, model, allowance)
        return kind
    return replace(kind, window=memory_window(model, allowance))


def _allowance() -> float:
    import psutil

    return window_allowance(psutil.virtual_memory().available, distributed.local_size())


def _map_pixels(scene: Scene, out: Path, opts: SceneMapOptions, model: PixelRunner,
                tiling: Tiling, method: str, tags: dict, classes: list[str]) -> dict:  # fmt: skip
    """The 10 m map (:mod:`.pixels`): part files by all ranks, the map by rank 0."""
    rows, cols = scene_windows(scene, tiling)
    total = len(rows[distributed.rank() :: distributed.size()]) * len(cols)
    times = StageTimes()
    work = work_folder(out)
    try:
        started = time.perf_counter()
        with progress_bar(total, desc="scene", unit="window",
                          enabled=opts.progress and distributed.is_root()) as bar:  # fmt: skip
            made = predict_pixels(scene, model, tiling, resampling=method, work=work,
                                  progress=bar.update, times=times)  # fmt: skip
        seconds = time.perf_counter() - started
        if distributed.is_root():
            write_pixel_map(out, made, scene, classes, linked_tags(tags, out.parent))
        distributed.barrier()  # the parts are read until the map is written
    finally:
        if distributed.is_root():
            remove_work(work)
    return _summary(made.windows, scene.height, scene.width, seconds, times)


def _map_cells(scene: Scene, out: Path, opts: SceneMapOptions, loaded: Predictor,
               kind: MapKind, method: str, tags: dict) -> dict:  # fmt: skip
    """The classifier's cell map of ``kind.stride`` (:mod:`.windows`)."""
    from rasterio.transform import Affine

    stride = kind.cell_m // PIXEL_CELL_M
    rows = window_origins(scene.height, stride)[distributed.rank() :: distributed.size()]
    total = len(rows) * len(window_origins(scene.width, stride))
    times = StageTimes()
    started = time.perf_counter()
    with progress_bar(total, desc="scene", unit="window",
                      enabled=opts.progress and distributed.is_root()) as bar:  # fmt: skip
        sums = predict_scene(scene, loaded, stride=stride, resampling=method,
                             batch_size=opts.batch_size, progress=bar.update,
                             times=times)  # fmt: skip
    seconds = time.perf_counter() - started
    if distributed.is_root():
        write_scene_map(out, sums, crs=scene.crs, transform=scene.transform @ Affine.scale(stride),
                        classes=loaded.class_names,
                        tags=linked_tags(tags, out.parent))  # fmt: skip
    windows = int(sums.windows.sum() // ((120 // stride) ** 2))
    height, width = sums.windows.shape
    return _summary(windows, height, width, seconds, times)


def _summary(windows: int, height: int, width: int, seconds: float, times: StageTimes) -> dict:
    return {
        "windows": windows,
        "cells": height * width,
        "height": height,
        "width": width,
        "seconds": seconds,
        "windows_per_s": windows / seconds if seconds > 0 else 0.0,
        "read_s": times.read,
        "predict_s": times.predict,
    }
