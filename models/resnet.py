"""ResNet-18 and ResNet-50 for multi-spectral BigEarthNet patches (tf.keras functional API).

One small builder, :func:`build_resnet`, makes both networks (He et al. 2016, "Deep Residual
Learning for Image Recognition"):

* stem: 7x7/2 conv (64) + BN + ReLU + 3x3/2 max-pool;
* four stages of residual blocks with widths 64, 128, 256, 512 -- basic blocks (two 3x3 convs)
  for ResNet-18 ``[2, 2, 2, 2]``, bottleneck blocks (1x1, 3x3, 1x1 with 4x expansion) for
  ResNet-50 ``[3, 4, 6, 3]``; a 1x1 projection shortcut (conv + BN) wherever the shape changes;
* global average pooling, optional dropout, and a ``Dense(num_classes)`` head in float32 that
  outputs logits (the loss is sigmoid cross-entropy on logits).

Choices that matter when comparing against other implementations:

* Stage 2-4 downsampling sits on the 3x3 conv of the first block ("ResNet v1.5", as in
  torchvision and timm), which is slightly more accurate than striding the 1x1 conv as
  ``tf.keras.applications.ResNet50`` does. The parameter count is the same either way.
* Convolutions keep their bias, as in ``tf.keras.applications.ResNet50``, so the two networks
  have exactly the same number of parameters (torchvision drops these redundant biases: 4,800
  fewer parameters for ResNet-18, 26,560 for ResNet-50 with a 64-channel stem).
* Stride-2 convolutions pad explicitly and symmetrically (``ZeroPadding2D``) like the reference
  implementations, instead of TensorFlow's asymmetric ``padding="same"``.
* BN uses epsilon 1.001e-5 (as ``keras.applications``) and the Keras default momentum 0.99.

Weights are randomly initialised (He normal). The input must already be normalised; these
models do no preprocessing.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from bigearthnet.models import DEFAULT_INPUT_SHAPE, PATCH_HEAD

layers = tf.keras.layers
STEM_WIDTH = 64
STAGE_WIDTHS: tuple[int, ...] = (64, 128, 256, 512)
BOTTLENECK_EXPANSION = 4
BN_EPSILON = 1.001e-5
BN_MOMENTUM = 0.99
LAYOUTS: dict[str, tuple[tuple[int, ...], bool]] = {
    "resnet18": ((2, 2, 2, 2), False),
    "resnet50": ((3, 4, 6, 3), True),
}
"""Registry name -> (blocks per stage, bottleneck): what an imported state dict is matched to."""


def l2_regularizer(weight_decay: float) -> tf.keras.regularizers.Regularizer | None:
    """Return the kernel regulariser for ``weight_decay``, or None when it is 0.

    Keras' ``L2(c)`` adds ``c * sum(w**2)`` to the loss, whose gradient is ``2 * c * w``. We pass
    ``c = weight_decay / 2`` so the gradient is ``weight_decay * w``: the same meaning as SGD
    weight decay in the ResNet papers and in PyTorch (e.g. 1e-4).
    """
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
    return tf.keras.regularizers.L2(0.5 * weight_decay) if weight_decay > 0 else None


def _conv_bn(
    x: tf.Tensor,
    filters: int,
    kernel: int,
    stride: int,
    name: str,
    regularizer: tf.keras.regularizers.Regularizer | None,
    relu: bool = True,
) -> tf.Tensor:
    """Conv (He normal, with bias as keras.applications) + BN, then ReLU when ``relu``."""
    if stride > 1 and kernel > 1:
        # Symmetric padding like the reference ResNets; "same" would pad bottom/right only.
        x = layers.ZeroPadding2D(kernel // 2, name=f"{name}_pad")(x)
        padding = "valid"
    else:
        padding = "same"
    x = layers.Conv2D(
        filters,
        kernel,
        strides=stride,
        padding=padding,
        kernel_initializer="he_normal",
        kernel_regularizer=regularizer,
        name=f"{name}_conv",
    )(x)
    x = layers.BatchNormalization(epsilon=BN_EPSILON, momentum=BN_MOMENTUM, name=f"{name}_bn")(x)
    return layers.Activation("relu", name=f"{name}_relu")(x) if relu else x


def _residual_block(
    x: tf.Tensor,
    width: int,
    stride: int,
    bottleneck: bool,
    name: str,
    regularizer: tf.keras.regularizers.Regularizer | None,
) -> tf.Tensor:
    """One basic (3x3, 3x3) or bottleneck (1x1, 3x3, 1x1 x4) block with its shortcut."""
    out_channels = width * BOTTLENECK_EXPANSION if bottleneck else width
    shortcut = x
    if stride != 1 or x.shape[-1] != out_channels:
        shortcut = _conv_bn(x, out_channels, 1, stride, f"{name}_0", regularizer, relu=False)
    if bottleneck:
        y = _conv_bn(x, width, 1, 1, f"{name}_1", regularizer)
        y = _conv_bn(y, width, 3, stride, f"{name}_2", regularizer)
        y = _conv_bn(y, out_channels, 1, 1, f"{name}_3", regularizer, relu=False)
    else:
        y = _conv_bn(x, width, 3, stride, f"{name}_1", regularizer)
        y = _conv_bn(y, width, 3, 1, f"{name}_2", regularizer, relu=False)
    y = layers.Add(name=f"{name}_add")([shortcut, y])
    return layers.Activation("relu", name=f"{name}_out")(y)


def build_resnet(
    blocks_per_stage: Sequence[int],
    bottleneck: bool,
    input_shape: Sequence[int] = DEFAULT_INPUT_SHAPE,
    num_classes: int = 19,
    *,
    name: str = "resnet",
    dropout: float = 0.0,
    weight_decay: float = 0.0,
    stem_width: int = STEM_WIDTH,
    widths: Sequence[int] = STAGE_WIDTHS,
    head: bool = True,
) -> tf.keras.Model:
    """Build a ResNet that maps ``(batch, *input_shape)`` images to ``(batch, num_classes)`` logits.

    ``dropout`` is applied to the pooled features before the head; ``weight_decay`` regularises
    every conv and dense kernel (not biases or BN parameters), see :func:`l2_regularizer`.
    ``stem_width`` and ``widths`` (the stages' inner widths) are the registry's 64 and
    (64, 128, 256, 512) except for narrow networks of the same layout (the weight import's
    test fixture); ``head=False`` ends at the pooled features (weights without a classifier).
    """
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    if len(blocks_per_stage) != len(STAGE_WIDTHS) or len(widths) != len(STAGE_WIDTHS):
        raise ValueError(f"expected {len(STAGE_WIDTHS)} stages, got {list(blocks_per_stage)}")
    regularizer = l2_regularizer(weight_decay)

    inputs = tf.keras.Input(shape=tuple(input_shape), name="image")
    x = _conv_bn(inputs, stem_width, 7, 2, "conv1", regularizer)
    x = layers.ZeroPadding2D(1, name="pool1_pad")(x)  # zeros are safe: inputs are post-ReLU
    x = layers.MaxPooling2D(3, strides=2, name="pool1_pool")(x)
    for stage, (width, n_blocks) in enumerate(zip(widths, blocks_per_stage)):
        for block in range(n_blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            block_name = f"conv{stage + 2}_block{block + 1}"
            x = _residual_block(x, width, stride, bottleneck, block_name, regularizer)
    x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
    if not head:
        return tf.keras.Model(inputs, x, name=name)
    return tf.keras.Model(
        inputs, classification_head(x, num_classes, dropout, regularizer), name=name
    )


def classification_head(
    features: tf.Tensor,
    num_classes: int,
    dropout: float,
    regularizer: tf.keras.regularizers.Regularizer | None,
) -> tf.Tensor:
    """Optional dropout + ``Dense(num_classes)`` logits, float32 even under mixed precision."""
    if dropout > 0:
        features = layers.Dropout(dropout, name="head_dropout")(features)
    # float32 keeps logits (and so the sigmoid cross-entropy) out of float16 range problems.
    return layers.Dense(
        num_classes, kernel_regularizer=regularizer, dtype="float32", name=PATCH_HEAD
    )(features)


def resnet18(
    input_shape: Sequence[int] = DEFAULT_INPUT_SHAPE,
    num_classes: int = 19,
    *,
    name: str = "resnet18",
    dropout: float = 0.0,
    weight_decay: float = 0.0,
) -> tf.keras.Model:
    """ResNet-18: basic blocks, stages [2, 2, 2, 2], 512 pooled features."""
    return build_resnet(
        *LAYOUTS["resnet18"],
        input_shape=input_shape,
        num_classes=num_classes,
        name=name,
        dropout=dropout,
        weight_decay=weight_decay,
    )


def resnet50(
    input_shape: Sequence[int] = DEFAULT_INPUT_SHAPE,
    num_classes: int = 19,
    *,
    name: str = "resnet50",
    dropout: float = 0.0,
    weight_decay: float = 0.0,
) -> tf.keras.Model:
    """ResNet-50: bottleneck blocks, stages [3, 4, 6, 3], 2048 pooled features."""
    return build_resnet(
        *LAYOUTS["resnet50"],
        input_shape=input_shape,
        num_classes=num_classes,
        name=name,
        dropout=dropout,
        weight_decay=weight_decay,
    )
