"""How a synthetic product looks, declared once: the options every ``bigearthnet-synth``
generator takes (the archive, a scene, a region). :class:`SyntheticLook` is inherited by
each generator's declaration."""

from __future__ import annotations

from dataclasses import dataclass

from bigearthnet.core.declare import option
from bigearthnet.core.errors import require_non_negative_int

DIFFICULTIES: tuple[str, ...] = ("realistic", "simple")


@dataclass(frozen=True, kw_only=True)
class SyntheticLook:
    """Which look a generator renders and which of its products (the seed)."""

    difficulty: str = option(
        "realistic", "realistic: as hard as the real archive (reBEN's label statistics, "
        "CORINE-like label noise - the true class shares in an archive's OUT/truth.parquet -, "
        "spectra that overlap and change with the season and the region, mixed pixels); "
        "simple: 1-3 rectangles of fixed, far-apart spectra, labelled exactly (learnable in "
        "seconds: for tests). A model trained on the archive of a difficulty maps the scenes "
        "and regions of that difficulty", choices=DIFFICULTIES,
    )  # fmt: skip
    seed: int = option(0, "seed: the same seed writes the same data (an archive: "
                       "byte-identical files)", check=require_non_negative_int,
                       metavar="S")  # fmt: skip
