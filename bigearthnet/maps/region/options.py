"""``bigearthnet-map region``'s options but its scenes, declared once and free of
TensorFlow (``--help`` answers at once): :class:`RegionOptions`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core.declare import check_fields, nested, option
from bigearthnet.core.errors import require_open_fraction, require_positive, require_positive_int
from bigearthnet.inference.predictor import ModelChoice
from bigearthnet.maps.region.grid import DEFAULT_CELL_M, DEFAULT_CRS, projected_crs
from bigearthnet.maps.region.periods import PERIODS
from bigearthnet.maps.region.series import DEFAULT_PERSISTENCE
from bigearthnet.maps.scene.options import SceneMapOptions, SceneMapping


@dataclass(frozen=True, kw_only=True)
class RegionOptions(SceneMapping):
    """``bigearthnet-map region``'s options but its scenes, declared once (how each scene is
    mapped: :class:`~bigearthnet.maps.scene.options.SceneMapping`)."""

    out: Path = option(help="the region folder", metavar="DIR")
    model: ModelChoice = nested(ModelChoice)
    period: str = option("month", "how observations are grouped in time", choices=PERIODS)
    crs: str = option(DEFAULT_CRS, "the output grid's projected CRS", parse=projected_crs)
    cell: float = option(DEFAULT_CELL_M, "the output grid's cell in metres",
                         check=require_positive, metavar="M")  # fmt: skip
    persistence: float = option(
        DEFAULT_PERSISTENCE,
        "the smoother's odds P/(1-P) that a cell keeps its class from one period to the next "
        "against moving to any one other class, P in (0, 1); higher removes more flicker and "
        "needs more evidence to change",
        check=require_open_fraction, metavar="P",
    )  # fmt: skip
    scenes_only: bool = option(
        False, "map the scenes into OUT/scenes/ and stop: a Slurm array task's share; a last "
        "run over all the scenes reuses the maps and builds the products",
    )  # fmt: skip
    max_gap_days: int = option(
        730, "skip a scene more than D days from every other (a date typo, not part of the "
        "series)", check=require_positive_int, metavar="D",
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def scene_map(self) -> SceneMapOptions:
        """How each scene is mapped (resampling as the model's training data)."""
        shared = (f.name for f in dataclasses.fields(SceneMapping))
        return SceneMapOptions(**{name: getattr(self, name) for name in shared})
