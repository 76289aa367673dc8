"""The dense head: per-pixel logits of the 19 classes at the input's size, from the feature
maps of any encoder of the registry (a light FPN-style decoder, Lin et al. 2017).

The deepest feature map is projected to ``width`` channels (1x1), resized to the next finer
map's size and added to that map's own 1x1 projection, down to the finest map given; one
3x3 conv + ReLU smooths the sum, a 1x1 conv gives the classes' logits there, and a
bilinear resize brings them to the input's size. The ResNets give it their four stages'
outputs (stride 4 to 32), the tiny CNN its last two (stride 4 and 8), so the logits are
made at stride 4 (40 m) and interpolated to 10 m: the reference maps it learns from are
CORINE polygons of at least 25 ha (a 500 m square, 50 x 50 pixels), so a finer decoder
would buy detail the labels do not have. Its cost: benchmarks/README.md, P3-dense.

No BatchNorm in the decoder (as torchvision's FPN): its layers are then plain weights,
which every replica updates alike, and precise BN, the BN averaging and
``--freeze-backbone`` (which keeps the encoder's BN statistics) need no rule for it. Every
decoder layer's name starts with :data:`DECODER_PREFIX`; the output layer is
:data:`~bigearthnet.models.PIXEL_HEAD`, in float32 under mixed precision like the
multi-label logits.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from bigearthnet.models import DECODER_PREFIX, PIXEL_HEAD

layers = tf.keras.layers


def dense_head(
    features: Sequence[tf.Tensor],
    size: tuple[int, int],
    num_classes: int,
    *,
    width: int,
    regularizer: tf.keras.regularizers.Regularizer | None,
) -> tf.Tensor:
    """``(batch, *size, num_classes)`` float32 logits from ``features`` (finest first)."""
    if any(dim is None for dim in size):
        raise ValueError("the dense head needs a fixed input height and width")

    def conv(x: tf.Tensor, filters: int, kernel: int, name: str, **kw) -> tf.Tensor:
        return layers.Conv2D(
            filters,
            kernel,
            padding="same",
            kernel_initializer="he_normal",
            kernel_regularizer=regularizer,
            name=f"{DECODER_PREFIX}{name}",
            **kw,
        )(x)

    x = conv(features[-1], width, 1, f"lateral{len(features)}")
    for level in range(len(features) - 1, 0, -1):  # coarse to fine
        finer = features[level - 1]
        x = layers.Resizing(finer.shape[1], finer.shape[2], name=f"{DECODER_PREFIX}up{level}")(x)
        lateral = conv(finer, width, 1, f"lateral{level}")
        x = layers.Add(name=f"{DECODER_PREFIX}merge{level}")([x, lateral])
    x = conv(x, width, 3, "smooth", activation="relu")
    # float32 from here: the softmax cross-entropy stays out of float16's range problems.
    x = conv(x, num_classes, 1, "classifier", dtype="float32")
    return layers.Resizing(size[0], size[1], dtype="float32", name=PIXEL_HEAD)(x)
