"""How a synthetic product looks, declared once.

A look is a strategy (:class:`Look`): each of its methods is one place where the
generators differ by look - an archive's splits, snow and clouds and its patches' truth, a
scene's pixels, a region's land cover and its changes. :data:`LOOKS` holds one of each, by
the name ``--difficulty`` takes; a generator asks the look, never its name. A new look is
one class here and its entry in :data:`LOOKS`.

:class:`SyntheticLook` is the options every ``bigearthnet-synth`` generator takes (the
archive, a scene, a region): inherited by each generator's declaration.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.declare import option
from bigearthnet.core.errors import require_non_negative_int
from bigearthnet.synthetic import region_cover as cover
from bigearthnet.synthetic import spectra
from bigearthnet.synthetic.landscape import PatchTruth, plan_patch
from bigearthnet.synthetic.reben_stats import CLOUD_SHARE, SNOW_SHARE, SPLIT_SHARE
from bigearthnet.synthetic.region_cover import Event
from bigearthnet.synthetic.render import class_signatures

RegionCover = tuple[np.ndarray, list[Event], list[dict]]  # block classes, events, features


class Look(ABC):
    """One look of the synthetic products, in every generator."""

    name: ClassVar[str]  # as --difficulty takes it
    help: ClassVar[str]  # what it is, for --help
    train_share: ClassVar[float]  # of a v2 archive's patches in train (the rest halved)
    truth_table: ClassVar[bool]  # an archive writes OUT/truth.parquet (patch_truth's shares)

    @abstractmethod
    def overlays(self, rng: np.random.Generator, num_patches: int) -> list[str | None]:
        """Which v2 patches are snowy or cloudy ("snow", "cloud" or None, per patch)."""

    @abstractmethod
    def patch_truth(self, rng: np.random.Generator) -> PatchTruth | None:
        """What truly covers a patch, its labels drawn from it; None: labels drawn alone."""

    @abstractmethod
    def field(
        self, rng: np.random.Generator, grid: np.ndarray, month: int, region: int
    ) -> np.ndarray:
        """(12, H, W) 10 m reflectance x 1e4 of a (H, W) grid of 19-class indices, as the
        classes look in ``month`` and ``region`` (a country's index)."""

    @abstractmethod
    def region_cover(
        self, rng: np.random.Generator, rows: int, cols: int, dates: int, block: float
    ) -> RegionCover:
        """A region's (rows, cols) blocks of ``block`` metres: their classes at the first
        of ``dates`` dates, the changes to come (:data:`.region_cover.Event`) and the small
        features inside them."""


class Realistic(Look):
    name = "realistic"
    help = (
        "as hard as the real archive (reBEN's label statistics, CORINE-like label noise - "
        "the true class shares in an archive's OUT/truth.parquet -, spectra that overlap and "
        "change with the season and the region, mixed pixels)"
    )
    train_share = SPLIT_SHARE["train"]
    truth_table = True

    def overlays(self, rng: np.random.Generator, num_patches: int) -> list[str | None]:
        """reBEN's shares (11.1 % snowy, 1.6 % cloudy)."""
        return [
            "snow" if value < SNOW_SHARE else "cloud" if value < SNOW_SHARE + CLOUD_SHARE
            else None
            for value in rng.random(num_patches)
        ]  # fmt: skip

    def patch_truth(self, rng: np.random.Generator) -> PatchTruth:
        return plan_patch(rng)

    def field(
        self, rng: np.random.Generator, grid: np.ndarray, month: int, region: int
    ) -> np.ndarray:
        return spectra.render_field(rng, grid, month, region)

    def region_cover(
        self, rng: np.random.Generator, rows: int, cols: int, dates: int, block: float
    ) -> RegionCover:
        start, landscape = cover.block_classes(rng, rows, cols)
        plan = cover.realistic_events(rng, start, dates)
        return start, plan, cover.features(rng, landscape, start, block)


class Simple(Look):
    name = "simple"
    help = (
        "1-3 rectangles of fixed, far-apart spectra, labelled exactly (learnable in seconds: "
        "for tests)"
    )
    train_share = 0.6
    truth_table = False
    snow_cloud_share = 0.07  # of the patches, half snowy, half cloudy

    def overlays(self, rng: np.random.Generator, num_patches: int) -> list[str | None]:
        """~7 % of the patches (at least one of 10 or more, never all), half and half."""
        count = round(self.snow_cloud_share * num_patches)
        count = max(1, count) if num_patches >= 10 else min(count, num_patches - 1)
        overlays: list[str | None] = [None] * num_patches
        flagged = rng.choice(num_patches, size=count, replace=False)
        for n, i in enumerate(sorted(int(f) for f in flagged)):
            overlays[i] = "snow" if (n + int(rng.integers(2))) % 2 else "cloud"
        return overlays

    def patch_truth(self, rng: np.random.Generator) -> None:
        return None

    def field(
        self, rng: np.random.Generator, grid: np.ndarray, month: int, region: int
    ) -> np.ndarray:
        """The archive's signature of each class, under a smooth +-5 % brightness."""
        texture = 1.0 + 0.05 * _smooth(rng, grid.shape[0])
        signatures = class_signatures(19)
        return np.stack([signatures[grid, i] * texture for i in range(len(constants.BANDS))])

    def region_cover(
        self, rng: np.random.Generator, rows: int, cols: int, dates: int, block: float
    ) -> RegionCover:
        start, plan = cover.simple_events(rng, rows, cols, dates)
        return start, plan, []


def _smooth(rng: np.random.Generator, size: int, knots: int = 8) -> np.ndarray:
    """A smooth (size, size) N(0, ~1) field: random knots, bilinearly interpolated."""
    coarse = rng.standard_normal((knots, knots))
    axis = np.linspace(0, knots - 1, size)
    lo = np.floor(axis).astype(int).clip(0, knots - 2)
    frac = axis - lo
    rows = coarse[lo] * (1 - frac)[:, None] + coarse[lo + 1] * frac[:, None]
    return rows[:, lo] * (1 - frac) + rows[:, lo + 1] * frac


LOOKS: dict[str, Look] = {look.name: look() for look in (Realistic, Simple)}
DIFFICULTIES: tuple[str, ...] = tuple(LOOKS)


@dataclass(frozen=True, kw_only=True)
class SyntheticLook:
    """Which look a generator renders and which of its products (the seed)."""

    difficulty: str = option(
        "realistic", "; ".join(f"{look.name}: {look.help}" for look in LOOKS.values())
        + ". A model trained on the archive of a difficulty maps the scenes and regions of "
        "that difficulty", choices=DIFFICULTIES,
    )  # fmt: skip
    seed: int = option(0, "seed: the same seed writes the same data (an archive: "
                       "byte-identical files)", check=require_non_negative_int,
                       metavar="S")  # fmt: skip

    @property
    def look(self) -> Look:
        """The look ``difficulty`` names (a choice: checked when the options were made)."""
        return LOOKS[self.difficulty]
