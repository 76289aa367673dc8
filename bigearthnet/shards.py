"""The preprocessed dataset: HDF5 shards plus ``manifest.json`` (the only contract between
preprocessing and training/evaluation).

Layout of ``OUT/``::

    {split}-{i:05d}-of-{n:05d}.h5     split in train/val/test
    manifest.json                     written last: its presence means "complete"
    rejects.csv                       patch,reason for every patch not written

Each shard holds, for its N patches:

=========== ================== ===========================================================
dataset     shape, dtype       content
=========== ================== ===========================================================
images      (N,120,120,12) u2  reflectance x 1e4, bands in ``constants.BANDS`` order,
                               chunked ``CHUNK_ROWS`` patches at a time for batch reads
labels19    (N,19) u1          multi-hot, ``constants.CLASSES_19`` order
labels43    (N,43) u1          multi-hot, ``constants.CLASSES_43`` order (v1 sources only)
names       (N,) UTF-8         patch names
crs         (N,) UTF-8         the patch's CRS ("EPSG:32633"), for maps
ulxy        (N,2) f8           upper-left corner of the patch in its CRS (metres)
=========== ================== ===========================================================

File attributes name the bands, the class lists, the resampling, the source version and
the split, so a shard is self-describing even without the manifest.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np

from bigearthnet import constants as C
from bigearthnet.util import first_line, sha256_file

FORMAT_VERSION = 1
CHUNK_ROWS = 16  # 16 patches = 5.5 MB: big sequential reads, still fine-grained for shuffling
MANIFEST = "manifest.json"
REJECTS = "rejects.csv"
IMAGE_SHAPE = (C.PATCH_SIZE, C.PATCH_SIZE, len(C.BANDS))


class ShardError(ValueError):
    """A preprocessed dataset that cannot be used as it is."""


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.h5"


class ShardWriter:
    """Writes one shard under a temporary name and renames it on :meth:`commit`.

    Rows are appended in blocks, so memory stays bounded by one block whatever the
    shard size.
    """

    def __init__(self, path: Path, split: str, expected_rows: int, attrs: dict, with43: bool):
        self.path = Path(path)
        self._tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        self._file = h5py.File(self._tmp, "w")
        self.rows = 0
        self._create(max(expected_rows, 1), with43)
        for key, value in {**attrs, "split": split, "format_version": FORMAT_VERSION}.items():
            self._file.attrs[key] = value

    def _create(self, rows: int, with43: bool) -> None:
        f, text = self._file, h5py.string_dtype("utf-8")
        f.create_dataset(
            "images",
            shape=(rows, *IMAGE_SHAPE),
            maxshape=(None, *IMAGE_SHAPE),
            dtype=np.uint16,
            chunks=(min(CHUNK_ROWS, rows), *IMAGE_SHAPE),
        )
        f.create_dataset("labels19", (rows, 19), np.uint8, maxshape=(None, 19))
        if with43:
            f.create_dataset("labels43", (rows, 43), np.uint8, maxshape=(None, 43))
        f.create_dataset("names", (rows,), text, maxshape=(None,))
        f.create_dataset("crs", (rows,), text, maxshape=(None,))
        f.create_dataset("ulxy", (rows, 2), np.float64, maxshape=(None, 2))

    def append(self, block: dict[str, np.ndarray | list]) -> None:
        """Append rows; ``block`` maps dataset name -> rows (same length for all)."""
        n = len(block["names"])
        end = self.rows + n
        for key, rows in block.items():
            dset = self._file[key]
            if dset.shape[0] < end:
                dset.resize(end, axis=0)
            dset[self.rows : end] = rows
        self.rows = end

    def commit(self) -> None:
        """Trim to the rows written, flush, and move the file to its final name."""
        for key in self._file:
            self._file[key].resize(self.rows, axis=0)
        self._file.attrs["count"] = self.rows
        self._file.close()
        with open(self._tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Close and delete the temporary file; the final name is never created."""
        self._file.close()
        self._tmp.unlink(missing_ok=True)


def read_manifest(data_dir: str | Path) -> dict:
    """Load and sanity-check ``manifest.json``; ShardError with a one-line reason otherwise."""
    data_dir = Path(data_dir)
    path = data_dir / MANIFEST
    if not data_dir.is_dir():
        raise ShardError(f"{data_dir}: data folder does not exist")
    if not path.is_file():
        raise ShardError(f"{path}: no manifest (preprocessing not run or not finished)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ShardError(f"{path}: unreadable manifest ({first_line(err)})") from None
    missing = {"format_version", "shards", "counts", "bands"} - set(manifest)
    if missing:
        raise ShardError(f"{path}: manifest lacks {', '.join(sorted(missing))}")
    if manifest["format_version"] != FORMAT_VERSION:
        raise ShardError(
            f"{path}: format version {manifest['format_version']}, this code reads {FORMAT_VERSION}"
        )
    if list(manifest["bands"]) != list(C.BANDS):
        raise ShardError(f"{path}: band order {manifest['bands']} differs from {list(C.BANDS)}")
    return manifest


def split_shards(manifest: dict, split: str) -> list[dict]:
    """The manifest's shard entries of one split, in index order."""
    return [s for s in manifest["shards"] if s["split"] == split]


def verify_shard(data_dir: str | Path, entry: dict) -> None:
    """Check a shard exists and its sha256 matches the manifest; ShardError otherwise."""
    path = Path(data_dir) / entry["file"]
    if not path.is_file():
        raise ShardError(f"{path}: shard listed in the manifest is missing")
    digest = sha256_file(path)
    if digest != entry["sha256"]:
        raise ShardError(f"{path}: sha256 {digest[:12]}... differs from the manifest's")
