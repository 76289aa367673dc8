"""One home for a trained run: a run folder (or one of its checkpoints) -> a model ready to
predict, with its configuration, classes and input normalisation.

The model is rebuilt from the checkpoint pointer (model name, class count, input shape) and
``RUN/config.yaml``, and the weights restored (the optimizer's slots are ignored). What the
model takes - channels, the band statistics it learned with, resampling, classes - comes
from the pointer's :class:`~bigearthnet.formats.model_inputs.ModelInputs`, never from the
training data, so moving or deleting the shards after training changes no prediction. A
pointer written before that record existed is read with the statistics of its training
data if they are still there and unchanged, of ``--stats-from SHARDS`` if given, and is
refused otherwise: never a silent substitute. Evaluation, patch maps, scene maps and
exports all load a run here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from bigearthnet import models
from bigearthnet.core import constants, distributed
from bigearthnet.core.config import TrainConfig
from bigearthnet.core.errors import InputError
from bigearthnet.core.util import files_digest
from bigearthnet.data.normalization import model_inputs, normalize
from bigearthnet.formats import checkpoints, weights_record
from bigearthnet.formats.checkpoints import CheckpointError, CheckpointRecord
from bigearthnet.formats.class_map import RUN_DIR_TAG, WEIGHTS_DIGEST
from bigearthnet.formats.manifest import Manifest, read_manifest
from bigearthnet.formats.model_inputs import ModelInputs
from bigearthnet.formats.shards import ShardError
from bigearthnet.inference.onnx_pixels import fastest
from bigearthnet.inference.pixel_model import (
    PixelModel,
    PixelRunner,
    Window,
    rebuilt,
    window_shape,
)
from bigearthnet.inference.run_checkpoint import run_checkpoint

log = distributed.log


class NoDenseHead(InputError):
    """Per-pixel predictions asked of a model without the dense head."""


@dataclass
class LoadedModel:
    """A restored classifier with everything needed to score uint16 image batches."""

    model: tf.keras.Model
    record: CheckpointRecord  # the checkpoint pointer
    prefix: Path  # checkpoint prefix the weights came from
    config: TrainConfig  # RUN/config.yaml
    inputs: ModelInputs  # channels, normalisation, resampling, classes (the checkpoint's)
    run_dir: Path | None = None  # the folder it was loaded from (config.run_dir: trained in)
    _predict: Any = field(init=False, repr=False)
    _predict_pixels: Any = field(init=False, repr=False)
    _pixel_models: dict[tuple[int, int], PixelRunner] = field(
        init=False, repr=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        # Batches of different sizes (the last one) should not each trace a new graph.
        self._predict = tf.function(self.scores, reduce_retracing=True)
        self._predict_pixels = tf.function(self.pixel_probabilities, reduce_retracing=True)

    @property
    def num_classes(self) -> int:
        return self.inputs.num_classes

    @property
    def class_names(self) -> list[str]:
        return list(self.inputs.classes)

    @property
    def has_dense_head(self) -> bool:
        """Whether the model also gives per-pixel probabilities (:meth:`predict_pixels`)."""
        return self.record.dense_head

    @property
    def pixel_class_names(self) -> list[str]:
        """The dense head's classes, in the order of its outputs (the reference maps')."""
        return list(constants.CLASSES_19)

    @property
    def bands(self) -> tuple[str, ...]:
        """The channels the model takes, in order."""
        return self.inputs.bands

    @property
    def resampling(self) -> str:
        """How the model's training data upsampled the 20/60 m bands."""
        return self.inputs.resampling

    @property
    def mean(self) -> np.ndarray:
        return np.asarray(self.inputs.mean, dtype=np.float32)

    @property
    def std(self) -> np.ndarray:
        return np.asarray(self.inputs.std, dtype=np.float32)

    @property
    def epoch(self) -> int | None:
        return self.record.epoch

    @cached_property
    def provenance(self) -> dict[str, str]:
        """Where the weights came from, for the tags of the files made with them; with the
        digest of the weights themselves: a run retrained in the same folder keeps its paths."""
        return {
            "model": self.record.model,
            RUN_DIR_TAG: str(self.run_dir or self.config.run_dir),
            "checkpoint": str(self.prefix),
            "epoch": str(self.epoch),
            WEIGHTS_DIGEST: files_digest(checkpoints.weights_files(self.prefix)),
        }

    @property
    def initial_weights(self) -> str | None:
        """Where training started, in words (model card, STAC item); None: from scratch."""
        start = self.config.init_weights
        if not start:
            return None
        for folder in (self.run_dir, Path(start)):  # a published run, or imported weights
            if folder is not None and weights_record.is_record_folder(folder):
                record = weights_record.read_record(folder)  # damaged: one line naming it
                return f"{record.source} weights {record.file} (sha256 {record.sha256[:16]})"
        return f"the run {start}"

    def outputs(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        """uint16 images -> the model's probabilities as a TensorFlow computation (the one
        formula evaluation, maps and the exported serving signature all run): the sigmoid
        scores per class under ``models.PATCH_HEAD``, and with the dense head the softmax per
        pixel under ``models.PIXEL_HEAD``."""
        x = normalize(images, self.mean, self.std)  # exactly the training normalisation
        logits, pixel_logits = models.split_outputs(self.model(x, training=False))
        out = {models.PATCH_HEAD: tf.sigmoid(tf.cast(logits, tf.float32))}
        if pixel_logits is not None:
            out[models.PIXEL_HEAD] = tf.nn.softmax(tf.cast(pixel_logits, tf.float32))
        return out

    def scores(self, images: tf.Tensor) -> tf.Tensor:
        """uint16 images -> sigmoid scores per class (TensorFlow)."""
        return self.outputs(images)[models.PATCH_HEAD]

    def pixel_probabilities(self, images: tf.Tensor) -> tf.Tensor:
        """uint16 images -> the dense head's class probabilities per pixel (TensorFlow)."""
        return self.outputs(images)[models.PIXEL_HEAD]

    def predict(self, images: np.ndarray) -> np.ndarray:
        """(N, 120, 120, channels) uint16 -> (N, C) float32 sigmoid scores."""
        if len(images) == 0:
            return np.zeros((0, self.num_classes), dtype=np.float32)
        return self._predict(tf.convert_to_tensor(images)).numpy()

    def pixel_model(self, window: Window) -> PixelRunner:
        """The dense head at ``window`` px (a side, or (height, width); :mod:`.pixel_model`),
        this model's weights; NoDenseHead for a model without one."""
        if not self.has_dense_head:
            raise NoDenseHead(f"the model of {self.run_dir or self.prefix} has no dense head")
        window = window_shape(window)
        if window not in self._pixel_models:  # built once for a region's scenes
            weights = self.model.get_weights()
            model = rebuilt(self.record.model, window, self.record.input_shape[-1],
                            self.num_classes, lambda m: m.set_weights(weights))  # fmt: skip
            tf_model = PixelModel(model, self.mean, self.std, window)
            self._pixel_models[window] = fastest(tf_model, self.provenance)
        return self._pixel_models[window]

    def predict_pixels(self, images: np.ndarray) -> np.ndarray:
        """(N, H, W, channels) uint16 -> (N, H, W, 19) float32 class probabilities per
        pixel (the dense head's); NoDenseHead for a model without one."""
        if not self.has_dense_head:
            raise NoDenseHead(f"the model of {self.run_dir or self.prefix} has no dense head")
        if len(images) == 0:
            shape = (0, *np.shape(images)[1:3], len(self.pixel_class_names))
            return np.zeros(shape, dtype=np.float32)
        return self._predict_pixels(tf.convert_to_tensor(images)).numpy()


def check_data_labels(record: CheckpointRecord, manifest: Manifest, data_dir: Path) -> None:
    """CheckpointError unless the data holds labels of the checkpoint's class set."""
    classes, offered = record.num_classes, manifest.label_sets
    if classes not in offered:
        raise CheckpointError(
            f"checkpoint {record.folder} has {classes} classes but {data_dir} holds only "
            f"{'/'.join(map(str, offered))}-class labels"
        )


def training_data(config: TrainConfig, record: CheckpointRecord) -> Manifest | None:
    """The manifest of the shards the checkpoint was trained on, if they are still there and
    unchanged (facts for a model card: splits, archive, footprint); None otherwise."""
    try:
        manifest = read_manifest(record.data or config.data)
    except ShardError:
        return None
    return manifest if record.data_id in (None, manifest.data_id) else None


def recorded_inputs(
    config: TrainConfig, record: CheckpointRecord, prefix: Path, stats_from: str | Path | None
) -> ModelInputs:
    """What the checkpoint takes: its own record; for a pointer written before runs recorded
    it, the statistics of its unchanged training data or of ``stats_from``."""
    if record.inputs is not None:
        if stats_from is not None:
            log.warning("--stats-from %s ignored: %s records its normalisation", stats_from, prefix)
        if record.inputs.classes != constants.CLASS_SETS[record.num_classes]:
            # Maps, reports and exports name every output by these: a list of another set
            # (43 names on a 19-class head) was a traceback in the middle of a map.
            raise CheckpointError(
                f"{prefix}: records {len(record.inputs.classes)} class names that are not the "
                f"{record.num_classes} classes of its head"
            )
        return record.inputs
    trained_on = Path(record.data or config.data)
    source = Path(stats_from) if stats_from is not None else trained_on
    way_out = "--stats-from SHARDS normalises with the train split of shards made the same way"
    try:
        manifest = read_manifest(source)
    except ShardError as err:
        if stats_from is not None:
            raise
        raise CheckpointError(
            f"{prefix}: an older checkpoint that does not record its normalisation, and its "
            f"training data {trained_on} is gone ({err}); {way_out}"
        ) from None
    if stats_from is None and record.data_id not in (None, manifest.data_id):
        raise CheckpointError(
            f"{prefix}: an older checkpoint that does not record its normalisation, and "
            f"{trained_on} now holds other shards ({manifest.data_id}, trained on "
            f"{record.data_id}); {way_out}"
        )
    if manifest.bands != record.bands:
        raise CheckpointError(
            f"{source}: shards of bands {constants.describe_bands(manifest.bands)}, but "
            f"{prefix} takes {constants.describe_bands(record.bands)}"
        )
    return model_inputs(manifest, record.num_classes)


def load_model(
    run_dir: str | Path, checkpoint: str = "best", stats_from: str | Path | None = None
) -> LoadedModel:
    """Rebuild the run's model from its checkpoint pointer and restore the weights.

    ``stats_from`` (a shards folder) gives the normalisation of an older checkpoint that
    does not record it. Raises ConfigError or CheckpointError.
    """
    run_dir = Path(run_dir)
    config, prefix, record = run_checkpoint(run_dir, checkpoint)
    inputs = recorded_inputs(config, record, prefix, stats_from)
    model = models.get_model(
        record.model, record.input_shape, record.num_classes, dense_head=record.dense_head
    )
    # partial: the checkpoint also holds the optimizer and epoch, which inference ignores.
    checkpoints.restore_path(prefix, {"model": model}, partial=True)
    return LoadedModel(model, record, prefix, config, inputs, run_dir)
