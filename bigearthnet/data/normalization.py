"""Per-band standardisation: the statistics from the manifest, recorded once per run as its
:class:`~bigearthnet.formats.model_inputs.ModelInputs` (:func:`model_inputs`), and the op
inside the step (and inside every model that predicts: training, evaluation, maps)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from bigearthnet.core import constants
from bigearthnet.formats.manifest import Manifest
from bigearthnet.formats.model_inputs import ModelInputs
from bigearthnet.formats.shards import S1_DB_OFFSET, S1_DB_SCALE, channel_encoding


def model_inputs(manifest: Manifest, num_classes: int) -> ModelInputs:
    """What a model trained on ``manifest``'s shards takes: its channels, their statistics
    (the train split's, else the published ones), encodings and resampling, and the classes
    of the label set. Derived once per run; checkpoints and exports carry it from then on."""
    mean, std = band_stats(manifest, manifest.bands)
    published = manifest.band_mean is None or manifest.band_std is None
    encodings = [channel_encoding(band) for band in manifest.bands]
    return ModelInputs(
        bands=tuple(manifest.bands),
        mean=tuple(float(v) for v in mean),
        std=tuple(float(v) for v in std),
        channel_scale=tuple(scale for scale, _ in encodings),
        channel_offset=tuple(offset for _, offset in encodings),
        resampling=manifest.resampling,
        classes=tuple(constants.CLASS_SETS[num_classes]),
        stats="published" if published else f"train split of shards {manifest.data_id}",
    )


def band_stats(
    manifest: Manifest | None, bands: tuple[str, ...] = constants.BANDS
) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std from the manifest (train split), else the published
    statistics of the manifest's (or, without one, ``bands``') channels."""
    mean: Sequence[float] | None = manifest.band_mean if manifest is not None else None
    std: Sequence[float] | None = manifest.band_std if manifest is not None else None
    if mean is None or std is None:
        mean, std = fallback_stats(manifest.bands if manifest is not None else bands)
    # Constant bands: no division by 0.
    return np.asarray(mean, dtype=np.float32), np.maximum(np.asarray(std, np.float32), 1.0)


def fallback_stats(bands: tuple[str, ...]) -> tuple[list[float], list[float]]:
    """Published per-channel statistics in the shards' units (S1: dB turned into codes)."""
    mean, std = [], []
    for band in bands:
        if band in constants.S1_BANDS:
            mean.append((constants.FALLBACK_S1_DB_MEAN[band] - S1_DB_OFFSET) / S1_DB_SCALE)
            std.append(constants.FALLBACK_S1_DB_STD[band] / S1_DB_SCALE)
        else:
            mean.append(constants.FALLBACK_BAND_MEAN[band])
            std.append(constants.FALLBACK_BAND_STD[band])
    return mean, std


def normalize(images: tf.Tensor, mean: tf.Tensor, std: tf.Tensor) -> tf.Tensor:
    """uint16 images -> float32 standardised per channel (training and inference alike)."""
    return (tf.cast(images, tf.float32) - mean) / std
