"""The replica's compiled steps: --xla compiles the step that runs; with the dense head the
step also takes the maps, the layer-wise optimizers scale the decoder's layers by their own
norms, and the evaluation step counts pixels."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bigearthnet.core import constants, distributed
from bigearthnet.core.config import TrainConfig
from bigearthnet.core.constants import NO_LABEL
from bigearthnet.data.rank_data import Batch
from bigearthnet.formats.model_inputs import ModelInputs
from bigearthnet.training.replica import Replica
from bigearthnet.training.trainer import make_schedule


def _replica(xla: bool = False, **options) -> Replica:
    distributed.init()
    cfg = TrainConfig(data="d", run_dir="r", model="tiny", xla=xla, epochs=1, batch_size=4,
                      **options)  # fmt: skip
    n = len(constants.BANDS)
    inputs = ModelInputs(constants.BANDS, (1000.0,) * n, (300.0,) * n, (1.0,) * n, (0.0,) * n,
                         "bilinear", constants.CLASSES_19)  # fmt: skip
    schedule = make_schedule(cfg, world_size=1, updates_per_epoch=1)
    return Replica(cfg, inputs=inputs, schedule=schedule)


def _batch(rows: int = 4) -> Batch:
    """uint16 images, labels and reference maps (some pixels and one row without)."""
    rng = np.random.default_rng(0)
    maps = rng.integers(0, 19, (rows, 120, 120), dtype=np.uint8)
    maps[:, :30] = NO_LABEL
    has_map = np.ones(rows, np.uint8)
    has_map[-1] = 0
    return Batch(
        *map(tf.constant, (rng.integers(0, 3000, (rows, 120, 120, 12), dtype=np.uint16),
                           rng.integers(0, 2, (rows, 19), dtype=np.uint8), maps, has_map))
    )  # fmt: skip


@pytest.mark.parametrize("xla", [False, True])
@pytest.mark.parametrize("dense", [False, True], ids=["classifier", "dense-head"])
def test_xla_compiles_the_default_training_step(xla: bool, dense: bool) -> None:
    """The graph of the step that runs without --comm-timing calls the forward/backward
    pass as an XLA cluster exactly when --xla is given (it used to compile only the
    --comm-timing variant, so the flag did nothing); with the dense head too, whose pixel
    count is summed over ranks outside the cluster (Horovod has no XLA kernels)."""
    replica = _replica(xla, pixel_loss_weight=1.0 if dense else 0.0)
    batch = _batch()
    maps = {"maps": batch.maps, "has_map": batch.has_map} if dense else {}
    assert replica.xla_compiled_calls(batch.images, batch.labels, **maps) == (1 if xla else 0)
    seed = tf.constant([1, 2], tf.int64)
    result = replica.train_step(batch.images, batch.labels, seed=seed, stop=False, **maps)
    assert np.isfinite(result.loss)


@pytest.mark.parametrize("name, moved", [("lamb", 0.05), ("lars", 0.05 * 0.02)])
def test_layerwise_optimizers_scale_the_decoder_by_its_own_norm(name: str, moved: float):
    """One LAMB step moves every kernel by lr x its norm, one LARS step (from rest) by lr x
    eta x its norm: the decoder's layers each get their own trust ratio, like the encoder's."""
    replica = _replica(optimizer=name, lr=0.05, trust_coefficient=0.02, pixel_loss_weight=1.0)
    batch = _batch()
    kernels = [v for v in replica.model.trainable_variables
               if v.shape.rank > 1 and "decoder_" in v.name]  # fmt: skip
    assert len(kernels) == 4  # 2 laterals (tiny: stages 2 and 3), smoothing, classifier
    before = [v.numpy() for v in kernels]
    replica.train_step(batch.images, batch.labels, seed=tf.constant([1, 2], tf.int64),
                       stop=False, maps=batch.maps, has_map=batch.has_map)  # fmt: skip
    for variable, old in zip(kernels, before):
        step = np.linalg.norm(variable.numpy() - old)
        assert step == pytest.approx(moved * np.linalg.norm(old), rel=1e-3), variable.name


def test_the_evaluation_step_counts_labelled_pixels() -> None:
    replica = _replica(pixel_loss_weight=1.0)
    batch = _batch()
    out = replica.eval_step(batch, threshold=0.5)
    labelled = int(np.sum(batch.maps.numpy()[:-1] != NO_LABEL))  # the last row has no map
    assert out.pixel_confusion.shape == (19, 19) and out.pixel_confusion.sum() == labelled
    assert out.pixel_weight == labelled and out.pixel_loss_sum > 0
    assert _replica().eval_step(batch, threshold=0.5).pixel_confusion is None


def test_amp_sets_the_models_policy_and_leaves_the_process_alone() -> None:
    """--amp bf16 computes the model in bfloat16 (its logits in float32), and a model built
    after it in the same process is float32 again: the policy once leaked into every later
    model (CI, TF 2.18: imported weights off timm's logits by ~10 %)."""
    replica = _replica(amp="bf16")
    assert "bfloat16" in {layer.compute_dtype for layer in replica.model.layers}
    assert tf.keras.mixed_precision.global_policy().name == "float32"
    assert {layer.compute_dtype for layer in _replica().model.layers} == {"float32"}
