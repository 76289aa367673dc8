"""The training criterion, one home for the training and evaluation steps alike.

* :func:`bce_loss`: the multi-label head's per-sample loss, an independent sigmoid per class;
* :func:`pixel_loss_sum`: the dense head's cross-entropy summed over the pixels of a batch,
  each side of a (mixed) :class:`~bigearthnet.data.augment.PixelTargets` by its weight, "no
  label" contributing nothing.

The step's loss is ``mean(bce) + w * pixel_loss_sum / W``, with ``w`` the
``--pixel-loss-weight`` and ``W`` the targets' weight (labelled pixels) of the *global*
batch: each rank divides its own sum by ``W / ranks``, so that the mean over ranks Horovod
takes of the losses and of their gradients is the global batch's mean over its labelled
pixels, not a mean of the ranks' means (which would weigh a pixel of a rank with few maps
more). ``W`` is summed over ranks before the forward pass (:func:`pixel_scale`).
"""

from __future__ import annotations

import tensorflow as tf

from bigearthnet.core import distributed
from bigearthnet.data.augment import PixelTargets, labelled_weight


def bce_loss(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """Per-sample multi-label loss: an independent sigmoid per class, in float32 even under
    mixed precision. The one criterion of the training and evaluation steps."""
    per_class = tf.nn.sigmoid_cross_entropy_with_logits(labels, tf.cast(logits, tf.float32))
    return tf.reduce_mean(per_class, axis=-1)


def pixel_loss_sum(targets: PixelTargets, pixel_logits: tf.Tensor) -> tf.Tensor:
    """The soft-target cross-entropy ``-sum_c target_c log softmax_c`` summed over every
    pixel of the batch (float32). A soft target is linear in its sides, so each side costs
    a gather, never a one-hot tensor: ``logsumexp - logit[class]`` weighted."""
    logits = tf.cast(pixel_logits, tf.float32)
    normaliser = tf.reduce_logsumexp(logits, axis=-1)
    total = tf.constant(0.0)
    for classes, weight in targets.terms():
        picked = tf.gather(logits, classes, batch_dims=3)
        total += tf.reduce_sum(weight * (normaliser - picked))
    return total


def pixel_scale(maps: tf.Tensor, alpha: float, seed: tf.Tensor | None) -> tf.Tensor:
    """Collective (every rank, every step, in the same order): ranks / the global batch's
    target weight (0 where no rank has a labelled pixel), the factor of this rank's
    :func:`pixel_loss_sum`. ``maps``, ``alpha`` and ``seed`` as the step mixes them."""
    local = labelled_weight(maps, alpha, seed)
    total = distributed.sum_over_ranks(tf.stack([local, 1.0]), name="pixel_weight")
    return tf.math.divide_no_nan(total[1], total[0])
