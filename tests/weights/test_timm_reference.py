"""The opt-in reference tier (``make test-reference``): full-size timm and torchvision
ResNet-50s, made and run by PyTorch (in their own process: PyTorch's CUDA build crashes when
loaded after TensorFlow), imported here and compared logit by logit. Skipped where PyTorch,
torchvision and timm are not installed (``pip install -e '.[torch]'``)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO, assert_close_to_scale

from bigearthnet import models
from bigearthnet.cli.weights import main
from bigearthnet.formats import weights_record
from scripts.make_weights_fixture import reference_inputs

MISSING = [m for m in ("torch", "torchvision", "timm") if importlib.util.find_spec(m) is None]
pytestmark = [
    pytest.mark.reference,
    pytest.mark.skipif(bool(MISSING), reason=f"needs .[torch]: no {', '.join(MISSING)}"),
]


@pytest.mark.parametrize(
    ("kind", "fmt", "source"),
    [
        ("timm", "safetensors", "timm"),
        ("timm", "pth", "timm"),
        ("torchvision", "safetensors", "torchvision"),
    ],  # fmt: skip
)
def test_full_size_resnet50_logits(tmp_path, kind, fmt, source):
    made = subprocess.run(
        [
            sys.executable,
            "scripts/make_weights_fixture.py",
            "--reference",
            str(tmp_path),
            "--kind",
            kind,
            "--format",
            fmt,
        ],  # fmt: skip
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    facts = json.loads((tmp_path / "reference.json").read_text())
    src = tmp_path / facts["file"]
    assert main(["import", str(src), "--out", str(tmp_path / "w"), "--source", source]) == 0
    x = reference_inputs()
    model = models.get_model("resnet50", x.shape[1:], 19)
    model.load_weights(str(tmp_path / "w" / weights_record.WEIGHTS_FILE), by_name=True)
    logits = model(x, training=False).numpy()
    print(f"max |logit difference| {kind} {fmt}: {np.abs(logits - facts['logits']).max():.2e}")
    assert_close_to_scale(logits, facts["logits"])
