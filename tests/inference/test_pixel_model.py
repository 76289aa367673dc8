"""The dense head run fully convolutionally (bigearthnet/inference/pixel_model.py): the
memory one window takes, measured again against what each model declares
(``bigearthnet.models.WINDOW_BYTES_PER_PX``, which sizes and checks the 10 m maps'
windows)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bigearthnet import models

SIDE = 480  # px: where the figures were largest per px (fixed costs weigh most)

# One forward pass in a fresh process: the peak RSS (VmHWM, reset just before the calls,
# so no earlier peak of the process counts) over the RSS with the model built, through
# two calls (the second with the allocator's pools settled).
MEASURE = """
import json, sys
import numpy as np
from bigearthnet.core import distributed
distributed.init(threads=1)
from bigearthnet.inference.pixel_model import PixelModel, rebuilt
name, side = sys.argv[1], int(sys.argv[2])
model = PixelModel(rebuilt(name, side, 12, 19, lambda m: None), np.full(12, 1000.0),
                   np.full(12, 1000.0), side)
images = np.random.default_rng(0).integers(0, 3000, (1, side, side, 12)).astype(np.uint16)
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
open("/proc/self/clear_refs", "w").write("5")  # the peak (VmHWM) from here
before = status("VmRSS")
model(images)
model(images)
print(json.dumps((status("VmHWM") - before) / side**2))
"""


@pytest.mark.slow  # a process per model, ResNet-50 at 480 px: ~15 s each
@pytest.mark.parametrize("model", models.available_models())
def test_a_windows_memory_is_what_its_model_declares(model) -> None:
    """Measured again: the peak RSS growth of a window's forward pass is below the bytes
    per px its model declares, and the figure is no more than 3x it: a window is neither
    let past memory it would take nor refused as the old bound refused (6-9x for
    ResNet-50). At 480 px, 2026-11-28: the tiny CNN 344 B a px, ResNet-18 509, ResNet-50
    575."""
    done = subprocess.run([sys.executable, "-c", MEASURE, model, str(SIDE)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    declared = models.WINDOW_BYTES_PER_PX[model]
    assert measured <= declared <= 3 * measured, (model, measured, declared)
