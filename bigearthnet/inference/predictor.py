"""What maps and exports need of a model, whichever way it was loaded: from a run folder
(:mod:`~bigearthnet.inference.trained_run`) or from an export folder
(:mod:`~bigearthnet.inference.exported_model`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.declare import check_fields, option
from bigearthnet.core.errors import ConfigError, InputError
from bigearthnet.formats.exported import read_export_info
from bigearthnet.inference.run_checkpoint import RunCheckpoint, run_checkpoint

if TYPE_CHECKING:  # TensorFlow: the options here answer --help without it
    from bigearthnet.inference.pixel_model import PixelRunner, Window


class Predictor(Protocol):
    """A classifier of uint16 patches in the order of ``bands``; with the dense head also a
    land-cover map of each patch's pixels (``has_dense_head``, ``predict_pixels``: (N, H, W,
    19) probabilities of ``pixel_class_names``; ``pixel_model``: the same at a large
    window, run fully convolutionally)."""

    @property
    def num_classes(self) -> int: ...

    @property
    def class_names(self) -> list[str]: ...

    @property
    def bands(self) -> tuple[str, ...]: ...

    @property
    def resampling(self) -> str: ...

    @property
    def provenance(self) -> dict[str, str]: ...

    @property
    def has_dense_head(self) -> bool: ...

    @property
    def pixel_class_names(self) -> list[str]: ...

    def predict(self, images: np.ndarray) -> np.ndarray: ...

    def predict_pixels(self, images: np.ndarray) -> np.ndarray: ...

    def pixel_model(self, window: Window) -> PixelRunner: ...


class BandMismatch(InputError):
    """A model given data of another band configuration."""


def check_bands(predictor: Predictor, offered: Sequence[str], what: str) -> None:
    """BandMismatch unless ``what`` (the input, named in the message) gives exactly the
    bands the model takes, in its order."""
    wanted = tuple(predictor.bands)
    if tuple(offered) != wanted:
        source = predictor.provenance.get("export") or predictor.provenance.get("run_dir")
        raise BandMismatch(
            f"{what} gives bands {constants.describe_bands(tuple(offered))} but the model of "
            f"{source} takes {constants.describe_bands(wanted)}: another band configuration"
        )


@dataclass(frozen=True, kw_only=True)
class ModelChoice(RunCheckpoint):
    """The model a command predicts with: a run's checkpoint or an export folder. Declared
    once: these are the model options of every map command."""

    model: Path | None = option(
        None, "an export folder made by bigearthnet-export (no run folder needed)",
        metavar="EXPORT",
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)
        if (self.run_dir is None) == (self.model is None):
            raise ConfigError("give a run folder (--run-dir) or an export folder (--model), one")
        if self.model is not None and self.stats_from is not None:
            raise ConfigError("--stats-from goes with --run-dir: an export records its own")

    def check(self) -> None:
        """What is read before TensorFlow loads (a mistyped folder answers at once): the
        export's export.json, or the run's config.yaml and the checkpoint ``checkpoint`` names;
        an InputError naming the file or folder otherwise."""
        if self.model is not None:
            read_export_info(self.model)
        else:
            run_checkpoint(self.folder, self.checkpoint)

    @property
    def folder(self) -> Path:
        """The run or export folder, for messages."""
        return self.model or self.run_dir  # type: ignore[return-value]

    def open(self) -> Predictor:
        """The model of the export folder, or of the run's checkpoint (``stats_from``: the
        normalisation of an older checkpoint that does not record it)."""
        if self.model is not None:
            from bigearthnet.inference.exported_model import ExportedModel

            return ExportedModel(self.model)
        from bigearthnet.inference.trained_run import load_model

        return load_model(self.folder, self.checkpoint, self.stats_from)
