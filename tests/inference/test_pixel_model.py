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

# One forward pass in a fresh process (a test process's peak RSS is its past's): the peak
# RSS growth over the model built, after a second call (the allocator's pools settled).
MEASURE = """
import json, resource, sys
import numpy as np, psutil
from bigearthnet.core import distributed
distributed.init(threads=1)
from bigearthnet.inference.pixel_model import PixelModel, rebuilt
name, side = sys.argv[1], int(sys.argv[2])
model = PixelModel(rebuilt(name, side, 12, 19, lambda m: None), np.full(12, 1000.0),
                   np.full(12, 1000.0), side)
images = np.random.default_rng(0).integers(0, 3000, (1, side, side, 12)).astype(np.uint16)
before = psutil.Process().memory_info().rss
model(images)
model(images)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps((peak - before) / side**2))
"""


@pytest.mark.slow  # a process per model, ResNet-50 at 480 px: ~15 s each
@pytest.mark.parametrize("model", models.available_models())
def test_a_windows_memory_is_what_its_model_declares(model) -> None:
    """Measured again: the peak RSS growth of a window's forward pass is below the bytes
    per px its model declares, and the figure is no more than twice it (1.5x when it was
    measured): a window is neither refused for memory it would not take nor let past
    memory it would."""
    done = subprocess.run([sys.executable, "-c", MEASURE, model, str(SIDE)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    declared = models.WINDOW_BYTES_PER_PX[model]
    assert measured <= declared <= 2 * measured, (model, measured, declared)
