"""The replica's compiled steps: --xla compiles the step that runs."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bigearthnet.core import constants, distributed
from bigearthnet.core.config import TrainConfig
from bigearthnet.formats.model_inputs import ModelInputs
from bigearthnet.training.replica import Replica
from bigearthnet.training.trainer import make_schedule


def _replica(xla: bool) -> Replica:
    distributed.init()
    cfg = TrainConfig(data="d", run_dir="r", model="tiny", xla=xla, epochs=1, batch_size=4)
    n = len(constants.BANDS)
    inputs = ModelInputs(constants.BANDS, (1000.0,) * n, (300.0,) * n, (1.0,) * n, (0.0,) * n,
                         "bilinear", constants.CLASSES_19)  # fmt: skip
    schedule = make_schedule(cfg, world_size=1, updates_per_epoch=1)
    return Replica(cfg, inputs=inputs, schedule=schedule)


@pytest.mark.parametrize("xla", [False, True])
def test_xla_compiles_the_default_training_step(xla: bool) -> None:
    """The graph of the step that runs without --comm-timing calls the forward/backward
    pass as an XLA cluster exactly when --xla is given (it used to compile only the
    --comm-timing variant, so the flag did nothing)."""
    replica = _replica(xla)
    rng = np.random.default_rng(0)
    images = tf.constant(rng.integers(0, 3000, (4, 120, 120, 12), dtype=np.uint16))
    labels = tf.constant(rng.integers(0, 2, (4, 19), dtype=np.uint8))
    assert replica.xla_compiled_calls(images, labels) == (1 if xla else 0)
    seed = tf.constant([1, 2], tf.int64)
    result = replica.train_step(images, labels, seed=seed, stop=False)
    assert np.isfinite(result.loss)
