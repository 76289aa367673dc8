"""``bigearthnet-map region``'s options but its scenes, declared once and free of
TensorFlow (``--help`` answers at once): :class:`RegionOptions`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core.declare import check_fields, nested, option
from bigearthnet.core.errors import require_open_fraction, require_positive, require_positive_int
from bigearthnet.inference.predictor import ModelChoice
from bigearthnet.maps.radiometry import OFFSET_CHOICES
from bigearthnet.maps.region.grid import projected_crs
from bigearthnet.maps.region.periods import PERIODS
from bigearthnet.maps.region.series import DEFAULT_PERSISTENCE
from bigearthnet.maps.scene_options import STRIDES, SceneMapOptions, mask_clouds_option


@dataclass(frozen=True)
class RegionOptions:
    """``bigearthnet-map region``'s options but its scenes, declared once."""

    out: Path = option(help="the region folder", metavar="DIR")
    model: ModelChoice = nested(ModelChoice)
    period: str = option("month", "how observations are grouped in time", choices=PERIODS)
    crs: str = option("EPSG:3035", "the output grid's projected CRS", parse=projected_crs)
    cell: float = option(600.0, "the output grid's cell in metres", check=require_positive,
                         metavar="M")  # fmt: skip
    stride: int = option(60, "scene maps' window step in 10 m px (60 = 600 m)",
                         choices=STRIDES, metavar="PX")  # fmt: skip
    mask_clouds: bool = mask_clouds_option()  # masked cells are unobserved
    persistence: float = option(
        DEFAULT_PERSISTENCE,
        "the smoother's odds P/(1-P) that a cell keeps its class from one period to the next "
        "against moving to any one other class, P in (0, 1); higher removes more flicker and "
        "needs more evidence to change",
        check=require_open_fraction, metavar="P",
    )  # fmt: skip
    batch_size: int = option(64, "windows per model call", check=require_positive_int,
                             metavar="N")  # fmt: skip
    progress: bool = option(True, "a progress bar")
    scenes_only: bool = option(
        False, "map the scenes into OUT/scenes/ and stop: a Slurm array task's share; a last "
        "run over all the scenes reuses the maps and builds the products",
    )  # fmt: skip
    max_gap_days: int = option(
        730, "skip a scene more than D days from every other (a date typo, not part of the "
        "series)", check=require_positive_int, metavar="D",
    )  # fmt: skip

    boa_offset: int | None = option(
        None, "DN to add to every band of a scene whose metadata does not say (0: stored as "
        "10,000 x reflectance; -1000: baseline 04.00 on); refused where it does and disagrees",
        choices=OFFSET_CHOICES, metavar="0|-1000",
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def scene_map(self) -> SceneMapOptions:
        """How each scene is mapped (resampling as the model's training data)."""
        return SceneMapOptions(stride=self.stride, batch_size=self.batch_size,
                               progress=self.progress, mask_clouds=self.mask_clouds,
                               boa_offset=self.boa_offset)  # fmt: skip
