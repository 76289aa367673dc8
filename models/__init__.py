"""Model registry: build any classifier of the project by name.

A plain dict maps each name to a builder ``builder(input_shape, num_classes, *, name, **kwargs)``
(in the spirit of torchgeo/timm). Every model maps normalised ``(batch, H, W, bands)`` float
images to ``(batch, num_classes)`` float32 logits; apply a sigmoid for probabilities.

>>> model = get_model("resnet50", num_classes=43, dropout=0.2, weight_decay=1e-4)

Common keyword arguments: ``dropout`` (before the head, default 0) and ``weight_decay``
(L2 on conv/dense kernels, default 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from bigearthnet.models.resnet import DEFAULT_INPUT_SHAPE, resnet18, resnet50
from bigearthnet.models.tiny import tiny_cnn

__all__ = ["MODELS", "available_models", "count_parameters", "get_model"]

MODELS: dict[str, Callable[..., tf.keras.Model]] = {
    "resnet18": resnet18,
    "resnet50": resnet50,
    "tiny": tiny_cnn,
}
"""Registry name -> builder. Add a model by adding an entry here."""


def available_models() -> list[str]:
    """Return the registered model names, sorted."""
    return sorted(MODELS)


def get_model(
    name: str,
    input_shape: Sequence[int] = DEFAULT_INPUT_SHAPE,
    num_classes: int = 19,
    **kwargs: Any,
) -> tf.keras.Model:
    """Build the registered model ``name``; ``model.name`` is set to ``name``.

    Raises:
        ValueError: ``name`` is not registered; the one-line message lists the valid names.
    """
    try:
        builder = MODELS[name]
    except KeyError:
        valid = ", ".join(available_models())
        raise ValueError(f"unknown model {name!r}; available models: {valid}") from None
    return builder(input_shape=input_shape, num_classes=num_classes, name=name, **kwargs)


def count_parameters(model: tf.keras.Model) -> int:
    """Number of weights as Keras counts them: trainable + non-trainable (e.g. BN statistics)."""
    return int(model.count_params())
