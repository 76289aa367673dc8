"""``EXPORT/export.json``: what an exported model is and where it came from.

``bigearthnet-export`` writes an export folder (a SavedModel, optionally an ONNX model, a
model card and a STAC item) and this file last, so a folder without it is not an export.
:func:`write_export_info` is its one writer and :func:`read_export_info` its one reader
(``bigearthnet-map --model`` reads it to know the model's bands and classes without the
run folder).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core.errors import InputError
from bigearthnet.core.util import atomic_write_json

INFO_FILE = "export.json"
SAVEDMODEL_DIR = "savedmodel"
ONNX_FILE = "model.onnx"
CARD_FILE = "model_card.md"
STAC_FILE = "item.json"
FORMAT_VERSION = 1
MLM_VERSION = "1.5.2"  # the STAC MLM extension version of item.json (stac-model 0.6.1's)
# The serving signature, the same in the SavedModel and the ONNX model: a model with the
# dense head has the second output, per pixel.
SIGNATURE = "serving_default"
INPUT_NAME = "images"
OUTPUT_NAME = "probabilities"
PIXEL_OUTPUT_NAME = "pixel_probabilities"


class ExportError(InputError):
    """An export folder that is missing, incomplete or of another kind."""


@dataclass(frozen=True)
class ExportSource:
    """Where the exported weights came from."""

    run_dir: str
    checkpoint: str  # the checkpoint prefix restored
    epoch: int | None
    data: str  # the shards the run trained on
    data_id: str | None  # their identity (manifest.Manifest.data_id)
    init_weights: str | None = None  # where training started: imported weights or a run


@dataclass(frozen=True)
class ExportInfo:
    """An exported classifier: its input (raw uint16 DN in ``bands`` order), its classes,
    the normalisation baked into it, its files and its source."""

    name: str
    model: str  # the registry name (tiny, resnet50, ...)
    class_names: tuple[str, ...]
    bands: tuple[str, ...]
    input_shape: tuple[int, int, int]  # (height, width, channels) of one patch
    band_mean: tuple[float, ...]  # inside the model: (x - mean) / std per band
    band_std: tuple[float, ...]
    resampling: str  # how the training data's coarser bands were upsampled
    threshold: float  # the run's decision threshold
    tuned_thresholds: tuple[float, ...] | None  # per class, from the run's evaluation
    source: ExportSource
    formats: tuple[str, ...]  # the model files present: savedmodel, onnx
    tensorflow: str
    created: str
    onnx_opset: int | None = None  # None: no ONNX model in the folder
    onnx_max_abs_diff: float | None = None  # ONNX vs SavedModel at export time
    # per band: physical value = code * scale + offset (S1 dB); None: exports from before
    channel_scale: tuple[float, ...] | None = None
    channel_offset: tuple[float, ...] | None = None
    # The dense head's classes, in the order of PIXEL_OUTPUT_NAME's last axis; None: a model
    # without the dense head (and exports made before it existed)
    pixel_class_names: tuple[str, ...] | None = None
    format_version: int = FORMAT_VERSION

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def has_dense_head(self) -> bool:
        return self.pixel_class_names is not None


def weights_files(folder: str | Path) -> list[Path]:
    """The files of an export's weights (its SavedModel), in the order a map's weights
    digest hashes them (the ``weights_sha256`` tag)."""
    saved = Path(folder) / SAVEDMODEL_DIR
    return [saved / "saved_model.pb", *sorted((saved / "variables").glob("*"))]


def write_export_info(folder: str | Path, info: ExportInfo) -> None:
    atomic_write_json(Path(folder) / INFO_FILE, dataclasses.asdict(info))


def read_export_info(folder: str | Path) -> ExportInfo:
    """The folder's export.json; ExportError naming the file and the problem otherwise."""
    path = Path(folder) / INFO_FILE
    if not Path(folder).is_dir():
        raise ExportError(f"{folder}: no such export folder")
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        raise ExportError(
            f"{path}: missing: not an export of bigearthnet-export (or an unfinished one)"
        ) from None
    except (OSError, ValueError) as err:
        raise ExportError(f"{path}: unreadable: {err}") from None
    try:
        if body.get("format_version") != FORMAT_VERSION:
            raise ExportError(
                f"{path}: format_version {body.get('format_version')!r}, this version reads "
                f"{FORMAT_VERSION}"
            )
        return ExportInfo(
            **{
                **body,
                "class_names": tuple(body["class_names"]),
                "bands": tuple(body["bands"]),
                "formats": tuple(body["formats"]),
                "input_shape": tuple(body["input_shape"]),
                "band_mean": tuple(body["band_mean"]),
                "band_std": tuple(body["band_std"]),
                "tuned_thresholds": None
                if body.get("tuned_thresholds") is None
                else tuple(body["tuned_thresholds"]),
                "source": ExportSource(**body["source"]),
                **{
                    key: tuple(body[key])
                    for key in ("channel_scale", "channel_offset", "pixel_class_names")
                    if body.get(key) is not None
                },
            }
        )
    except (KeyError, TypeError) as err:
        raise ExportError(f"{path}: not a valid export record ({err})") from None
