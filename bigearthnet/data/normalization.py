"""Per-band standardisation: the statistics from the manifest, the op inside the step (and
inside every model that predicts: training, evaluation, maps)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from bigearthnet.core import constants
from bigearthnet.formats.shards import Manifest


def band_stats(manifest: Manifest | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-band mean and std from the manifest (train split), else the v1 fallback."""
    mean: Sequence[float] | None = manifest.band_mean if manifest is not None else None
    std: Sequence[float] | None = manifest.band_std if manifest is not None else None
    if mean is None or std is None:
        mean = [constants.FALLBACK_BAND_MEAN[b] for b in constants.BANDS]
        std = [constants.FALLBACK_BAND_STD[b] for b in constants.BANDS]
    # Constant bands: no division by 0.
    return np.asarray(mean, dtype=np.float32), np.maximum(np.asarray(std, np.float32), 1.0)


def normalize(images: tf.Tensor, mean: tf.Tensor, std: tf.Tensor) -> tf.Tensor:
    """uint16 reflectances -> float32 standardised per band (training and inference alike)."""
    return (tf.cast(images, tf.float32) - mean) / std
