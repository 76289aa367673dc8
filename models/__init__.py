"""Model registry: build any classifier of the project by name.

A plain dict maps each name to a builder ``builder(input_shape, num_classes, *, name, **kwargs)``
(in the spirit of torchgeo/timm). Every model maps normalised ``(batch, H, W, bands)`` float
images to ``(batch, num_classes)`` float32 logits; apply a sigmoid for probabilities.

>>> model = get_model("resnet50", num_classes=43, dropout=0.2, weight_decay=1e-4)

The model's layers compute under ``policy`` (a Keras mixed-precision policy name, default
"float32"), whatever the process's global policy, which is left as it was: a training with
``--amp bf16`` earlier in the same process must not make a later model compute in bfloat16.

Common keyword arguments: ``dropout`` (before the head, default 0), ``weight_decay`` (L2 on
conv/dense kernels, default 0) and ``dense_head`` (default False). With ``dense_head=True``
a decoder over the encoder's features (``models/dense.py``) adds per-pixel logits of the
19 classes at the input's size, and the model's output is a dict of two named outputs:
``{PATCH_HEAD: (batch, num_classes), PIXEL_HEAD: (batch, H, W, 19)}`` (:func:`split_outputs`
takes either form apart). Without it the model is exactly the classifier alone: the same
layers, the same checkpoints.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from bigearthnet.core.constants import BANDS, CLASSES_19, PATCH_SIZE

# No TensorFlow here, not even for type hints (import-linter counts those): the registry's
# names answer on login nodes. A model is a tf.keras.Model, typed Any below.
KerasModel = Any

__all__ = [
    "DEFAULT_INPUT_SHAPE",
    "DENSE_CONTEXT",
    "MODELS",
    "PATCH_HEAD",
    "PIXEL_HEAD",
    "WINDOW_BYTES_PER_PX",
    "available_models",
    "count_parameters",
    "get_model",
    "has_dense_head",
    "split_outputs",
]

DEFAULT_INPUT_SHAPE: tuple[int, int, int] = (PATCH_SIZE, PATCH_SIZE, len(BANDS))
# The models' heads, by Keras layer name, and their named outputs: imported weights fill a
# head by it, and --init-weights keeps every layer but a head (its class count may differ).
# Here, the lowest layer that names them: inference and export (which cannot import
# training) read them too. Each registry model ends in the patch head; with the dense head
# it also gives the per-pixel logits, PIXEL_HEAD.
PATCH_HEAD = "logits"  # Dense: a patch's (batch, classes) float32 multi-label logits
PIXEL_HEAD = "pixel_logits"  # (batch, H, W, 19) float32 per-pixel logits (models/dense.py)
DECODER_PREFIX = "decoder_"  # every layer of the dense head but PIXEL_HEAD
PIXEL_CLASSES = len(CLASSES_19)  # the reference maps' classes, whatever the label set


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

DENSE_CONTEXT: dict[str, int] = {"resnet18": 282, "resnet50": 278, "tiny": 24}
"""Registry name -> how far (input px) the dense head's logits of one pixel reach on either
side: the half-width of its receptive field, the largest over the 32 positions of a pixel
within the encoders' stride (the extent of the input gradient of one pixel's logits;
``tests/models/test_models.py`` measures it). A 10 m map discards at least this much of
each window's border (``maps/scene/tiles.py``). Add one with each model of the registry."""

WINDOW_BYTES_PER_PX: dict[str, int] = {"resnet18": 950, "resnet50": 1000, "tiny": 650}
"""Registry name -> the memory one 10 m map window through the dense head takes, bytes per
input px: the peak RSS (VmHWM, reset before the calls) over the RSS with the model built,
through two forward passes, one rank, one thread, measured 2026-11-28 at 480-1,344 px and
taken about 1.7-1.9x over its largest per px (ResNet-50 575 B at 480 px, 459 at 960, 391
at 1,344; ResNet-18 509 at 480, 383 at 960; the tiny CNN 344 at 480, 322 at 960: the 19
classes' probabilities at every px, their softmax and copy, weigh as much as a small
encoder). The headroom holds the map's own buffers of a window (the bands read, the
stored bytes: ~150 B a px) and the allocator's moods. ``maps/scene/tiles.py`` checks and
sizes windows by it; ``tests/inference/test_pixel_model.py`` measures it again. Add one
with each model of the registry."""


def available_models() -> list[str]:
    """Return the registered model names, sorted."""
    return sorted(MODELS)


def get_model(
    name: str,
    input_shape: Sequence[int] = DEFAULT_INPUT_SHAPE,
    num_classes: int = 19,
    *,
    policy: str = "float32",
    **kwargs: Any,
) -> KerasModel:
    """Build the registered model ``name``; ``model.name`` is set to ``name``. Its layers
    compute under the Keras mixed-precision ``policy``; the global policy is left as it was.

    Raises:
        ValueError: ``name`` is not registered; the one-line message lists the valid names.
    """
    try:
        builder = MODELS[name]
    except KeyError:
        valid = ", ".join(available_models())
        raise ValueError(f"unknown model {name!r}; available models: {valid}") from None
    # Imported when built, like the builders: the registry's names are read without TensorFlow.
    with importlib.import_module("bigearthnet.models.precision").precision_policy(policy):
        return builder(input_shape=input_shape, num_classes=num_classes, name=name, **kwargs)


def count_parameters(model: KerasModel) -> int:
    """Number of weights as Keras counts them: trainable + non-trainable (e.g. BN statistics)."""
    return int(model.count_params())


def split_outputs(outputs: Any) -> tuple[Any, Any | None]:
    """(multi-label logits, per-pixel logits or None) of a registry model's output."""
    if isinstance(outputs, dict):
        return outputs[PATCH_HEAD], outputs[PIXEL_HEAD]
    return outputs, None


def has_dense_head(model: KerasModel) -> bool:
    """Whether ``model`` was built with the dense head."""
    return any(layer.name == PIXEL_HEAD for layer in model.layers)


def is_head_layer(name: str) -> bool:
    """Whether the layer ``name`` belongs to a head (the classifier, or the dense head's
    decoder), not to the encoder: what ``--freeze-backbone`` leaves trainable."""
    return name in (PATCH_HEAD, PIXEL_HEAD) or name.startswith(DECODER_PREFIX)
