"""The serving model: raw uint16 patches in, probabilities out, the run's normalisation and
the sigmoid inside (the formula of :meth:`LoadedModel.outputs`, so it cannot drift from what
evaluation computes); a model with the dense head also gives each pixel's class
probabilities (softmax), a second named output. Saved as a SavedModel with one signature,
``serving_default``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf

from bigearthnet import models
from bigearthnet.formats.exported import INPUT_NAME, OUTPUT_NAME, PIXEL_OUTPUT_NAME, SIGNATURE
from bigearthnet.inference.trained_run import LoadedModel


class ServingModule(tf.Module):
    """What the SavedModel holds: the Keras model (its variables) and ``serve``."""

    def __init__(self, loaded: LoadedModel) -> None:
        super().__init__(name="bigearthnet_classifier")
        self.classifier = loaded.model  # tracked: the SavedModel saves its variables
        self._outputs = loaded.outputs
        shape = (None, *loaded.record.input_shape)
        self.serve = tf.function(
            self._serve, input_signature=[tf.TensorSpec(shape, tf.uint16, name=INPUT_NAME)]
        )

    def _serve(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        outputs = self._outputs(images)
        named = {OUTPUT_NAME: outputs[models.PATCH_HEAD]}
        if models.PIXEL_HEAD in outputs:
            named[PIXEL_OUTPUT_NAME] = outputs[models.PIXEL_HEAD]
        return {name: tf.identity(value, name=name) for name, value in named.items()}


def serve(function, images: np.ndarray) -> dict[str, np.ndarray]:
    """Every named output of a serving function (the module's, or a reloaded SavedModel's
    signature) for ``images``."""
    return {name: value.numpy() for name, value in function(**{INPUT_NAME: images}).items()}


def save_savedmodel(module: ServingModule, folder: Path) -> None:
    """Write the SavedModel (``folder`` must not exist)."""
    tf.saved_model.save(module, str(folder), signatures={SIGNATURE: module.serve})


def probe_batch(loaded: LoadedModel, count: int = 8, seed: int = 0) -> np.ndarray:
    """uint16 patches with each band's values around its training mean (+-2 std): what the
    export checks compare on when no real patches are at hand."""
    rng = np.random.default_rng(seed)
    shape = (count, *loaded.record.input_shape)
    values = loaded.mean + loaded.std * rng.uniform(-2.0, 2.0, size=shape)
    return np.clip(np.rint(values), 0, np.iinfo(np.uint16).max).astype(np.uint16)
