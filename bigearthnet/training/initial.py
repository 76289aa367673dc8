"""Where a run's weights start: random (the default), imported published weights
(``bigearthnet-weights import``) or another run's best checkpoint (``--init-weights``), and
``--freeze-backbone`` for linear probing.

``--init-weights`` is resolved once, at the start (:func:`initial_weights`): which kind of
folder it is, what it holds (an imported folder's ``weights.json``, a run's best checkpoint
record: read once, without TensorFlow's model), whether it fits this run, and the
normalisation it expects. That value goes to the replica, which loads the network from it
once per rank and copies its layers (:func:`start_from`).

A run started from weights normalises its inputs as those weights were trained (the imported
record's statistics, or the other run's recorded inputs), not with its own shards'
statistics: the features the backbone learned expect them. The run's checkpoints record
that normalisation like any other. Every rank loads the same file; rank 0's state is then
broadcast as at every start.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import tensorflow as tf

from bigearthnet import models
from bigearthnet.core import constants, distributed
from bigearthnet.core.config import RUN_CONFIG, TrainConfig, load_run_config
from bigearthnet.core.errors import ConfigError, InputError
from bigearthnet.formats import checkpoints, weights_record
from bigearthnet.formats.manifest import Manifest
from bigearthnet.formats.model_inputs import ModelInputs
from bigearthnet.formats.weights_record import WeightsRecord
from bigearthnet.inference.run_checkpoint import run_checkpoint
from bigearthnet.inference.trained_run import load_model, recorded_inputs
from bigearthnet.models import PATCH_HEAD
from bigearthnet.weights.importer import check_registry_fit, load_folder

log = distributed.log


@dataclass(frozen=True)
class InitialWeights:
    """``--init-weights``, resolved: its folder, what kind it is (an imported weights folder,
    whose record is kept, or a run folder: its best checkpoint) and the normalisation its
    weights expect, with this run's classes."""

    path: Path
    record: WeightsRecord | None  # an imported folder's weights.json; None: a run folder
    inputs: ModelInputs

    @property
    def imported(self) -> bool:
        return self.record is not None

    def network(self) -> tf.keras.Model:
        """The network holding the weights: the imported folder's, or the run's best
        checkpoint restored."""
        if self.record is not None:
            return load_folder(self.path, self.record)
        return load_model(self.path).model


def resumes(cfg: TrainConfig) -> bool:
    """Whether this run continues from a checkpoint of its own, which holds its weights and
    (in its record) its normalisation: the initial weights are then not read again."""
    return cfg.resume and checkpoints.has_latest(cfg.run_dir)


def keep_start(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with the ``init_weights`` of the run it resumes (its own config.yaml), so that
    a resume without ``--init-weights`` keeps the run's provenance; ConfigError when
    ``--init-weights`` names another start."""
    if not resumes(cfg) or not (Path(cfg.run_dir) / RUN_CONFIG).is_file():
        return cfg
    saved = load_run_config(cfg.run_dir).init_weights
    given = cfg.init_weights
    if given and not _same_start(given, saved):
        started = f"from {saved}" if saved else "from random weights"
        raise ConfigError(
            f"--init-weights {given}: {cfg.run_dir} resumes a run that started {started}; "
            "use another --run-dir, or --no-resume to start this one over"
        )
    if saved and not given:
        log.info("resuming a run that started from %s (its config.yaml)", saved)
    return dataclasses.replace(cfg, init_weights=saved)


def _same_start(given: str, saved: str) -> bool:
    return bool(saved) and Path(given).resolve() == Path(saved).resolve()


def initial_weights(cfg: TrainConfig, manifest: Manifest) -> InitialWeights | None:
    """``--init-weights`` resolved for a run on the data of ``manifest``; None for random
    weights or a resume (its checkpoint holds the weights, its record the normalisation).
    InputError when the folder is neither kind, or its weights do not fit the run."""
    if not cfg.init_weights:
        return None
    path = Path(cfg.init_weights)
    if resumes(cfg):
        log.info("resuming: the checkpoint holds the weights (%s is not read again)", path)
        return None
    classes = constants.CLASS_SETS[cfg.labels]
    record: WeightsRecord | None = None
    if weights_record.is_weights_folder(path):
        record = weights_record.read(path)
        check_registry_fit(record, path)
        _check_fit(path, record.model, record.bands, cfg, manifest)
        inputs = record.model_inputs(classes)
    elif (path / RUN_CONFIG).is_file():
        config, prefix, best = run_checkpoint(path)  # its record, without TensorFlow's model
        trained = recorded_inputs(config, best, prefix, None)
        _check_fit(path, best.model, trained.bands, cfg, manifest)
        inputs = dataclasses.replace(
            trained, classes=classes, stats=f"as the initial weights' run {path} ({trained.stats})"
        )
    else:
        raise InputError(
            f"--init-weights {path}: neither a folder of bigearthnet-weights import "
            f"({weights_record.RECORD_FILE}, {weights_record.WEIGHTS_FILE}) nor a run folder "
            f"({RUN_CONFIG})"
        )
    if inputs.resampling != manifest.resampling:
        log.warning("%s were trained on %s-resampled bands, the data is %s-resampled",
                    path, inputs.resampling, manifest.resampling)  # fmt: skip
    return InitialWeights(path, record, inputs)


def start_from(model: tf.keras.Model, start: InitialWeights | None, cfg: TrainConfig) -> None:
    """Set ``model``'s weights from ``start`` (None: they stay as built, random or to be
    restored): every layer of the encoder must fit; the heads' layers (the patch head, the
    dense head's decoder) are taken where the source has them alike and stay random
    otherwise (a published ResNet starts the encoder of a model with the dense head, whose
    decoder starts random). With ``cfg.freeze_backbone`` every layer but the heads' is made
    untrainable."""
    if start is not None:
        source = start.network()
        decoder = _decoder_from(model, source)
        for layer in model.layers:
            if not layer.weights or models.is_head_layer(layer.name):
                continue
            if not _same_shapes(layer, source, layer.name):
                raise InputError(
                    f"--init-weights {start.path}: its layer {layer.name} does not fit the "
                    f"--model {cfg.model} of this run"
                )
            layer.set_weights(source.get_layer(layer.name).get_weights())
        head = _same_shapes(model.get_layer(PATCH_HEAD), source, PATCH_HEAD)
        if head:
            model.get_layer(PATCH_HEAD).set_weights(source.get_layer(PATCH_HEAD).get_weights())
        log.info("initial weights from %s (%s%s)", start.path,
                 "with its head" if head else "head initialised at random",
                 decoder)  # fmt: skip
    if cfg.freeze_backbone:
        for layer in model.layers:
            layer.trainable = models.is_head_layer(layer.name)


def _decoder_from(model: tf.keras.Model, source: tf.keras.Model) -> str:
    """Copy the dense head's layers of ``source`` into ``model`` where both have it alike
    (a run with the dense head); what happened, for the log ("" without a dense head)."""
    if not models.has_dense_head(model):
        return ""
    layers = [layer for layer in model.layers if layer.weights and models.is_head_layer(layer.name)
              and layer.name != PATCH_HEAD]  # fmt: skip
    if not all(_same_shapes(layer, source, layer.name) for layer in layers):
        return "; dense head initialised at random"
    for layer in layers:
        layer.set_weights(source.get_layer(layer.name).get_weights())
    return "; with its dense head"


def _same_shapes(layer: tf.keras.layers.Layer, source: tf.keras.Model, name: str) -> bool:
    try:
        other = source.get_layer(name)
    except ValueError:
        return False
    return [w.shape for w in layer.get_weights()] == [w.shape for w in other.get_weights()]


def _check_fit(
    path: Path, model: str, bands: tuple[str, ...], cfg: TrainConfig, manifest: Manifest
) -> None:
    if model != cfg.model:
        raise InputError(f"--init-weights {path}: weights of a {model}, not --model {cfg.model}")
    if tuple(bands) != tuple(manifest.bands):
        raise InputError(
            f"--init-weights {path}: takes {constants.describe_bands(bands)}, the data "
            f"{cfg.data} holds {constants.describe_bands(manifest.bands)}"
        )
