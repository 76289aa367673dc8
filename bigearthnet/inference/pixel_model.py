"""The dense head run fully convolutionally: a model of the registry rebuilt at a large
square window with the trained weights, uint16 images in, each pixel's class probabilities
out (the normalisation and softmax of :meth:`LoadedModel.outputs`).

The registry builds its models at a fixed input size (the dense head's resizes are sized
when built), so a window of another size is the same architecture built again, its weights
copied from the run's model (``set_weights``: layer by layer, whatever the input size) or
read from an export's SavedModel variables (the export's module tracks the Keras model as
``classifier``). Only the per-pixel output is computed.

A map runs it in onnxruntime where it can (:mod:`~bigearthnet.inference.onnx_pixels`:
converted once per window shape and cached), this TensorFlow model otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import tensorflow as tf

from bigearthnet import models
from bigearthnet.data.normalization import normalize

Window = int | tuple[int, int]  # a window's side, or its (height, width) in px


class PixelRunner(Protocol):
    """What a map needs of a pixel model, whichever runtime computes it (TensorFlow:
    :class:`PixelModel`; onnxruntime: :class:`~.onnx_pixels.OnnxPixelModel`): (N, height,
    width, bands) uint16 -> (N, height, width, ``classes``) float32 probabilities."""

    name: str
    shape: tuple[int, int]
    classes: int

    def __call__(self, images: np.ndarray) -> np.ndarray: ...


class PixelModel:
    """``model`` (a registry model with the dense head, built at ``window``: a side, or
    (height, width)) as a map's model: (N, height, width, bands) uint16 -> (N, height,
    width, 19) float32."""

    def __init__(self, model: tf.keras.Model, mean: Sequence[float] | np.ndarray,
                 std: Sequence[float] | np.ndarray, window: Window) -> None:  # fmt: skip
        self.name = model.name
        self.shape = window_shape(window)
        self.classes = models.PIXEL_CLASSES
        self.channels = int(model.input.shape[-1])
        self._pixels = tf.keras.Model(model.input, model.get_layer(models.PIXEL_HEAD).output)
        self.mean = np.asarray(mean, dtype=np.float32)
        self.std = np.asarray(std, dtype=np.float32)
        self._run = tf.function(self._probabilities, reduce_retracing=True)

    def _probabilities(self, images: tf.Tensor) -> tf.Tensor:
        x = normalize(images, self.mean, self.std)  # exactly the training normalisation
        return tf.nn.softmax(tf.cast(self._pixels(x, training=False), tf.float32))

    def __call__(self, images: np.ndarray) -> np.ndarray:
        return self._run(tf.convert_to_tensor(images)).numpy()

    def function(self) -> tf.types.experimental.GenericFunction:
        """The whole computation at this window's shape (any batch), for a converter."""
        spec = tf.TensorSpec((None, *self.shape, self.channels), tf.uint16, name="images")
        return tf.function(self._probabilities, input_signature=[spec])


def window_shape(window: Window) -> tuple[int, int]:
    """(height, width) of ``window``: a square's side, or (height, width) already."""
    return (window, window) if isinstance(window, int) else (int(window[0]), int(window[1]))


def rebuilt(name: str, window: Window, channels: int, num_classes: int,
            restore: Callable[[tf.keras.Model], None]) -> tf.keras.Model:  # fmt: skip
    """The registry model ``name`` with the dense head at ``window`` px (a side, or
    (height, width)), its weights set by ``restore``; computed in float32 whatever the
    process's policy."""
    height, width = window_shape(window)
    model = models.get_model(name, (height, width, channels), num_classes, dense_head=True)
    restore(model)
    return model
