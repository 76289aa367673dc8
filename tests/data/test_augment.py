"""Tests for bigearthnet.data.augment: dihedral group coverage, determinism and exact mix-up."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bigearthnet.core.constants import NO_LABEL
from bigearthnet.data.augment import (
    NUM_DIHEDRAL,
    PIXEL_CLASSES,
    apply_dihedral,
    dihedral_index,
    labelled_maps,
    labelled_weight,
    mixup,
    mixup_weights,
    mixup_with_maps,
    random_dihedral,
    random_dihedral_with_maps,
)

SEED = tf.constant([12, 34], tf.int64)


def dihedral_transforms(image: np.ndarray) -> list[np.ndarray]:
    """The 8 elements of D4 applied to one (H, W, C) image: 4 rotations, each +/- mirror."""
    rotations = [np.rot90(image, k, axes=(0, 1)) for k in range(4)]
    return rotations + [np.flip(r, axis=1) for r in rotations]


def which_transform(original: np.ndarray, output: np.ndarray) -> int:
    """Index in dihedral_transforms of the transform mapping original to output."""
    matches = [i for i, t in enumerate(dihedral_transforms(original)) if np.array_equal(t, output)]
    assert len(matches) == 1, f"output is not a unique dihedral transform: {matches}"
    return matches[0]


# --------------------------------------------------------------------- dihedral


@pytest.mark.parametrize("dtype", [np.float32, np.uint16])
def test_random_dihedral_outputs_are_dihedral_transforms(dtype: type) -> None:
    rng = np.random.default_rng(0)
    # Distinct pixel values, so the 8 transforms of an image are all different.
    images = rng.permutation(64 * 6 * 6 * 3).reshape(64, 6, 6, 3).astype(dtype)
    out = random_dihedral(tf.constant(images), SEED)
    assert out.dtype == tf.as_dtype(dtype) and out.shape == images.shape
    for original, transformed in zip(images, out.numpy()):
        which_transform(original, transformed)


def test_all_eight_transforms_occur_uniformly() -> None:
    n = 8000
    image = np.arange(9, dtype=np.float32).reshape(3, 3, 1)
    out = random_dihedral(tf.constant(np.broadcast_to(image, (n, 3, 3, 1))), SEED).numpy()
    lookup = {t.tobytes(): i for i, t in enumerate(dihedral_transforms(image))}
    counts = np.bincount([lookup[o.tobytes()] for o in out], minlength=NUM_DIHEDRAL)
    assert counts.sum() == n and np.all(counts > 0)
    # Expected 1000 each, standard deviation ~30: 150 is a five-sigma band.
    np.testing.assert_allclose(counts, n / NUM_DIHEDRAL, atol=150)
    chi2 = np.sum((counts - n / 8) ** 2 / (n / 8))
    assert chi2 < 24.3  # 99.9 % quantile of chi-square with 7 degrees of freedom


def test_each_index_is_a_distinct_group_element() -> None:
    image = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    batch = tf.constant(np.repeat(image, NUM_DIHEDRAL, axis=0))
    out = apply_dihedral(batch, tf.range(NUM_DIHEDRAL)).numpy()
    found = {which_transform(image[0], o) for o in out}
    assert found == set(range(NUM_DIHEDRAL))
    np.testing.assert_array_equal(out[0], image[0])  # index 0 is the identity


def test_random_dihedral_is_deterministic_in_the_seed() -> None:
    images = tf.random.stateless_uniform([32, 8, 8, 2], seed=[1, 2])
    first = random_dihedral(images, SEED).numpy()
    np.testing.assert_array_equal(first, random_dihedral(images, SEED).numpy())
    other = random_dihedral(images, tf.constant([12, 35], tf.int64)).numpy()
    assert not np.array_equal(first, other)
    np.testing.assert_array_equal(
        dihedral_index(32, SEED).numpy(), dihedral_index(32, tf.constant([12, 34], tf.int32))
    )


def test_random_dihedral_in_graph_with_unknown_batch() -> None:
    spec = tf.TensorSpec([None, 5, 5, 12], tf.uint16)
    fn = tf.function(random_dihedral, input_signature=[spec, tf.TensorSpec([2], tf.int64)])
    images = np.random.default_rng(1).integers(0, 10000, (7, 5, 5, 12)).astype(np.uint16)
    out = fn(tf.constant(images), SEED)
    assert out.dtype == tf.uint16
    np.testing.assert_array_equal(out.numpy(), random_dihedral(images, SEED).numpy())


def test_random_dihedral_rejects_non_square() -> None:
    with pytest.raises(ValueError):
        random_dihedral(tf.zeros([2, 4, 6, 1]), SEED)
    with pytest.raises(ValueError):
        random_dihedral(tf.zeros([4, 4, 1]), SEED)


# ------------------------------------------------------------------------ mixup


def multi_hot(n: int, c: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random((n, c)) < 0.3).astype(np.int64)


@pytest.mark.parametrize("alpha", [0.2, 1.0])
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_mixup_is_exactly_lam_mix_of_partner(alpha: float, graph: bool) -> None:
    rng = np.random.default_rng(2)
    images = rng.integers(0, 10000, (16, 4, 4, 3)).astype(np.uint16)
    labels = multi_hot(16, 19, 3)
    fn = tf.function(mixup) if graph else mixup
    out_images, out_labels = fn(tf.constant(images), tf.constant(labels), alpha, SEED)
    assert out_images.dtype == tf.float32 and out_labels.dtype == tf.float32

    lam, perm = (t.numpy() for t in mixup_weights(16, alpha, SEED))
    x, y = images.astype(np.float32), labels.astype(np.float32)
    want_images = lam[:, None, None, None] * x + (1 - lam[:, None, None, None]) * x[perm]
    want_labels = lam[:, None] * y + (1 - lam[:, None]) * y[perm]
    np.testing.assert_array_equal(out_images.numpy(), want_images)
    np.testing.assert_array_equal(out_labels.numpy(), want_labels)


def test_mixup_weights_are_a_permutation_and_deterministic() -> None:
    lam, perm = mixup_weights(100, 0.2, SEED)
    assert lam.dtype == tf.float32 and perm.dtype == tf.int32
    assert sorted(perm.numpy()) == list(range(100))
    lam2, perm2 = mixup_weights(100, 0.2, SEED)
    np.testing.assert_array_equal(lam.numpy(), lam2.numpy())
    np.testing.assert_array_equal(perm.numpy(), perm2.numpy())
    lam3, perm3 = mixup_weights(100, 0.2, tf.constant([12, 35], tf.int64))
    assert not np.array_equal(lam.numpy(), lam3.numpy())
    assert not np.array_equal(perm.numpy(), perm3.numpy())


@pytest.mark.parametrize("alpha", [0.2, 1.0, 4.0])
def test_mixup_lambda_follows_beta(alpha: float) -> None:
    lam = mixup_weights(200_000, alpha, SEED)[0].numpy().astype(np.float64)
    assert np.all(np.isfinite(lam)) and lam.min() >= 0.0 and lam.max() <= 1.0
    beta_variance = 1.0 / (4.0 * (2.0 * alpha + 1.0))  # Beta(a, a): a^2 / ((2a)^2 (2a + 1))
    assert lam.mean() == pytest.approx(0.5, abs=0.01)
    assert lam.var() == pytest.approx(beta_variance, abs=0.005)
    if alpha == 0.2:
        assert beta_variance == pytest.approx(0.1786, abs=1e-4)  # mass near 0 and 1


def test_mixup_labels_stay_in_unit_interval() -> None:
    labels = multi_hot(4096, 43, 4)
    images = tf.zeros([4096, 2, 2, 1], tf.uint16)
    _, mixed = mixup(images, labels, 0.2, SEED)
    mixed = mixed.numpy()
    assert mixed.min() >= 0.0 and mixed.max() <= 1.0
    # Where a sample and its partner agree on a class, the label stays exactly 0 or 1.
    perm = mixup_weights(4096, 0.2, SEED)[1].numpy()
    agree = labels == labels[perm]
    np.testing.assert_array_equal(mixed[agree], labels[agree])


@pytest.mark.parametrize("alpha", [0.0, -1.0])
def test_mixup_disabled_is_identity(alpha: float) -> None:
    images = np.random.default_rng(5).integers(0, 10000, (8, 3, 3, 2)).astype(np.uint16)
    labels = multi_hot(8, 19, 6)
    out_images, out_labels = mixup(tf.constant(images), tf.constant(labels), alpha, SEED)
    assert out_images.dtype == tf.float32 and out_labels.dtype == tf.float32
    np.testing.assert_array_equal(out_images.numpy(), images.astype(np.float32))
    np.testing.assert_array_equal(out_labels.numpy(), labels.astype(np.float32))


# ---------------------------------------------------------------- reference maps


def test_a_map_follows_its_image_pixel_for_pixel() -> None:
    """Channel 0 of each image holds its pixel's position (row * 100 + column), the map a
    class from that position with no symmetry of D4; after the joint transform every map
    pixel still holds the class of the position its image pixel came from."""
    n, size = 64, 6
    rows, cols = np.mgrid[0:size, 0:size]
    position = rows * 100 + cols
    images = np.broadcast_to(position[None, :, :, None], (n, size, size, 2)).astype(np.float32)
    classes = lambda where: (where // 100 * 7 + where % 100 * 3) % PIXEL_CLASSES  # noqa: E731
    maps = np.broadcast_to(classes(position), (n, size, size)).astype(np.int32)
    moved_images, moved_maps = random_dihedral_with_maps(tf.constant(images), maps, SEED)
    np.testing.assert_array_equal(moved_images.numpy(), random_dihedral(images, SEED).numpy())
    came_from = moved_images.numpy()[..., 0].astype(np.int64)
    np.testing.assert_array_equal(moved_maps.numpy(), classes(came_from))
    elements = {which_transform(images[0], image) for image in moved_images.numpy()}
    assert len(elements) == NUM_DIHEDRAL  # every element was tried (64 draws)
    assert not np.array_equal(moved_maps.numpy()[0], maps[0].T)  # the pattern is asymmetric


def test_rows_without_a_map_are_no_label() -> None:
    maps = np.random.default_rng(0).integers(0, PIXEL_CLASSES, (3, 4, 4)).astype(np.uint8)
    out = labelled_maps(maps, np.array([1, 0, 1], np.uint8)).numpy()
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out[[0, 2]], maps[[0, 2]])
    assert np.all(out[1] == NO_LABEL)


@pytest.mark.parametrize("alpha", [0.0, 0.4])
def test_mixed_pixel_targets_are_the_soft_targets_of_the_pair(alpha: float) -> None:
    """Per pixel, lam * onehot(a) + (1 - lam) * onehot(b) with a no-label side dropped: the
    terms add up to exactly that, and their weight is what labelled_weight counts without
    mixing (the step divides by it)."""
    rng = np.random.default_rng(7)
    maps = rng.integers(0, PIXEL_CLASSES, (16, 5, 5)).astype(np.int32)
    maps[rng.random(maps.shape) < 0.3] = NO_LABEL
    maps[3] = NO_LABEL  # a row without a map
    images, labels = tf.zeros([16, 5, 5, 2]), multi_hot(16, 19, 1)
    _, mixed_labels, targets = mixup_with_maps(images, labels, tf.constant(maps), alpha, SEED)
    soft = np.zeros((*maps.shape, PIXEL_CLASSES))
    for classes, weight in targets.terms():
        np.add.at(soft, (*np.indices(maps.shape), classes.numpy()), weight.numpy())
    lam, perm = (t.numpy() for t in mixup_weights(16, alpha, SEED))
    if alpha <= 0:
        lam, perm = np.ones(16, np.float32), np.arange(16)
    onehot = lambda m: np.eye(PIXEL_CLASSES + 1)[np.minimum(m, PIXEL_CLASSES)][..., :-1]  # noqa: E731
    want = lam[:, None, None, None] * onehot(maps) + (1 - lam)[:, None, None, None] * onehot(
        maps[perm]
    )
    np.testing.assert_allclose(soft, want, atol=1e-6)
    assert float(targets.weight_sum()) == pytest.approx(want.sum(), rel=1e-6)
    counted = labelled_weight(tf.constant(maps), alpha, SEED if alpha > 0 else None)
    assert float(counted) == pytest.approx(want.sum(), rel=1e-6)
    assert want.sum() < (maps < PIXEL_CLASSES).size  # no-label pixels weigh nothing
