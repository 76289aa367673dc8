"""``bigearthnet-map scene``: a trained run and a Sentinel-2 scene -> a land-cover map, on
one process or N Horovod ranks (each its strips of windows; rank 0 writes)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from bigearthnet.core import constants, distributed
from bigearthnet.core.config import default_threads
from bigearthnet.core.progress import progress_bar
from bigearthnet.core.util import stat_digest
from bigearthnet.formats.class_map import classes_tags
from bigearthnet.maps.scene_input import Scene, SceneError
from bigearthnet.maps.scene_output import write_scene_map
from bigearthnet.maps.windows import StageTimes, predict_scene, window_origins

if TYPE_CHECKING:
    from bigearthnet.inference.predictor import Predictor

log = distributed.log


def scene_map_tags(
    scene_dir: Path, predictor: Predictor, *, stride: int, resampling: str, mask_clouds: bool
) -> dict[str, str]:
    """What made a scene map, as its tags: the scene (resolved path, and a digest of its
    files' sizes and mtimes), the model (its provenance with the weights' digest, its
    classes) and the options. A map whose tags equal these was made as this call would
    make it; any other is remade (a region rerun reuses maps by this)."""
    return {
        "scene": str(Path(scene_dir).resolve()),
        "scene_inputs": stat_digest(scene_dir),
        **predictor.provenance,
        **classes_tags(predictor.class_names),
        "stride_px": str(stride),
        "resampling": resampling,
        "clouds_masked": str(mask_clouds),
    }


def map_scene(
    scene_dir: Path,
    *,
    run_dir: str | Path | None = None,
    model_dir: str | Path | None = None,
    out: Path,
    stride: int,
    checkpoint: str = "best",
    stats_from: str | Path | None = None,
    resampling: str | None = None,
    batch_size: int = 64,
    progress: bool = True,
    bbox: tuple[float, float, float, float] | None = None,
    band_order: list[str] | None = None,
    mask_clouds: bool = False,
    labels: int | None = None,
    predictor: Predictor | None = None,
) -> dict:
    """Collective: map ``scene_dir`` (a SAFE folder, band GeoTIFFs or a band stack) with the
    model of a run (``run_dir``, ``checkpoint``) or of an export (``model_dir``); rank 0
    writes ``out``. ``predictor``: a model already open (a region maps many scenes with one).
    Returns a summary (windows, cells, seconds, windows/s, and this rank's seconds reading
    and in the model)."""
    from rasterio.transform import Affine

    from bigearthnet.inference.predictor import open_predictor

    distributed.init(threads=default_threads())
    loaded = predictor or open_predictor(
        run_dir=run_dir, model_dir=model_dir, checkpoint=checkpoint, stats_from=stats_from
    )
    if labels is not None and loaded.num_classes != labels:
        raise SceneError(
            f"{model_dir or run_dir}: its model predicts {loaded.num_classes} classes, "
            f"not the requested {labels}"
        )
    bands = tuple(loaded.bands)
    if any(band in constants.S1_BANDS for band in bands):
        raise SceneError(
            f"{model_dir or run_dir}: its model takes {constants.describe_bands(bands)}; "
            "scene maps read Sentinel-2 scenes only (a Sentinel-1 scene map is out of scope)"
        )
    scene = Scene(
        Path(scene_dir), bbox=bbox, band_order=band_order, mask_clouds=mask_clouds, bands=bands
    )
    times = StageTimes()
    method = resampling or loaded.resampling  # as the model's training data was
    tags = scene_map_tags(
        scene_dir, loaded, stride=stride, resampling=method, mask_clouds=mask_clouds
    )
    try:
        rows = window_origins(scene.height, stride)[distributed.rank() :: distributed.size()]
        total = len(rows) * len(window_origins(scene.width, stride))
        started = time.perf_counter()
        with progress_bar(
            total, desc="scene", unit="window", enabled=progress and distributed.is_root()
        ) as bar:
            sums = predict_scene(
                scene,
                loaded,
                stride=stride,
                resampling=method,
                batch_size=batch_size,
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
                tags=tags,
            )
            log.info(
                "scene map %s: %d windows on %d rank(s), %d x %d cells of %d m, %.0f windows/s",
                out,
                windows,
                distributed.size(),
                sums.windows.shape[1],
                sums.windows.shape[0],
                stride * 10,
                summary["windows_per_s"],
            )
    finally:
        scene.close()
    return summary
