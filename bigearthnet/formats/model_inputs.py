"""What a trained model takes and gives, recorded with its weights: the channels in order,
the per-channel standardisation it learned with, how the shards' codes decode (S1), how the
coarser bands were resampled, and its classes in order.

A run is self-contained because every checkpoint pointer carries this record
(:class:`~bigearthnet.formats.checkpoints.CheckpointRecord.inputs`) and every export copies
it: evaluation, maps, exports and resumes take the normalisation from here, never from the
training data's manifest, so scratch purges and moved shards change no prediction.
Built once per run from the training manifest (:func:`bigearthnet.data.normalization.
model_inputs`); read back by :meth:`ModelInputs.from_json`, which checks every field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError


@dataclass(frozen=True)
class ModelInputs:
    """A model's input and output contract: ``(code * scale + offset)`` is the physical value
    of a channel, ``(code - mean) / std`` what the model sees (both per channel)."""

    bands: tuple[str, ...]  # a configuration of constants.BAND_CONFIGS, in order
    mean: tuple[float, ...]  # per channel, in the shards' codes
    std: tuple[float, ...]  # per channel, already floored at 1 (constant bands)
    channel_scale: tuple[float, ...]  # per channel: physical value = code * scale + offset
    channel_offset: tuple[float, ...]
    resampling: str  # how the 20/60 m bands were upsampled to 10 m
    classes: tuple[str, ...]  # output order: constants.CLASSES_19 or CLASSES_43
    stats: str = ""  # where mean/std came from: "train split of shards <data_id>" or "published"

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def to_json(self) -> dict[str, Any]:
        return {
            "bands": list(self.bands),
            "mean": list(self.mean),
            "std": list(self.std),
            "channel_scale": list(self.channel_scale),
            "channel_offset": list(self.channel_offset),
            "resampling": self.resampling,
            "classes": list(self.classes),
            "stats": self.stats,
        }

    @classmethod
    def from_json(cls, raw: Any) -> ModelInputs:
        """The record of ``raw``; InputError naming the first field that does not fit."""
        if not isinstance(raw, dict):
            raise InputError("inputs: expected a JSON object")
        bands = tuple(_strings(raw, "bands"))
        if constants.band_config_name(bands) is None:
            raise InputError(f"inputs.bands {list(bands)} are none of the band configurations")
        values = {
            key: _numbers(raw, key, len(bands))
            for key in ("mean", "std", "channel_scale", "channel_offset")
        }
        if min(values["std"]) <= 0:
            raise InputError("inputs.std must be positive")
        classes = tuple(_strings(raw, "classes"))
        if classes not in (constants.CLASSES_19, constants.CLASSES_43):
            raise InputError("inputs.classes are neither the 19 nor the 43 BigEarthNet classes")
        resampling = raw.get("resampling")
        if resampling not in constants.RESAMPLING_METHODS:
            raise InputError(
                f"inputs.resampling {resampling!r} is none of {constants.RESAMPLING_METHODS}"
            )
        return cls(bands=bands, classes=classes, resampling=str(resampling),
                   stats=str(raw.get("stats", "")), **values)  # fmt: skip


def _strings(raw: dict, key: str) -> list[str]:
    value = raw.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"inputs.{key}: expected a list of names")
    return value


def _numbers(raw: dict, key: str, length: int) -> tuple[float, ...]:
    value = raw.get(key)
    if not isinstance(value, list) or len(value) != length:
        raise InputError(f"inputs.{key}: expected {length} numbers, one per band")
    if not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value
    ):
        raise InputError(f"inputs.{key}: expected finite numbers")
    return tuple(float(v) for v in value)
