"""An export folder (``bigearthnet-export``) as a model ready to predict, without the run
folder it came from: the SavedModel's serving signature takes raw uint16 patches in the
export's band order and returns probabilities (and, from a model with the dense head, each
pixel's class probabilities), so nothing here normalises."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np
import tensorflow as tf

from bigearthnet.core.util import files_digest
from bigearthnet.formats.class_map import RUN_DIR_TAG, WEIGHTS_DIGEST
from bigearthnet.formats.exported import (
    INFO_FILE,
    INPUT_NAME,
    OUTPUT_NAME,
    PIXEL_OUTPUT_NAME,
    SAVEDMODEL_DIR,
    SIGNATURE,
    ExportError,
    ExportInfo,
    read_export_info,
    weights_files,
)
from bigearthnet.inference.onnx_pixels import fastest
from bigearthnet.inference.pixel_model import (
    PixelModel,
    PixelRunner,
    Window,
    rebuilt,
    window_shape,
)
from bigearthnet.inference.trained_run import NoDenseHead


class ExportedModel:
    """The SavedModel of an export folder and its record (bands, classes, source)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.info: ExportInfo = read_export_info(self.folder)
        saved = self.folder / SAVEDMODEL_DIR
        if not (saved / "saved_model.pb").is_file():
            raise ExportError(f"{saved}: no saved_model.pb: the export is incomplete")
        self._saved = tf.saved_model.load(str(saved))
        self._serve = self._saved.signatures[SIGNATURE]
        self._pixel_models: dict[tuple[int, int], PixelRunner] = {}
        outputs = self._serve.structured_outputs
        if outputs[OUTPUT_NAME].shape[-1] != self.num_classes:  # maps name every output so
            raise ExportError(
                f"{self.folder / INFO_FILE}: {self.num_classes} class names for a model of "
                f"{outputs[OUTPUT_NAME].shape[-1]} outputs"
            )
        if (PIXEL_OUTPUT_NAME in outputs) != self.info.has_dense_head:
            raise ExportError(
                f"{self.folder / INFO_FILE}: its pixel_class_names and the SavedModel's "
                f"{PIXEL_OUTPUT_NAME} output disagree on whether it has the dense head"
            )

    @property
    def num_classes(self) -> int:
        return self.info.num_classes

    @property
    def class_names(self) -> list[str]:
        return list(self.info.class_names)

    @property
    def bands(self) -> tuple[str, ...]:
        return self.info.bands

    @property
    def has_dense_head(self) -> bool:
        return self.info.has_dense_head

    @property
    def pixel_class_names(self) -> list[str]:
        return list(self.info.pixel_class_names or ())

    @property
    def resampling(self) -> str:
        return self.info.resampling

    @cached_property
    def provenance(self) -> dict[str, str]:
        source = self.info.source
        return {
            "model": self.info.model,
            "export": str(self.folder),
            RUN_DIR_TAG: source.run_dir,
            "checkpoint": source.checkpoint,
            "epoch": str(source.epoch),
            WEIGHTS_DIGEST: files_digest(weights_files(self.folder)),
        }

    def predict(self, images: np.ndarray) -> np.ndarray:
        """(N, H, W, C) uint16 -> (N, classes) float32 probabilities."""
        if len(images) == 0:
            return np.zeros((0, self.num_classes), dtype=np.float32)
        batch = tf.convert_to_tensor(np.asarray(images, dtype=np.uint16))
        return self._serve(**{INPUT_NAME: batch})[OUTPUT_NAME].numpy()

    def pixel_model(self, window: Window) -> PixelRunner:
        """The dense head at ``window`` px (a side, or (height, width);
        :mod:`~bigearthnet.inference.pixel_model`): the registry's model rebuilt, its
        weights read from the SavedModel's variables (the serving module tracks the Keras
        model as ``classifier``), the export's normalisation."""
        if not self.has_dense_head:
            raise NoDenseHead(f"the model of {self.folder} has no dense head")
        window = window_shape(window)
        if window not in self._pixel_models:  # built once for a region's scenes
            model = rebuilt(self.info.model, window, self.info.input_shape[-1],
                            self.num_classes, self._restore)  # fmt: skip
            tf_model = PixelModel(model, self.info.band_mean, self.info.band_std, window)
            self._pixel_models[window] = fastest(tf_model, self.provenance)
        return self._pixel_models[window]

    def _restore(self, model: tf.keras.Model) -> None:
        """The SavedModel's weights into ``model`` (every layer of it matched)."""
        variables = self.folder / SAVEDMODEL_DIR / "variables" / "variables"
        status = tf.train.Checkpoint(classifier=model).read(str(variables))
        status.assert_existing_objects_matched().expect_partial()

    def predict_pixels(self, images: np.ndarray) -> np.ndarray:
        """(N, H, W, C) uint16 -> (N, H, W, 19) float32 class probabilities per pixel."""
        if not self.has_dense_head:
            raise NoDenseHead(f"the model of {self.folder} has no dense head")
        if len(images) == 0:
            shape = (0, *np.shape(images)[1:3], len(self.pixel_class_names))
            return np.zeros(shape, dtype=np.float32)
        batch = tf.convert_to_tensor(np.asarray(images, dtype=np.uint16))
        return self._serve(**{INPUT_NAME: batch})[PIXEL_OUTPUT_NAME].numpy()
