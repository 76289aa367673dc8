"""Model registry: build any classifier of the project by name.

A plain dict maps each name to a builder ``builder(input_shape, num_classes, *, name, **kwargs)``
(in the spirit of torchgeo/timm). Every model maps normalised ``(batch, H, W, bands)`` float
images to ``(batch, num_classes)`` float32 logits; apply a sigmoid for probabilities.

>>> model = get_model("resnet50", num_classes=43, dropout=0.2, weight_decay=1e-4)

Common keyword arguments: ``dropout`` (before the head, default 0) and ``weight_decay``
(L2 on conv/dense kernels, default 0).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from bigearthnet.core.constants import BANDS, PATCH_SIZE

# No TensorFlow here, not even for type hints (import-linter counts those): the registry's
# names answer on login nodes. A model is a tf.keras.Model, typed Any below.
KerasModel = Any

__all__ = [
    "DEFAULT_INPUT_SHAPE",
    "MODELS",
    "PATCH_HEAD",
    "available_models",
    "count_parameters",
    "get_model",
]

DEFAULT_INPUT_SHAPE: tuple[int, int, int] = (PATCH_SIZE, PATCH_SIZE, len(BANDS))
# The models' heads, by Keras layer name: imported weights fill a head by it, and
# --init-weights keeps every layer but a head (its class count may differ). Each registry
# model ends in the patch head; a dense (per-pixel) head is to be named beside it.
PATCH_HEAD = "logits"  # Dense: a patch's (batch, classes) float32 multi-label logits


def _builder(module: str, name: str) -> Callable[..., KerasModel]:
    """``module.name``, imported when a model is built: the registry's names are known
    without TensorFlow, so ``train.py --model nosuch`` is refused before any rank starts."""

    def build(**kwargs: Any) -> KerasModel:
        return getattr(importlib.import_module(f"bigearthnet.models.{module}"), name)(**kwargs)

    build.__name__ = build.__qualname__ = name
    return build


MODELS: dict[str, Callable[..., KerasModel]] = {
    "resnet18": _builder("resnet", "resnet18"),
    "resnet50": _builder("resnet", "resnet50"),
    "tiny": _builder("tiny", "tiny_cnn"),
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
) -> KerasModel:
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


def count_parameters(model: KerasModel) -> int:
    """Number of weights as Keras counts them: trainable + non-trainable (e.g. BN statistics)."""
    return int(model.count_params())
