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

from typing import Any

import tensorflow as tf

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
