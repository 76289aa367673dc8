"""Regenerate the weight-import test fixture: a narrow timm ResNet-50 and timm's own logits.

    .venv/bin/pip install -e '.[torch]'   # PyTorch, torchvision, timm
    .venv/bin/python scripts/make_weights_fixture.py

writes ``tests/fixtures/weights/timm_resnet50_narrow.safetensors`` (the same layout as timm's
``resnet50``: 7x7 stem of 64, bottleneck stages [3, 4, 6, 3], only the stage widths cut to
4, 8, 16, 32 so the file stays small) and ``timm_resnet50_narrow.json`` (the inputs' seed
and digest, timm's float32 logits on them, and the versions that made them). The BatchNorm
layers get random affine parameters and running statistics measured on random batches, so
every tensor the import converts changes the logits.

    .venv/bin/python scripts/make_weights_fixture.py --reference DIR --kind timm --format pth

writes a full-size ResNet-50 (timm's, or torchvision's with a 12-band stem) as
``DIR/resnet50.<format>`` and its logits as ``DIR/reference.json``: the reference tier
(``make test-reference``) runs this in its own process, because PyTorch's CUDA build crashes
when it is loaded after TensorFlow.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

FIXTURE_DIR = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "weights"
NAME = "timm_resnet50_narrow"
NARROW_WIDTHS = (4, 8, 16, 32)
IN_CHANS, NUM_CLASSES = 12, 19
INPUT_SEED, INPUT_SHAPE = 0, (2, 120, 120, IN_CHANS)


def reference_inputs() -> np.ndarray:
    """The comparison's inputs, channels last (the Keras layout), already standardised."""
    return np.random.default_rng(INPUT_SEED).standard_normal(INPUT_SHAPE).astype(np.float32)


def inputs_digest(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()


def timm_resnet(widths=(64, 128, 256, 512), *, in_chans=IN_CHANS, num_classes=NUM_CLASSES, seed=0):
    """A timm ``resnet50`` with random weights and BatchNorm statistics that fit them."""
    import timm
    import torch

    torch.manual_seed(seed)
    model = timm.create_model(
        "resnet50", pretrained=False, in_chans=in_chans, num_classes=num_classes, channels=widths
    )
    generator = torch.Generator().manual_seed(seed + 1)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.weight.data.copy_(torch.rand(module.num_features, generator=generator) + 0.5)
            module.bias.data.copy_(0.1 * torch.randn(module.num_features, generator=generator))
            module.reset_running_stats()
            module.momentum = None  # a cumulative average over the calibration batches
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.randn(8, in_chans, 120, 120, generator=generator))
    return model.eval()


def timm_logits(model, x: np.ndarray) -> np.ndarray:
    """timm's forward pass on channels-last ``x``."""
    import torch

    with torch.no_grad():
        return model(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy()


def save_state_dict(model, path: Path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))


def torchvision_resnet(seed: int = 0):
    """torchvision's ResNet-50 (the same v1.5 layout) with a 12-band stem, 19 classes and
    BatchNorm statistics that fit its random weights."""
    import torch
    import torchvision

    torch.manual_seed(seed)
    model = torchvision.models.resnet50(num_classes=NUM_CLASSES)
    model.conv1 = torch.nn.Conv2d(IN_CHANS, 64, 7, 2, 3, bias=False)
    generator = torch.Generator().manual_seed(seed + 1)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.weight.data.uniform_(0.5, 1.5, generator=generator)
            module.reset_running_stats()
            module.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(8, IN_CHANS, 120, 120, generator=generator))
    return model.eval()


def write_reference(folder: Path, kind: str, fmt: str) -> None:
    """A full-size model of ``kind`` as ``folder/resnet50.<fmt>`` and its logits."""
    import torch

    model = timm_resnet(seed=3) if kind == "timm" else torchvision_resnet(seed=4)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"resnet50.{fmt}"
    if fmt == "pth":  # a Lightning-style checkpoint: a wrapper entry and a key prefix
        state = {f"model.{k}": v for k, v in model.state_dict().items()}
        torch.save({"state_dict": state, "epoch": 3}, path)
    else:
        save_state_dict(model, path)
    x = reference_inputs()
    facts = {"file": path.name, "logits": timm_logits(model, x).tolist()}
    (folder / "reference.json").write_text(json.dumps(facts) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--reference", type=Path, metavar="DIR", help="a full-size model")
    parser.add_argument("--kind", choices=("timm", "torchvision"), default="timm")
    parser.add_argument("--format", choices=("safetensors", "pth"), default="safetensors")
    args = parser.parse_args(argv)
    if args.reference is not None:
        write_reference(args.reference, args.kind, args.format)
        return 0
    import timm
    import torch

    FIXTURE_DIR.mkdir(parents=True, exist_ok=True)
    model = timm_resnet(NARROW_WIDTHS)
    save_state_dict(model, FIXTURE_DIR / f"{NAME}.safetensors")
    x = reference_inputs()
    facts = {
        "made_by": "scripts/make_weights_fixture.py",
        "timm": timm.__version__,
        "torch": torch.__version__,
        "model": "resnet50",
        "widths": list(NARROW_WIDTHS),
        "in_chans": IN_CHANS,
        "num_classes": NUM_CLASSES,
        "inputs": {"seed": INPUT_SEED, "shape": list(INPUT_SHAPE), "sha256": inputs_digest(x)},
        "logits": timm_logits(model, x).tolist(),
    }
    (FIXTURE_DIR / f"{NAME}.json").write_text(json.dumps(facts, indent=1) + "\n")
    print(f"wrote {FIXTURE_DIR / NAME}.safetensors and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
