"""``bigearthnet-map scene``: a trained run and a Sentinel-2 scene -> a land-cover map, on
one process or N Horovod ranks (each its strips of windows; rank 0 writes)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from bigearthnet.core import constants, distributed
from bigearthnet.core.progress import progress_bar
from bigearthnet.formats.class_map import classes_tags, linked_tags
from bigearthnet.maps.radiometry import dispute
from bigearthnet.maps.scene.input import Scene, SceneError
from bigearthnet.maps.scene.options import SceneMapOptions
from bigearthnet.maps.scene.output import write_scene_map
from bigearthnet.maps.scene.windows import StageTimes, predict_scene, window_origins

if TYPE_CHECKING:
    from bigearthnet.inference.predictor import Predictor
    from bigearthnet.maps.inputs import SceneForm

log = distributed.log


def scene_map_tags(
    scene: SceneForm,
    predictor: Predictor,
    *,
    stride: int,
    resampling: str,
    mask_clouds: bool,
    values: Mapping[str, str],
) -> dict[str, str]:
    """What made a scene map, as its tags: the scene (resolved path, and its form's digest:
    its files' sizes and mtimes, a STAC item's content), the model (its provenance with the
    weights' digest, its classes), the options and how the values were read
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
        **classes_tags(predictor.class_names),
        "stride_px": str(stride),
        "resampling": resampling,
        "clouds_masked": str(mask_clouds),
        **values,  # the reflectance offset applied, and why
    }


def map_scene(form: SceneForm, out: Path, opts: SceneMapOptions, loaded: Predictor) -> dict:
    """Collective (``distributed.init`` first, before ``loaded`` was opened, so that the
    thread pools are sized): map the scene ``form`` identified (any form of
    :mod:`bigearthnet.maps.inputs`)
    with the model ``loaded`` (a region maps many scenes with one); rank 0 writes ``out``.
    Returns a summary (windows, cells, seconds, windows/s, and this rank's seconds reading
    and in the model)."""
    from rasterio.transform import Affine

    stride, mask_clouds = opts.stride, opts.mask_clouds
    source = loaded.provenance.get("export") or loaded.provenance.get("run_dir")
    if opts.labels is not None and loaded.num_classes != opts.labels:
        raise SceneError(
            f"{source}: its model predicts {loaded.num_classes} classes, not the requested "
            f"{opts.labels}"
        )
    bands = tuple(loaded.bands)
    if any(band in constants.S1_BANDS for band in bands):
        raise SceneError(
            f"{source}: its model takes {constants.describe_bands(bands)}; "
            "scene maps read Sentinel-2 scenes only (a Sentinel-1 scene map is out of scope)"
        )
    scene = Scene(form, bbox=opts.bbox, band_order=opts.band_order,
                  mask_clouds=mask_clouds, bands=bands, boa_offset=opts.boa_offset)  # fmt: skip
    times = StageTimes()
    method = opts.resampling or loaded.resampling  # as the model's training data was
    tags = scene_map_tags(
        form, loaded, stride=stride, resampling=method, mask_clouds=mask_clouds,
        values=scene.values_tags(),
    )  # fmt: skip
    if scene.radiometry.disputed and distributed.is_root():
        log.warning("%s: %s", form.ref, dispute(scene.radiometry.tags()))
    try:
        rows = window_origins(scene.height, stride)[distributed.rank() :: distributed.size()]
        total = len(rows) * len(window_origins(scene.width, stride))
        started = time.perf_counter()
        with progress_bar(
            total, desc="scene", unit="window", enabled=opts.progress and distributed.is_root()
        ) as bar:
            sums = predict_scene(
                scene,
                loaded,
                stride=stride,
                resampling=method,
                batch_size=opts.batch_size,
                progress=bar.update,
                times=times,
            )
        seconds = time.perf_counter() - started
        windows = int(sums.windows.sum() // ((120 // stride) ** 2))
        summary = {
            "windows": windows,
            "cells": int(sums.windows.size),
            "seconds": seconds,
            "windows_per_s": windows / seconds if seconds > 0 else 0.0,
            "read_s": times.read,
            "predict_s": times.predict,
        }
        if distributed.is_root():
            write_scene_map(
                out,
                sums,
                crs=scene.crs,
                transform=scene.transform @ Affine.scale(stride),
                classes=loaded.class_names,
                tags=linked_tags(tags, out.parent),
            )
            log.info(
                "scene map %s: %d windows on %d rank(s), %d x %d cells of %d m, %.0f windows/s; "
                "values read as %s%s",
                out,
                windows,
                distributed.size(),
                sums.windows.shape[1],
                sums.windows.shape[0],
                stride * 10,
                summary["windows_per_s"],
                scene.radiometry.describe(),
                " (the pixels disagree with the metadata: see its radiometry tags)"
                if scene.radiometry.disputed
                else "",
            )
    finally:
        scene.close()
    return summary
