"""An imported weights folder (``bigearthnet-weights import``): ``weights.h5``, a Keras weights
file that ``model.load_weights(path, by_name=True, skip_mismatch=True)`` accepts, and
``weights.json``, the :class:`WeightsRecord` of what the weights expect. This module is the
one writer and the one reader of that record.

The normalisation is recorded in physical units (S2 reflectance x 10^4, S1 in dB), as the
source published it; :meth:`WeightsRecord.model_inputs` turns it into the shards' codes.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError
from bigearthnet.core.util import atomic_write_json
from bigearthnet.formats.model_inputs import ModelInputs
from bigearthnet.formats.shards import channel_encoding

WEIGHTS_FILE = "weights.h5"
RECORD_FILE = "weights.json"
FORMAT = "bigearthnet-weights/1"


@dataclass(frozen=True)
class WeightsRecord:
    """What imported weights are and take: their source, the network they fit, the channels
    in order, the normalisation they were trained with and, with a head, its classes."""

    source: str  # reben, ssl4eo, timm or torchvision (weights.sources.SOURCES)
    file: str  # the file imported, as given
    sha256: str  # of that file
    model: str  # registry name: resnet18 or resnet50
    stem_width: int  # 64 for the registry's networks
    widths: tuple[int, ...]  # the stages' inner widths: (64, 128, 256, 512) in the registry
    bands: tuple[str, ...]  # the channels the first convolution takes, in order
    mean: tuple[float, ...]  # per channel, physical units (reflectance x 10^4, dB)
    std: tuple[float, ...]
    resampling: str  # how the source's data upsampled the coarser bands
    classes: tuple[str, ...] = ()  # the head's classes in this project's order; () no head
    adaptations: tuple[str, ...] = ()  # what the import changed, one sentence each
    normalisation: str = ""  # where mean/std come from, in words

    @property
    def has_head(self) -> bool:
        return bool(self.classes)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def model_inputs(self, classes: tuple[str, ...] | None = None) -> ModelInputs:
        """The record as a model's inputs, mean/std in the shards' codes (S1 is stored
        scaled), for the head's classes or (a new head) ``classes``."""
        encodings = [channel_encoding(band) for band in self.bands]
        return ModelInputs(
            bands=self.bands,
            mean=tuple((m - off) / scale for m, (scale, off) in zip(self.mean, encodings)),
            std=tuple(max(s / scale, 1.0) for s, (scale, _) in zip(self.std, encodings)),
            channel_scale=tuple(scale for scale, _ in encodings),
            channel_offset=tuple(offset for _, offset in encodings),
            resampling=self.resampling,
            classes=self.classes if classes is None else classes,
            stats=f"published with the {self.source} weights ({self.normalisation})",
        )

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        return {"format": FORMAT, **{k: list(v) if isinstance(v, tuple) else v
                                     for k, v in body.items()}}  # fmt: skip


def write(folder: Path, record: WeightsRecord) -> None:
    atomic_write_json(folder / RECORD_FILE, record.to_json())


def is_weights_folder(path: str | Path) -> bool:
    """An imported weights folder: the weights and their record."""
    return (Path(path) / WEIGHTS_FILE).is_file() and is_record_folder(path)


def is_record_folder(path: str | Path) -> bool:
    """A folder holding a weights record (an imported folder, or a run made from one)."""
    return (Path(path) / RECORD_FILE).is_file()


def read(folder: str | Path) -> WeightsRecord:
    """The record of an imported weights folder; InputError naming the file and the field."""
    if not (Path(folder) / WEIGHTS_FILE).is_file():
        raise InputError(f"{folder}: not an imported weights folder (no {WEIGHTS_FILE})")
    return read_record(folder)


def read_record(folder: str | Path) -> WeightsRecord:
    """``folder/weights.json`` alone (a run made from published weights keeps it too)."""
    path = Path(folder) / RECORD_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InputError(f"{path}: unreadable weights record ({err})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise InputError(f"{path}: not a {FORMAT} record")
    try:
        record = WeightsRecord(
            source=str(raw["source"]),
            file=str(raw["file"]),
            sha256=str(raw["sha256"]),
            model=str(raw["model"]),
            stem_width=int(raw["stem_width"]),
            widths=tuple(int(v) for v in raw["widths"]),
            bands=tuple(str(v) for v in raw["bands"]),
            mean=tuple(float(v) for v in raw["mean"]),
            std=tuple(float(v) for v in raw["std"]),
            resampling=str(raw["resampling"]),
            classes=tuple(str(v) for v in raw.get("classes", ())),
            adaptations=tuple(str(v) for v in raw.get("adaptations", ())),
            normalisation=str(raw.get("normalisation", "")),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise InputError(f"{path}: missing or malformed field ({err})") from None
    _check(path, record)
    return record


def _check(path: Path, record: WeightsRecord) -> None:
    if constants.band_config_name(record.bands) is None:
        raise InputError(f"{path}: bands {list(record.bands)} are none of the configurations")
    if not len(record.mean) == len(record.std) == len(record.bands):
        raise InputError(f"{path}: mean and std need one value per band")
    if not all(math.isfinite(v) for v in record.mean + record.std) or min(record.std) <= 0:
        raise InputError(f"{path}: mean and std must be finite, std positive")
    if record.classes and record.classes not in constants.CLASS_SETS.values():
        raise InputError(f"{path}: the head's classes are neither the 19 nor the 43 classes")
