"""Read a PyTorch ResNet state dict from a local file into NumPy arrays, without PyTorch where
the file allows it.

* ``.safetensors``: the ``safetensors`` package's NumPy reader (no PyTorch);
* ``.pth``, ``.pt``, ``.ckpt``, ``.bin``: ``torch.load`` (weights only), where PyTorch is
  installed; elsewhere a one-line error that names the extra to install.

Wrappers are taken off: a Lightning/ConfigILM checkpoint's ``state_dict`` (or ``model``)
entry, and any key prefix in front of the ResNet's own names (``model.vision_encoder.``,
``module.encoder_q.``, ``backbone.``), found from where ``conv1.weight`` sits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bigearthnet.core.errors import InputError

TORCH_SUFFIXES = (".pth", ".pt", ".ckpt", ".bin")
TORCH_EXTRA = "pip install 'bigearthnet-hpc[torch]' (or convert the file to .safetensors)"
STEM_KEY = "conv1.weight"


@dataclass(frozen=True)
class StateDict:
    """A ResNet's tensors by their timm/torchvision names, and the prefix they came with."""

    tensors: dict[str, np.ndarray]
    prefix: str  # taken off every key ("" when there was none)
    dropped: tuple[str, ...] = ()  # keys outside the prefix (other networks of a wrapper)


def read_state_dict(path: str | Path) -> StateDict:
    """The ResNet state dict in ``path``; InputError naming the file and the problem."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    if path.suffix == ".safetensors":
        raw = _read_safetensors(path)
    elif path.suffix in TORCH_SUFFIXES:
        raw = _read_torch(path)
    else:
        raise InputError(
            f"{path}: unknown weights file type {path.suffix!r}; "
            f"expected .safetensors or one of {', '.join(TORCH_SUFFIXES)}"
        )
    return strip_prefix(path, raw)


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise InputError(f"{path}: not a readable safetensors file ({err})") from None
    # Half-precision releases (bfloat16, float16) convert exactly to float32, the Keras
    # weights' type; NumPy alone cannot compute with bfloat16 (ml_dtypes reads it).
    return {key: _as_float32(value) for key, value in tensors.items()}


def _as_float32(value: np.ndarray) -> np.ndarray:
    low_precision = value.dtype.name in ("bfloat16", "float16")
    return value.astype(np.float32) if low_precision else value


def _read_torch(path: Path) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError:
        raise InputError(
            f"{path}: reading {path.suffix} files needs PyTorch: {TORCH_EXTRA}"
        ) from None
    try:
        loaded: Any = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many kinds for a damaged or foreign file
        raise InputError(f"{path}: not a readable PyTorch file ({type(err).__name__})") from None
    for wrapper in ("state_dict", "model", "teacher", "student"):
        if isinstance(loaded, dict) and isinstance(loaded.get(wrapper), dict):
            loaded = loaded[wrapper]
            break
    if not isinstance(loaded, dict):
        raise InputError(f"{path}: holds a {type(loaded).__name__}, not a state dict")
    return {
        str(key): value.detach().float().numpy() if value.is_floating_point() else value.numpy()
        for key, value in loaded.items()
        if isinstance(value, torch.Tensor)
    }


def strip_prefix(path: Path, raw: dict[str, np.ndarray]) -> StateDict:
    """The ResNet's own keys: the prefix in front of the stem's ``conv1.weight`` is taken off,
    keys without it are dropped. Of several candidate stems, a momentum copy (MoCo's
    ``encoder_k``, MoCo v3's ``momentum_encoder``) is never taken: the encoder trained by
    back-propagation (``encoder_q``, ``base_encoder``) is what papers fine-tune; then the
    shortest prefix, first by name."""
    stems = sorted(
        (key[: -len(STEM_KEY)] for key in raw if key == STEM_KEY or key.endswith("." + STEM_KEY)),
        key=lambda prefix: (_is_momentum_copy(prefix), len(prefix), prefix),
    )
    # A bottleneck's own conv1 ("layer1.0.conv1.weight") is not a stem.
    stems = [p for p in stems if not p.rstrip(".").split(".")[-1].isdigit()]
    if not stems:
        raise InputError(f"{path}: no '{STEM_KEY}' in {len(raw)} tensors: not a ResNet state dict")
    prefix = stems[0]
    tensors = {key[len(prefix) :]: value for key, value in raw.items() if key.startswith(prefix)}
    dropped = tuple(sorted(key for key in raw if not key.startswith(prefix)))
    return StateDict(tensors=tensors, prefix=prefix, dropped=dropped)


MOMENTUM_COPIES = frozenset({"encoder_k", "momentum_encoder"})


def _is_momentum_copy(prefix: str) -> bool:
    return any(part in MOMENTUM_COPIES for part in prefix.split("."))
