"""bigearthnet.training.losses: the pixel loss is the soft-target cross-entropy, no label
weighs nothing, and the step divides by the global batch's labelled weight."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bigearthnet.core import distributed
from bigearthnet.core.constants import NO_LABEL
from bigearthnet.data.augment import PIXEL_CLASSES, PixelTargets
from bigearthnet.training.losses import pixel_loss_sum, pixel_scale


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _onehot(maps: np.ndarray) -> np.ndarray:
    """One-hot of the classes; a no-label pixel is all zeros."""
    return np.eye(PIXEL_CLASSES + 1)[np.minimum(maps, PIXEL_CLASSES)][..., :PIXEL_CLASSES]


@pytest.mark.parametrize("mixed", [False, True])
def test_pixel_loss_is_the_soft_target_cross_entropy(mixed: bool) -> None:
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 3, (4, 6, 6, PIXEL_CLASSES)).astype(np.float32)
    first = rng.integers(0, PIXEL_CLASSES, (4, 6, 6)).astype(np.int32)
    first[rng.random(first.shape) < 0.25] = NO_LABEL
    second = np.roll(first, 1, axis=0)
    lam = np.array([0.9, 0.5, 0.2, 0.0], np.float32)
    targets = PixelTargets(tf.constant(first))
    soft = _onehot(first)
    if mixed:
        targets = PixelTargets(tf.constant(first), tf.constant(second), tf.constant(lam))
        weight = lam[:, None, None, None]
        soft = weight * _onehot(first) + (1 - weight) * _onehot(second)
    want = -(soft * _log_softmax(logits.astype(np.float64))).sum()
    got = float(pixel_loss_sum(targets, tf.constant(logits)))
    assert got == pytest.approx(want, rel=1e-5)
    assert float(targets.weight_sum()) == pytest.approx(soft.sum(), rel=1e-6)
    # No-label pixels weigh nothing: whatever their logits say, the loss stays.
    noisy = np.where((first == NO_LABEL)[..., None] & (second == NO_LABEL)[..., None],
                     logits * 100, logits)  # fmt: skip
    assert float(pixel_loss_sum(targets, tf.constant(noisy))) == pytest.approx(got, rel=1e-5)


def test_one_rank_divides_by_its_own_labelled_pixels() -> None:
    distributed.init(threads=1)
    maps = np.full((2, 4, 4), NO_LABEL, np.int32)
    maps[0, :3] = 5  # 12 labelled pixels
    assert float(pixel_scale(tf.constant(maps), 0.0, None)) == pytest.approx(1 / 12)
    empty = np.full((2, 4, 4), NO_LABEL, np.int32)
    assert float(pixel_scale(tf.constant(empty), 0.0, None)) == 0.0  # nothing to learn: 0
