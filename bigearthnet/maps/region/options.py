"""``bigearthnet-map region``'s options but its scenes, declared once and free of
TensorFlow (``--help`` answers at once): :class:`RegionOptions`."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core.declare import check_fields, nested, option
from bigearthnet.core.errors import ConfigError, require_open_fraction, require_positive_int
from bigearthnet.inference.predictor import ModelChoice
from bigearthnet.maps.region.grid import (
    CELL_STEP_M,
    DEFAULT_CELL_M,
    DEFAULT_CRS,
    WARP_TILE,
    projected_crs,
)
from bigearthnet.maps.region.periods import PERIODS
from bigearthnet.maps.region.series import DEFAULT_PERSISTENCE
from bigearthnet.maps.scene.options import SceneMapOptions, SceneMapping

# Blocks are whole tiles of the lattice scene maps are warped on (the products do not
# depend on the block size), at most 16,384 cells a side (~100 GB at its peak).
BLOCK_STEP, MAX_BLOCK = WARP_TILE, 16384
DEFAULT_BLOCK = 1024  # cells a side: ~0.4 GB at its peak with 19 classes (block_memory)


def require_cell(flag: str, value: float) -> float:
    """``value`` if it is a positive finite multiple of 10 m (the Sentinel-2 grid every scene
    map lies on), else ConfigError naming ``flag``."""
    steps = value / CELL_STEP_M if isinstance(value, (int, float)) else math.nan
    if not (math.isfinite(steps) and steps >= 1 and steps == round(steps)):
        raise ConfigError(f"{flag} must be a positive multiple of {CELL_STEP_M:g} m (10, 20, "
                          f"60, 600...: the Sentinel-2 10 m grid), got {value}")  # fmt: skip
    return float(value)


def require_block(flag: str, value: int) -> int:
    """``value`` if it is a multiple of 256 from 256 to 16,384 cells, else ConfigError."""
    require_positive_int(flag, value)
    if value % BLOCK_STEP or value > MAX_BLOCK:
        raise ConfigError(f"{flag} must be a multiple of {BLOCK_STEP} from {BLOCK_STEP} to "
                          f"{MAX_BLOCK:,} cells, got {value}")  # fmt: skip
    return value


def require_share(flag: str, value: str | None) -> str | None:
    """``value`` if it is None or ``K/N`` with 1 <= K <= N, else ConfigError."""
    if value is not None:
        found = re.fullmatch(r"(\d+)/(\d+)", value)
        if found is None or not 1 <= int(found[1]) <= int(found[2]):
            raise ConfigError(f"{flag} wants K/N, share K of N (1 <= K <= N), got {value!r}")
    return value


@dataclass(frozen=True, kw_only=True)
class RegionOptions(SceneMapping):
    """``bigearthnet-map region``'s options but its scenes, declared once (how each scene is
    mapped: :class:`~bigearthnet.maps.scene.options.SceneMapping`)."""

    out: Path = option(help="the region folder", metavar="DIR")
    model: ModelChoice = nested(ModelChoice)
    period: str = option("month", "how observations are grouped in time", choices=PERIODS)
    crs: str = option(DEFAULT_CRS, "the output grid's projected CRS", parse=projected_crs)
    cell: float = option(
        DEFAULT_CELL_M, "the output grid's cell in metres, a multiple of 10 (10 needs scene "
        "maps at 10 m, from a model with the dense head; a classifier's cell maps take 60 or "
        "more)",
        check=require_cell, metavar="M",
    )  # fmt: skip
    block_size: int = option(
        DEFAULT_BLOCK, "the products are computed in blocks of N x N grid cells (memory is a "
        "block's, whatever the region's size), a multiple of 256; the products are the same "
        "whatever it is", check=require_block,
        metavar="N",
    )  # fmt: skip
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
    blocks_only: str | None = option(
        None, "compute share K of N of the grid's blocks into OUT (a Slurm array task's "
        "share, after the scenes are mapped) and stop; a last run without it combines them "
        "into the products", check=require_share, metavar="K/N",
    )  # fmt: skip
    max_gap_days: int = option(
        730, "skip a scene more than D days from every other (a date typo, not part of the "
        "series)", check=require_positive_int, metavar="D",
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)
        if self.scenes_only and self.blocks_only is not None:
            raise ConfigError("--scenes-only and --blocks-only are two steps of a job: give one")

    @property
    def share(self) -> tuple[int, int] | None:
        """``--blocks-only K/N`` as (K, N), or None: every block, then the products."""
        if self.blocks_only is None:
            return None
        k, n = self.blocks_only.split("/")
        return int(k), int(n)

    @property
    def scene_map(self) -> SceneMapOptions:
        """How each scene is mapped (resampling as the model's training data)."""
        shared = (f.name for f in dataclasses.fields(SceneMapping))
        return SceneMapOptions(**{name: getattr(self, name) for name in shared})
