"""What maps and exports need of a model, whichever way it was loaded: from a run folder
(:mod:`~bigearthnet.inference.trained_run`) or from an export folder
(:mod:`~bigearthnet.inference.exported_model`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError


class Predictor(Protocol):
    """A classifier of uint16 patches in the order of ``bands``."""

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

    def predict(self, images: np.ndarray) -> np.ndarray: ...


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


def open_predictor(
    *,
    run_dir: str | Path | None = None,
    model_dir: str | Path | None = None,
    checkpoint: str = "best",
    stats_from: str | Path | None = None,
) -> Predictor:
    """The model of an export folder (``model_dir``) or of a run's checkpoint (``stats_from``:
    the normalisation of an older checkpoint that does not record it)."""
    if (run_dir is None) == (model_dir is None):
        raise InputError("give a run folder (--run-dir) or an export folder (--model), not both")
    if model_dir is not None:
        if stats_from is not None:
            raise InputError("--stats-from goes with --run-dir: an export records its own")
        from bigearthnet.inference.exported_model import ExportedModel

        return ExportedModel(model_dir)
    from bigearthnet.inference.trained_run import load_model

    assert run_dir is not None
    return load_model(run_dir, checkpoint, stats_from)
