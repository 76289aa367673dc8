"""timm/torchvision ResNet tensors -> the Keras layers of :mod:`bigearthnet.models.resnet`.

Both are ResNet v1.5 with symmetric padding, so the conversion is a renaming and a
re-layout, detail by detail:

* names: ``conv1``/``bn1`` -> ``conv1_conv``/``conv1_bn``; ``layer{s}.{b}.conv{k}``/``bn{k}``
  -> ``conv{s+1}_block{b+1}_{k}_conv``/``_bn``; ``downsample.0``/``.1`` -> ``_0_conv``/``_0_bn``;
  ``fc`` -> the patch head (``models.PATCH_HEAD``);
* convolution kernels (out, in, kh, kw) -> (kh, kw, in, out); PyTorch's convolutions have no
  bias, the Keras ones get zeros; dense kernels are transposed;
* BatchNorm: gamma, beta, running mean and variance. Keras' epsilon is 1.001e-5, PyTorch's
  1e-5: the difference is taken off the variance, so ``var + eps`` is the same number;
* the head's rows are reordered into the official class order (:func:`head_rows`).

The first convolution's channels are adapted by :func:`adapt_stem`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from bigearthnet.core.errors import InputError
from bigearthnet.weights.sources import TORCH_BN_EPSILON

KERAS_BN_EPSILON = 1.001e-5  # bigearthnet.models.resnet.BN_EPSILON (checked by the tests)
LAYOUTS: dict[tuple[tuple[int, ...], bool], str] = {
    ((2, 2, 2, 2), False): "resnet18",
    ((3, 4, 6, 3), True): "resnet50",
}
IGNORED_SUFFIX = "num_batches_tracked"
BN_PARAMS = ("weight", "bias", "running_mean", "running_var")  # gamma, beta, mean, variance


@dataclass(frozen=True)
class Layout:
    """The network a state dict holds."""

    model: str  # registry name
    blocks: tuple[int, ...]
    bottleneck: bool
    stem_width: int
    widths: tuple[int, ...]
    in_channels: int
    head_outputs: int | None  # rows of fc.weight; None without a head
    other_head: tuple[str, ...] = ()  # a head of other layers (an MLP's fc.0, fc.3): dropped


def layout_of(tensors: dict[str, np.ndarray], file: str) -> Layout:
    """The ResNet layout of ``tensors``; InputError for anything but a ResNet-18/50."""
    blocks = tuple(
        len({key.split(".")[1] for key in tensors if key.startswith(f"layer{stage}.")})
        for stage in range(1, 5)
    )
    bottleneck = "layer1.0.conv3.weight" in tensors
    model = LAYOUTS.get((blocks, bottleneck))
    if model is None or "conv1.weight" not in tensors:
        kind = "bottleneck" if bottleneck else "basic"
        raise InputError(
            f"{file}: not a ResNet-18 or ResNet-50 state dict ({kind} blocks {list(blocks)})"
        )
    stem = tensors["conv1.weight"]
    if stem.ndim != 4 or stem.shape[2:] != (7, 7):
        raise InputError(f"{file}: conv1.weight has shape {stem.shape}, not (out, in, 7, 7)")
    widths = tuple(int(tensors[f"layer{s}.0.conv1.weight"].shape[0]) for s in range(1, 5))
    fc = tensors.get("fc.weight")
    other_head = sorted(
        {key.rsplit(".", 1)[0] for key in tensors if key.startswith("fc.")} - {"fc"}
    )
    return Layout(model, blocks, bottleneck, int(stem.shape[0]), widths, int(stem.shape[1]),
                  None if fc is None else int(fc.shape[0]), tuple(other_head))  # fmt: skip


def blocks_of(model: str, where: object) -> tuple[tuple[int, ...], bool]:
    """(blocks per stage, bottleneck) of the registry ResNet ``model``."""
    for (blocks, bottleneck), name in LAYOUTS.items():
        if name == model:
            return blocks, bottleneck
    raise InputError(f"{where}: model {model!r} is neither {' nor '.join(LAYOUTS.values())}")


def layer_names(layout: Layout) -> Iterator[tuple[str, str, str]]:
    """(torch prefix, Keras layer name, kind) of every layer with weights, stem first."""
    yield "conv1", "conv1_conv", "conv"
    yield "bn1", "conv1_bn", "bn"
    convs = 3 if layout.bottleneck else 2
    for stage, count in enumerate(layout.blocks, start=1):
        for block in range(count):
            torch_block, keras_block = f"layer{stage}.{block}", f"conv{stage + 1}_block{block + 1}"
            for k in range(1, convs + 1):
                yield f"{torch_block}.conv{k}", f"{keras_block}_{k}_conv", "conv"
                yield f"{torch_block}.bn{k}", f"{keras_block}_{k}_bn", "bn"
            yield f"{torch_block}.downsample.0", f"{keras_block}_0_conv", "conv?"
            yield f"{torch_block}.downsample.1", f"{keras_block}_0_bn", "bn?"


def keras_weights(
    tensors: dict[str, np.ndarray], layout: Layout, stem_kernel: np.ndarray, file: str
) -> dict[str, list[np.ndarray]]:
    """Keras layer name -> its weights in Keras' order, for every layer but the head.
    ``stem_kernel`` is the adapted first convolution (out, in, 7, 7)."""
    out: dict[str, list[np.ndarray]] = {}
    used = set()
    for torch_name, keras_name, kind in layer_names(layout):
        optional = kind.endswith("?")
        if optional and f"{torch_name}.weight" not in tensors:
            continue  # no projection shortcut in this block
        if kind.startswith("conv"):
            kernel = (
                stem_kernel if torch_name == "conv1" else _get(tensors, torch_name, "weight", file)
            )
            out[keras_name] = [conv_kernel(kernel), np.zeros(kernel.shape[0], np.float32)]
            used.add(f"{torch_name}.weight")
        else:
            out[keras_name] = batchnorm(tensors, torch_name, file)
            used.update(
                f"{torch_name}.{p}" for p in ("weight", "bias", "running_mean", "running_var")
            )
    unknown = sorted(
        key for key in tensors
        if key not in used and not key.endswith(IGNORED_SUFFIX) and not key.startswith("fc.")
    )  # fmt: skip
    if unknown:
        raise InputError(
            f"{file}: tensors the ResNet layout does not have: {', '.join(unknown[:4])}"
        )
    return out


def conv_kernel(weight: np.ndarray) -> np.ndarray:
    """PyTorch (out, in, kh, kw) -> Keras (kh, kw, in, out)."""
    return np.ascontiguousarray(weight.transpose(2, 3, 1, 0), dtype=np.float32)


def batchnorm(tensors: dict[str, np.ndarray], name: str, file: str) -> list[np.ndarray]:
    """[gamma, beta, moving mean, moving variance] with PyTorch's epsilon kept exactly."""
    gamma, beta, mean, var = (_get(tensors, name, p, file) for p in BN_PARAMS)
    var = np.maximum(var + (TORCH_BN_EPSILON - KERAS_BN_EPSILON), 0.0)
    return [np.asarray(a, np.float32) for a in (gamma, beta, mean, var)]


def head_rows(
    tensors: dict[str, np.ndarray], head_order: tuple[str, ...] | None, classes: tuple[str, ...]
) -> list[np.ndarray]:
    """The patch head's [kernel, bias]: rows of ``fc`` in ``head_order`` (the source's
    class names; None: already ``classes``' order) picked by name into ``classes``' order."""
    weight, bias = tensors["fc.weight"], tensors["fc.bias"]
    rows = (
        list(range(len(classes))) if head_order is None else [head_order.index(c) for c in classes]
    )
    return [np.ascontiguousarray(weight[rows].T, np.float32), np.asarray(bias[rows], np.float32)]


def adapt_stem(
    kernel: np.ndarray, channels: tuple[str, ...], target: tuple[str, ...]
) -> tuple[np.ndarray, list[str]]:
    """The first convolution (out, in, 7, 7) for the ``target`` channels, and what changed.

    A channel in both is copied; a source channel the target lacks is dropped; a target
    channel the source lacks gets the mean of the source's filters. When channels are added,
    the whole kernel is scaled by copied/target channels so an input of equal standardised
    values gives the same response as before (timm's ``adapt_input_conv`` rule).
    """
    if channels == target:
        return kernel, []
    notes = []
    dropped = [c for c in channels if c not in target]
    added = [c for c in target if c not in channels]
    if dropped:
        notes.append(f"dropped the filters of {', '.join(dropped)}")
    mean_filter = kernel.mean(axis=1)
    slices = [kernel[:, channels.index(c)] if c in channels else mean_filter for c in target]
    adapted = np.stack(slices, axis=1).astype(np.float32)
    if added:
        scale = (len(target) - len(added)) / len(target)
        adapted *= scale
        notes.append(
            f"gave {', '.join(added)} the mean filter of the source's channels and scaled the "
            f"kernel by {scale:.3g}"
        )
    if not dropped and not added:
        notes.append(f"reordered the channels from {','.join(channels)} to {','.join(target)}")
    return adapted, notes


def _get(tensors: dict[str, np.ndarray], name: str, param: str, file: str) -> np.ndarray:
    key = f"{name}.{param}"
    if key not in tensors:
        raise InputError(f"{file}: no {key}: not the ResNet layout")
    return tensors[key]
