"""Batched, seeded data augmentation for Sentinel-2 patches, usable in tf.data or a model.

Why these two:

* **Dihedral transforms.** A satellite patch has no canonical orientation: north-up
  is a convention of the product grid, and land cover looks the same rotated by
  90 degrees or mirrored. The 8 elements of the dihedral group D4 (4 rotations, each
  optionally mirrored) are exactly the transforms of a square pixel grid that neither
  interpolate nor crop, so they keep every reflectance value intact.
* **Mix-up** (Zhang et al. 2018) blends pairs of samples and their multi-hot labels.
  It regularises large-batch training, where fewer updates per epoch leave less
  implicit noise.

Reference maps (the dense head's targets, ``(B, H, W)`` class indices) move with their
images: :func:`random_dihedral_with_maps` applies the same element of D4 to both, pixel for
pixel, and :func:`mixup_with_maps` mixes the pixel targets as it mixes the labels, into
:class:`PixelTargets`: per pixel the soft target ``lam * onehot(a) + (1 - lam) *
onehot(b)``, where a side without a label ("no label", a row without a map) contributes
nothing. A pixel labelled in only one of the pair so keeps that one's term with its weight
(``lam`` or ``1 - lam``), and one labelled in neither has weight 0: the pixel loss is a
mean over the targets' weight (:meth:`PixelTargets.weight_sum`), which without mix-up is the
count of labelled pixels.

Everything works on whole batches ``(B, H, W, C)`` with vectorised ops: a Python loop
or ``map_fn`` per sample would serialise the input pipeline on the CPU.

Randomness is *stateless*: every function takes ``seed``, a shape-[2] integer tensor,
and the same seed gives the same output on any machine and any number of workers.
Derive one seed per batch (and per Horovod rank) so batches differ, for example::

    seeds = tf.data.Dataset.random(seed=base_seed + rank).batch(2)
    ds = tf.data.Dataset.zip((ds.batch(b), seeds)).map(
        lambda batch, seed: (random_dihedral(batch[0], seed), batch[1]))
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

from bigearthnet.core.constants import CLASSES_19, NO_LABEL

PIXEL_CLASSES = len(CLASSES_19)  # a map's classes: values from here on (NO_LABEL) are no label

NUM_DIHEDRAL = 8
"""Size of the dihedral group D4 of the square."""


def _per_sample(mask: tf.Tensor) -> tf.Tensor:
    """Reshape a (B,) mask so tf.where broadcasts it over (B, H, W, C)."""
    return tf.reshape(mask, [-1, 1, 1, 1])


def dihedral_index(batch_size: Any, seed: Any) -> tf.Tensor:
    """Per-sample index in [0, 8) of the D4 element :func:`random_dihedral` applies.

    Bit 0 selects a transpose (swap H and W), bit 1 a flip of H, bit 2 a flip of W.
    The 8 combinations are the 8 distinct elements of D4 on a square, so a uniform
    index gives a uniform group element.
    """
    return tf.random.stateless_uniform(
        [batch_size], seed=seed, minval=0, maxval=NUM_DIHEDRAL, dtype=tf.int32
    )


def apply_dihedral(images: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
    """Apply D4 element ``index[b]`` (see :func:`dihedral_index`) to each ``images[b]``."""

    def bit(i: int) -> tf.Tensor:
        return _per_sample(tf.bitwise.bitwise_and(index, 1 << i) > 0)

    # Computing each transform for the whole batch and selecting per sample costs three
    # extra batch copies, which is cheap next to decoding and far faster than a loop.
    out = tf.where(bit(0), tf.transpose(images, [0, 2, 1, 3]), images)
    out = tf.where(bit(1), tf.reverse(out, axis=[1]), out)
    return tf.where(bit(2), tf.reverse(out, axis=[2]), out)


def random_dihedral(images: tf.Tensor, seed: Any) -> tf.Tensor:
    """Apply a uniformly random element of D4 to each square image of a (B, H, W, C) batch.

    Any dtype (uint16 raw reflectance, float32 normalised) passes through unchanged,
    since the transforms only move pixels.
    """
    images = tf.convert_to_tensor(images)
    if images.shape.rank != 4:
        raise ValueError(f"images must be (B, H, W, C), got shape {images.shape}")
    height, width = images.shape[1], images.shape[2]
    if height is not None and width is not None and height != width:
        # A transpose of a non-square image changes its shape; D4 needs H == W.
        raise ValueError(f"random_dihedral needs square images, got {height}x{width}")
    return apply_dihedral(images, dihedral_index(tf.shape(images)[0], seed))


def mixup_weights(batch_size: Any, alpha: float, seed: Any) -> tuple[tf.Tensor, tf.Tensor]:
    """Mix-up weights ``lam`` (float32, shape (B,)) and partner indices ``perm`` (int32).

    ``lam ~ Beta(alpha, alpha)``, sampled as ``X / (X + Y)`` with independent
    ``X, Y ~ Gamma(alpha)`` because TensorFlow has no stateless Beta sampler. The Gamma
    draws are float64: for small alpha they are often tiny and would underflow to 0 in
    float32. ``perm`` is a random permutation of the batch (a sample may be its own
    partner, in which case it is left as it is).
    """
    seed_x, seed_y, seed_perm = tf.unstack(tf.random.experimental.stateless_split(seed, num=3))
    shape = [batch_size]
    x = tf.random.stateless_gamma(shape, seed=seed_x, alpha=alpha, dtype=tf.float64)
    y = tf.random.stateless_gamma(shape, seed=seed_y, alpha=alpha, dtype=tf.float64)
    lam = tf.cast(tf.math.divide_no_nan(x, x + y), tf.float32)
    perm = tf.argsort(tf.random.stateless_uniform(shape, seed=seed_perm))  # int32
    return lam, perm


def _mix(values: tf.Tensor, lam: tf.Tensor, perm: tf.Tensor) -> tf.Tensor:
    """``lam * values + (1 - lam) * values[perm]`` with lam broadcast over trailing axes."""
    values = tf.cast(values, tf.float32)
    weight = tf.reshape(lam, tf.concat([[-1], tf.ones([tf.rank(values) - 1], tf.int32)], 0))
    return weight * values + (1.0 - weight) * tf.gather(values, perm)


def mixup(
    images: tf.Tensor, labels: tf.Tensor, alpha: float, seed: Any
) -> tuple[tf.Tensor, tf.Tensor]:
    """Mix-up within a batch: each sample is blended with a random partner of the batch.

    Returns float32 images and labels. Multi-hot labels become soft labels in [0, 1],
    which binary cross-entropy handles as they are. With ``alpha <= 0`` mix-up is off and
    the inputs come back unchanged, only cast to float32, so the output dtypes do not
    depend on the setting.
    """
    images = tf.cast(images, tf.float32)
    labels = tf.cast(labels, tf.float32)
    if alpha <= 0:
        return images, labels
    lam, perm = mixup_weights(tf.shape(images)[0], alpha, seed)
    return _mix(images, lam, perm), _mix(labels, lam, perm)


# --------------------------------------------------------------------------- reference maps


def labelled_maps(maps: Any, has_map: Any) -> tf.Tensor:
    """``(B, H, W)`` int32 class indices: ``maps``, with every pixel of a row whose
    ``has_map`` is 0 set to NO_LABEL (the shards store such rows so; this keeps a row
    without a map out of the loss whatever its pixels hold)."""
    maps = tf.cast(maps, tf.int32)
    keep = tf.reshape(tf.cast(has_map, tf.bool), [-1, 1, 1])
    return tf.where(keep, maps, NO_LABEL)


def random_dihedral_with_maps(images: tf.Tensor, maps: tf.Tensor, seed: Any):
    """:func:`random_dihedral` of ``images`` (the same element for the same seed), and that
    element applied to each image's ``(H, W)`` map: a map follows its image pixel for pixel."""
    images = tf.convert_to_tensor(images)
    index = dihedral_index(tf.shape(images)[0], seed)
    moved = apply_dihedral(tf.expand_dims(maps, -1), index)
    return apply_dihedral(images, index), tf.squeeze(moved, -1)


class PixelTargets(NamedTuple):
    """The dense head's targets: per pixel ``lam * onehot(first) + (1 - lam) *
    onehot(second)`` (``second`` None: ``onehot(first)``), held as index maps and a weight
    per sample, never as one-hot tensors (19 times the memory); an index >= the classes
    (NO_LABEL) is no label: its side contributes nothing."""

    first: tf.Tensor  # (B, H, W) int32
    second: tf.Tensor | None = None  # the mix-up partners' maps
    lam: tf.Tensor | None = None  # (B,) float32, the weight of ``first``

    def terms(self) -> list[tuple[tf.Tensor, tf.Tensor]]:
        """(class index clipped into range, weight) per side; the weights (B, H, W) are 0
        where the side has no label."""
        sides = [(self.first, None if self.lam is None else self.lam)]
        if self.second is not None and self.lam is not None:
            sides.append((self.second, 1.0 - self.lam))
        terms = []
        for maps, lam in sides:
            labelled = tf.cast(maps < PIXEL_CLASSES, tf.float32)
            weight = labelled if lam is None else labelled * tf.reshape(lam, [-1, 1, 1])
            terms.append((tf.minimum(maps, PIXEL_CLASSES - 1), weight))
        return terms

    def weight_sum(self) -> tf.Tensor:
        """The targets' total weight: labelled pixels, each side by its mix-up weight."""
        return tf.add_n([tf.reduce_sum(weight) for _, weight in self.terms()])


def mixup_with_maps(
    images: tf.Tensor, labels: tf.Tensor, maps: tf.Tensor, alpha: float, seed: Any
) -> tuple[tf.Tensor, tf.Tensor, PixelTargets]:
    """:func:`mixup` (the same pairs and weights for the same seed), and the pixel targets
    of ``maps`` (int32, NO_LABEL for no label) mixed alike."""
    images, labels = tf.cast(images, tf.float32), tf.cast(labels, tf.float32)
    if alpha <= 0:
        return images, labels, PixelTargets(maps)
    lam, perm = mixup_weights(tf.shape(images)[0], alpha, seed)
    targets = PixelTargets(maps, tf.gather(maps, perm), lam)
    return _mix(images, lam, perm), _mix(labels, lam, perm), targets


def labelled_weight(maps: tf.Tensor, alpha: float, seed: Any) -> tf.Tensor:
    """The :meth:`PixelTargets.weight_sum` of :func:`mixup_with_maps` with these arguments,
    without mixing anything (the dihedral moves pixels, never their count): what the step
    sums over ranks before the forward pass, to divide the pixel loss by."""
    per_row = tf.reduce_sum(tf.cast(maps < PIXEL_CLASSES, tf.float32), axis=[1, 2])
    if alpha <= 0:
        return tf.reduce_sum(per_row)
    lam, perm = mixup_weights(tf.shape(maps)[0], alpha, seed)
    return tf.reduce_sum(lam * per_row + (1.0 - lam) * tf.gather(per_row, perm))
