"""A tiny CNN for smoke tests, demos and CI: learns synthetic spectral signatures in seconds.

Three conv-BN-ReLU layers with stride 2 (widths 16, 32, 64 by default), global average pooling
and the same float32 logits head as the ResNets: about 26k parameters for 12 bands and 19
classes. It accepts any input size, so tests can feed small patches.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from bigearthnet.models.resnet import (
    BN_EPSILON,
    DEFAULT_INPUT_SHAPE,
    classification_head,
    l2_regularizer,
    with_outputs,
)

layers = tf.keras.layers

DEFAULT_WIDTHS: tuple[int, ...] = (16, 32, 64)
# Demo and test runs last a few dozen steps; with Keras' default momentum 0.99 the BN moving
# statistics used at inference would still be mostly their initial values by then.
BN_MOMENTUM = 0.9
# The dense head over the last two stages (stride 4 and 8, as the ResNets' finest): the
# stride-2 stage too cost ~40 % more per training step (batch 16, 1 thread) for detail the
# 25 ha reference maps do not have.
DECODER_WIDTH = 32


def tiny_cnn(
    input_shape: Sequence[int] = DEFAULT_INPUT_SHAPE,
    num_classes: int = 19,
    *,
    name: str = "tiny",
    dropout: float = 0.0,
    weight_decay: float = 0.0,
    widths: Sequence[int] = DEFAULT_WIDTHS,
    dense_head: bool = False,
) -> tf.keras.Model:
    """Build the tiny CNN: ``(batch, *input_shape)`` images -> ``(batch, num_classes)`` logits
    (``dense_head``: and per-pixel logits, see :mod:`bigearthnet.models`)."""
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    regularizer = l2_regularizer(weight_decay)

    inputs = tf.keras.Input(shape=tuple(input_shape), name="image")
    x = inputs
    stages = []
    for i, width in enumerate(widths, start=1):
        # No conv bias: the BN right after has its own shift.
        x = layers.Conv2D(
            width,
            3,
            strides=2,
            padding="same",
            use_bias=False,
            kernel_initializer="he_normal",
            kernel_regularizer=regularizer,
            name=f"conv{i}_conv",
        )(x)
        x = layers.BatchNormalization(epsilon=BN_EPSILON, momentum=BN_MOMENTUM, name=f"conv{i}_bn")(
            x
        )
        x = layers.Activation("relu", name=f"conv{i}_relu")(x)
        stages.append(x)
    x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
    logits = classification_head(x, num_classes, dropout, regularizer)
    return with_outputs(inputs, logits, stages[1:] if dense_head else None, regularizer, name,
                        width=DECODER_WIDTH)  # fmt: skip
