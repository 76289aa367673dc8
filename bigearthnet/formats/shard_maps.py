"""The reference maps inside the shards (:mod:`bigearthnet.formats.shards`): their two
datasets and the manifest's ``reference_maps`` section (:class:`MapStats`).

A shard written from an archive with reference maps (reBEN's ``Reference_Maps/``) holds,
beside each patch's image and labels:

=========== ================== ===========================================================
dataset     shape, dtype       content
=========== ================== ===========================================================
map19       (N,120,120) u1     the patch's reference map on its 10 m grid as 19-class
                               indices (``constants.CLASSES_19`` order);
                               ``constants.NO_LABEL`` (255) where the map has no 19-class
                               meaning (nodata, roads, mines, bare rock, unknown codes) and
                               in every pixel of a row without a map
has_map     (N,) u1            1 where the row's map is stored, 0 where the patch has none
                               (its map was missing, unreadable, off its grid, or dropped
                               by ``--map-label-mismatch drop-map``: rejects.csv says why)
=========== ================== ===========================================================

Both are absent from shards of archives without maps (v1, v2 without ``Reference_Maps/``)
and from shards written before maps existed: the manifest's ``reference_maps`` is then
null, which readers take as "no maps". ``map19`` is chunked like ``images`` (16 rows) and
deflated (gzip level :data:`GZIP_LEVEL`, readable by every HDF5 tool; CORINE's polygons
compress about 75-fold).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import h5py
import numpy as np

from bigearthnet.core import constants

MAP_KEY = "map19"
HAS_MAP_KEY = "has_map"
GZIP_LEVEL = 6  # zlib's default; measured against 1, 4, 9 and lzf: docs/preprocessing.md
MISMATCH_POLICIES: tuple[str, ...] = ("keep", "drop-map", "drop-patch")
# Index of the no-label count in a map's class counts: after the 19 classes.
NO_LABEL_INDEX = len(constants.CLASSES_19)


def map_shape() -> tuple[int, int]:
    return (constants.PATCH_SIZE, constants.PATCH_SIZE)


def create_datasets(file: h5py.File, rows: int, chunk_rows: int) -> None:
    """The two map datasets of a new shard (``rows`` to start with, growable)."""
    file.create_dataset(
        MAP_KEY,
        shape=(rows, *map_shape()),
        maxshape=(None, *map_shape()),
        dtype=np.uint8,
        chunks=(min(chunk_rows, rows), *map_shape()),
        compression="gzip",
        compression_opts=GZIP_LEVEL,
        fillvalue=constants.NO_LABEL,
    )
    file.create_dataset(HAS_MAP_KEY, (rows,), np.uint8, maxshape=(None,))
    file.attrs["map_no_label"] = constants.NO_LABEL


def absent_map() -> np.ndarray:
    """The ``map19`` row of a patch without a map: no label everywhere."""
    return np.full(map_shape(), constants.NO_LABEL, dtype=np.uint8)


def class_pixels(map19: np.ndarray) -> np.ndarray:
    """(20,) int64: pixels of each of the 19 classes, then of no label, in ``map19`` (any
    shape of 19-class indices; values other than 0..18 count as no label)."""
    values = np.asarray(map19, dtype=np.uint8).ravel()
    counts = np.bincount(values, minlength=256).astype(np.int64)
    return np.append(counts[:NO_LABEL_INDEX], counts[NO_LABEL_INDEX:].sum())


def _per_split(value: int | list) -> dict:
    return {split: value if isinstance(value, int) else list(value) for split in constants.SPLITS}


@dataclass(frozen=True)
class MapStats:
    """``manifest.json``'s ``reference_maps``: the maps the shards hold, what was refused and
    what disagreed with the labels. None in a manifest: the shards hold no maps."""

    # per split: rows with a map (has_map = 1)
    patches: dict[str, int] = field(default_factory=lambda: _per_split(0))
    # per split: pixels of each class in CLASSES_19 order, then of no label (20 counts), over
    # the rows with a map
    class_pixels: dict[str, list[int]] = field(
        default_factory=lambda: _per_split([0] * (NO_LABEL_INDEX + 1))
    )
    refused: int = 0  # maps refused (missing, unreadable, off the patch's grid): rejects.csv
    # patches whose map holds a class their labels lack, whose labels name a class their map
    # lacks, and either (counted whatever the policy did with them)
    map_only: int = 0
    labels_only: int = 0
    mismatched: int = 0
    mismatch_policy: str = "keep"  # --map-label-mismatch
    unknown_code_pixels: int = 0  # pixels whose value is no CORINE code (stored as no label)
    no_label: int = constants.NO_LABEL

    def class_share(self, split: str) -> list[float]:
        """Each class's share of the split's map pixels (19 floats); zeros without maps."""
        counts = np.asarray(self.class_pixels[split], dtype=np.float64)
        total = counts.sum()
        return (counts[:NO_LABEL_INDEX] / total).tolist() if total else [0.0] * NO_LABEL_INDEX

    def no_label_share(self, split: str) -> float:
        counts = self.class_pixels[split]
        total = sum(counts)
        return counts[NO_LABEL_INDEX] / total if total else 0.0

    def to_json(self) -> dict:
        """As written in the manifest: the counts, plus the shares they give (derived)."""
        body = dataclasses.asdict(self)
        body["class_share"] = {split: self.class_share(split) for split in self.class_pixels}
        body["no_label_share"] = {split: self.no_label_share(split) for split in self.class_pixels}
        return body

    @classmethod
    def from_json(cls, raw: dict) -> MapStats:
        """The section as read; derived shares are left out (recomputed from the counts)."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        values["patches"] = {str(k): int(v) for k, v in raw["patches"].items()}
        values["class_pixels"] = {
            str(k): [int(c) for c in v] for k, v in raw["class_pixels"].items()
        }
        return cls(**values)
