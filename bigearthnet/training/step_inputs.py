"""What a step trains on: a batch as the integers the pipeline gives -> the model's input and
its targets, on the device, inside the compiled step.

Normalisation, then (training) a random element of D4 and mix-up, the reference maps moved
and mixed with their images (:mod:`bigearthnet.data.augment`). The seeds of the two draws
are the step's (:func:`~bigearthnet.training.loop.step_seed`) and the step's +
:data:`MIXUP_STREAM`, the same in :func:`prepare` and in :func:`pixel_scale_of`, which
counts the mixed pixels' weight before the forward pass.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from bigearthnet.data.augment import (
    PixelTargets,
    labelled_maps,
    mixup,
    mixup_with_maps,
    random_dihedral,
    random_dihedral_with_maps,
)
from bigearthnet.data.normalization import normalize
from bigearthnet.training.losses import pixel_scale

MIXUP_STREAM = 1  # mix-up's seed is the step's + this: apart from the dihedral's


def step_maps(maps: Any, has_map: Any) -> tf.Tensor:
    """A batch's reference maps as the step takes them: int32, no label in every pixel of a
    row without a map."""
    if maps is None or has_map is None:
        raise ValueError("a replica with the dense head trains on batches with maps")
    return labelled_maps(maps, has_map)


def prepare(
    images: tf.Tensor,
    labels: tf.Tensor,
    pixels: tf.Tensor | None,
    seed: tf.Tensor | None,
    *,
    mean: tf.Tensor,
    std: tf.Tensor,
    augment: bool,
    alpha: float,
) -> tuple[tf.Tensor, tf.Tensor, PixelTargets | None]:
    """uint16 batch -> normalised float32 (``augment``: a random dihedral element; ``alpha``
    > 0: mix-up), float labels, and the pixel targets of ``pixels`` (None: no dense head)."""
    x = normalize(images, mean, std)
    y = tf.cast(labels, tf.float32)
    if augment:  # commutes with the per-band normalisation
        if pixels is None:
            x = random_dihedral(x, seed)
        else:
            x, pixels = random_dihedral_with_maps(x, pixels, seed)
    if pixels is not None:
        return mixup_with_maps(x, y, pixels, alpha, _mixing_seed(seed, alpha))
    if alpha > 0:
        x, y = mixup(x, y, alpha, _mixing_seed(seed, alpha))
    return x, y, None


def pixel_scale_of(pixels: tf.Tensor, seed: tf.Tensor, alpha: float) -> tf.Tensor:
    """Collective: ranks / the global batch's labelled pixel weight, as :func:`prepare`
    mixes the pixels of this step."""
    return pixel_scale(pixels, alpha, _mixing_seed(seed, alpha))


def _mixing_seed(seed: tf.Tensor | None, alpha: float) -> tf.Tensor | None:
    return seed + MIXUP_STREAM if alpha > 0 and seed is not None else None
