"""One home for a trained run: a run folder (or one of its checkpoints) -> a model ready to
predict, with its configuration, class list and band normalisation.

The model is rebuilt from the checkpoint pointer (model name, class count, input shape) and
``RUN/config.yaml``, and the weights restored (the optimizer's slots are ignored). Images
are normalised with the band statistics of the run's *training* data (what the model
learned on), falling back to the scored data's manifest when the training data is gone.
Evaluation, patch maps and scene maps all load a run here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from bigearthnet import models
from bigearthnet.core import constants, distributed
from bigearthnet.core.config import TrainConfig, load_run_config
from bigearthnet.data.normalization import band_stats, normalize
from bigearthnet.formats import checkpoints
from bigearthnet.formats.checkpoints import CheckpointError, CheckpointRecord
from bigearthnet.formats.shards import Manifest, ShardError, read_manifest

log = distributed.log


@dataclass
class LoadedModel:
    """A restored classifier with everything needed to score uint16 image batches."""

    model: tf.keras.Model
    record: CheckpointRecord  # the checkpoint pointer
    prefix: Path  # checkpoint prefix the weights came from
    config: TrainConfig  # RUN/config.yaml
    mean: np.ndarray
    std: np.ndarray
    resampling: str = "bilinear"  # how the training data's 20/60 m bands were upsampled
    bands: tuple[str, ...] = constants.BANDS  # the channels the model takes (its checkpoint's)
    run_dir: Path | None = None  # the folder it was loaded from (config.run_dir: trained in)
    _predict: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Batches of different sizes (the last one) should not each trace a new graph.
        self._predict = tf.function(self.scores, reduce_retracing=True)

    @property
    def num_classes(self) -> int:
        return self.record.num_classes

    @property
    def class_names(self) -> list[str]:
        return list(constants.CLASS_SETS[self.num_classes])

    @property
    def epoch(self) -> int | None:
        return self.record.epoch

    @property
    def provenance(self) -> dict[str, str]:
        """Where the weights came from, for the tags of the files made with them."""
        return {
            "model": self.record.model,
            "run_dir": str(self.run_dir or self.config.run_dir),
            "checkpoint": str(self.prefix),
            "epoch": str(self.epoch),
        }

    def scores(self, images: tf.Tensor) -> tf.Tensor:
        """uint16 images -> sigmoid scores, as a TensorFlow computation (the one formula
        evaluation, maps and the exported serving signature all run)."""
        x = normalize(images, self.mean, self.std)  # exactly the training normalisation
        return tf.sigmoid(tf.cast(self.model(x, training=False), tf.float32))

    def predict(self, images: np.ndarray) -> np.ndarray:
        """(N, 120, 120, channels) uint16 -> (N, C) float32 sigmoid scores."""
        if len(images) == 0:
            return np.zeros((0, self.num_classes), dtype=np.float32)
        return self._predict(tf.convert_to_tensor(images)).numpy()


def resolve_checkpoint(
    run_dir: Path, spec: str, config: TrainConfig
) -> tuple[Path, CheckpointRecord]:
    """Checkpoint prefix and pointer record of ``spec``: 'best', 'latest' or a path."""
    if spec in checkpoints.TAGS:
        record = checkpoints.read_pointer(run_dir, spec)
        if record is None:
            raise CheckpointError(
                f"{checkpoints.checkpoint_dir(run_dir)}: no '{spec}' checkpoint "
                "(has training finished an epoch?)"
            )
        return checkpoints.prefix(run_dir, record), record
    path = Path(spec)
    prefix = path / "ckpt" if path.is_dir() else path
    if not Path(f"{prefix}.index").is_file():
        raise CheckpointError(
            f"{spec}: not a checkpoint (no {prefix.name}.index); use best, latest, "
            "a checkpoint folder or its ckpt prefix"
        )
    return prefix, _record_of_folder(prefix.parent, config)


def _record_of_folder(folder: Path, config: TrainConfig) -> CheckpointRecord:
    """The pointer naming ``folder`` if there is one, else what the run's config says."""
    if folder.parent.name == checkpoints.CKPT_DIR:
        for tag in checkpoints.TAGS:
            try:
                record = checkpoints.read_pointer(folder.parent.parent, tag)
            except CheckpointError:
                continue
            if record is not None and record.folder == folder.name:
                return record
    # A copied or renamed checkpoint folder: the run's configuration says what was trained.
    return CheckpointRecord(model=config.model, num_classes=config.labels, folder=folder.name)


def check_label_set(record: CheckpointRecord, config: TrainConfig) -> None:
    """CheckpointError unless the checkpoint's class count is the run's label set."""
    classes, wanted = record.num_classes, config.labels
    if classes not in constants.CLASS_SETS:
        raise CheckpointError(f"checkpoint {record.folder} has {classes} classes, not 19 or 43")
    if classes != wanted:
        raise CheckpointError(
            f"checkpoint {record.folder} has {classes} classes but the run's label set is {wanted}"
        )


def check_data_labels(record: CheckpointRecord, manifest: Manifest, data_dir: Path) -> None:
    """CheckpointError unless the data holds labels of the checkpoint's class set."""
    classes, offered = record.num_classes, manifest.label_sets
    if classes not in offered:
        raise CheckpointError(
            f"checkpoint {record.folder} has {classes} classes but {data_dir} holds only "
            f"{'/'.join(map(str, offered))}-class labels"
        )


def training_data(config: TrainConfig, fallback: Manifest | None) -> Manifest | None:
    """The manifest of the run's training data (what the model learned on: its band
    statistics and resampling), read once; ``fallback`` (the scored data's) when it is gone."""
    try:
        return read_manifest(config.data)
    except ShardError:
        log.warning(
            "training data %s unavailable: normalising with the scored data's statistics",
            config.data,
        )
        return fallback


def load_model(
    run_dir: str | Path, checkpoint: str = "best", manifest: Manifest | None = None
) -> LoadedModel:
    """Rebuild the run's model from its checkpoint pointer and restore the weights.

    ``manifest`` (of the data to score) is the fallback source of band statistics when
    the run's training data is gone. Raises ConfigError or CheckpointError.
    """
    run_dir = Path(run_dir)
    config = load_run_config(run_dir)
    prefix, record = resolve_checkpoint(run_dir, checkpoint, config)
    check_label_set(record, config)
    model = models.get_model(record.model, record.input_shape, record.num_classes)
    # partial: the checkpoint also holds the optimizer and epoch, which inference ignores.
    checkpoints.restore_path(prefix, {"model": model}, partial=True)
    trained_on = training_data(config, manifest)
    if trained_on is not None and trained_on.bands != record.bands:
        trained_on = None  # statistics of other channels: the published ones of the model's
    mean, std = band_stats(trained_on, record.bands)
    resampling = trained_on.resampling if trained_on is not None else "bilinear"
    return LoadedModel(model, record, prefix, config, mean, std, resampling, record.bands, run_dir)
