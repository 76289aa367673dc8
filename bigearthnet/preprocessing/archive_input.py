"""A BigEarthNet archive as a command's input, declared once (:class:`ArchiveInput`):
``bigearthnet-preprocess`` and ``bigearthnet-map`` read archives alike. Free of TensorFlow
and of the readers, so ``--help`` answers at once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core.declare import option
from bigearthnet.preprocessing.resample import METHODS

VERSIONS = ("auto", "v1", "v2")


@dataclass(frozen=True, kw_only=True)
class ArchiveInput:
    """Which archive, in which layout, which of its patches, and how its 20/60 m bands
    are upsampled; a command inherits these and says where the archive is required."""

    archive: Path | None = option(
        None, "BigEarthNet archive root (v1: patch folders with their labels JSON; v2: the "
        "folder with metadata.parquet and BigEarthNet-S2/)", metavar="DIR",
    )  # fmt: skip
    version: str = option("auto", "the archive's layout (auto: detected)", choices=VERSIONS)
    include_snow_cloud: bool = option(False, "v2: also the patches of the snow/cloud/shadow table")
    resampling: str | None = option(
        None, "upsampling of the 20 m and 60 m bands, pixel centres aligned (with a model: "
        "as its training data by default)", choices=METHODS,
    )  # fmt: skip
    s1_archive: Path | None = option(
        None, "Sentinel-1, for bands that include it: v1 needs the BigEarthNet-S1-v1.0 "
        "folder; v2 defaults to ARCHIVE/BigEarthNet-S1", metavar="DIR",
    )  # fmt: skip
