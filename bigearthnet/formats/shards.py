"""The preprocessed dataset: HDF5 shards plus ``manifest.json`` (the only contract between
preprocessing and training/evaluation, :mod:`bigearthnet.formats.manifest`).

Layout of ``OUT/``::

    {split}-{i:05d}-of-{n:05d}.h5     split in train/val/test
    manifest.json                     written last: its presence means "complete"
    rejects.csv                       patch,reason for every patch not written

Each shard holds, for its N patches:

=========== ================== ===========================================================
dataset     shape, dtype       content
=========== ================== ===========================================================
images      (N,120,120,C) u2   the manifest's ``bands`` in order (a configuration of
                               ``constants.BAND_CONFIGS``): S2 reflectance x 1e4 as the
                               archive has it, S1 dB scaled (:func:`encode_db`); chunked
                               ``CHUNK_ROWS`` patches at a time for batch reads
labels19    (N,19) u1          multi-hot, ``constants.CLASSES_19`` order
labels43    (N,43) u1          multi-hot, ``constants.CLASSES_43`` order (v1 sources only)
names       (N,) UTF-8         patch names
crs         (N,) UTF-8         the patch's CRS ("EPSG:32633"), for maps
ulxy        (N,2) f8           upper-left corner of the patch in its CRS (metres)
map19       (N,120,120) u1     the patch's reference map, 19-class indices,
                               ``constants.NO_LABEL`` for no label (only from archives
                               with reference maps: :mod:`bigearthnet.formats.shard_maps`)
has_map     (N,) u1            1 where the row's map is stored (with ``map19``)
=========== ================== ===========================================================

File attributes name the bands, the class lists, the resampling, the source version and
the split, so a shard is self-describing even without the manifest.

Sentinel-1 backscatter (float32 dB in the archive) is stored as uint16 codes,
``dB = code * S1_DB_SCALE + S1_DB_OFFSET``: 0.002 dB steps over -80..+51.07 dB, so a value in
that range comes back within 0.001 dB (1,000x finer than Sentinel-1's ~1 dB radiometric
accuracy) and values outside it saturate. One image type for every configuration keeps the
uint16 caches and loaders as they are, and as the codes are affine in dB, standardising
them with their own statistics equals standardising the dB values: a model never decodes.
The manifest records each channel's ``channel_scale`` and ``channel_offset``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError
from bigearthnet.core.util import first_line
from bigearthnet.formats import shard_maps

FORMAT_VERSION = 1
CHUNK_ROWS = 16  # 16 patches = 5.5 MB: big sequential reads, still fine-grained for shuffling
REJECTS = "rejects.csv"
S1_DB_SCALE = 0.002  # dB per code
S1_DB_OFFSET = -80.0  # dB of code 0


def image_shape(channels: int) -> tuple[int, int, int]:
    """(120, 120, channels): one patch's image."""
    return (constants.PATCH_SIZE, constants.PATCH_SIZE, channels)


def encode_db(db: np.ndarray) -> np.ndarray:
    """float dB -> uint16 codes (rounded to 0.002 dB; saturating outside -80..+51.07 dB)."""
    codes = np.rint((np.asarray(db, dtype=np.float64) - S1_DB_OFFSET) / S1_DB_SCALE)
    return np.clip(codes, 0, np.iinfo(np.uint16).max).astype(np.uint16)


def channel_encoding(band: str) -> tuple[float, float]:
    """(scale, offset) of a channel's codes: physical value = code * scale + offset."""
    return (S1_DB_SCALE, S1_DB_OFFSET) if band in constants.S1_BANDS else (1.0, 0.0)


def describe_encoding(band: str) -> str:
    """What a channel's uint16 value means, in words (model card, STAC item)."""
    if band in constants.S1_BANDS:
        return f"dB = value x {S1_DB_SCALE:g} {S1_DB_OFFSET:+g}"
    return "reflectance x 10,000"


class ShardError(InputError):
    """A preprocessed dataset that cannot be used as it is."""


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.h5"


class ShardWriter:
    """Writes one shard under a temporary name and renames it on :meth:`commit`.

    Rows are appended in blocks, so memory stays bounded by one block whatever the
    shard size. ``with_maps``: the shard holds reference maps (``map19``, ``has_map``).
    """

    def __init__(
        self,
        path: Path,
        split: str,
        expected_rows: int,
        attrs: dict,
        with43: bool,
        with_maps: bool = False,
    ):
        self.path = Path(path)
        self.shape = image_shape(len(attrs["bands"]))
        self._tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        self._file = h5py.File(self._tmp, "w")
        self.rows = 0
        self._create(max(expected_rows, 1), with43)
        if with_maps:
            shard_maps.create_datasets(self._file, max(expected_rows, 1), CHUNK_ROWS)
        for key, value in {**attrs, "split": split, "format_version": FORMAT_VERSION}.items():
            self._file.attrs[key] = value

    def _create(self, rows: int, with43: bool) -> None:
        f, text = self._file, h5py.string_dtype("utf-8")
        f.create_dataset(
            "images",
            shape=(rows, *self.shape),
            maxshape=(None, *self.shape),
            dtype=np.uint16,
            chunks=(min(CHUNK_ROWS, rows), *self.shape),
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


@contextlib.contextmanager
def open_shard(path: str | Path) -> Iterator[h5py.File]:
    """A shard opened for reading; what goes wrong inside the block (a truncated or
    damaged file, a missing dataset) is a ShardError naming the file, the one reader's rule."""
    try:
        with h5py.File(path, "r") as f:
            yield f
    except (OSError, KeyError) as err:
        reason = first_line(err)
        raise ShardError(f"{path}: unreadable shard ({reason}); preprocess again") from None


@dataclass(frozen=True)
class ShardLocations:
    """Where a shard's patches are: names, CRS and upper-left corners (no images read)."""

    names: list[str]
    crs: list[str]
    ulxy: np.ndarray  # (N, 2) float64, metres in each patch's CRS


def read_rows(
    path: str | Path, key: str, start: int, stop: int, out: np.ndarray | None = None
) -> np.ndarray:
    """Rows [start, stop) of one shard's dataset ``key`` (images, labels19, labels43, and
    where the manifest has maps map19, has_map), read straight into ``out`` when given (a
    C-contiguous array of that many rows): the one reader of shard contents (training,
    evaluation and patch maps read through it)."""
    with open_shard(path) as f:
        if out is None:
            return f[key][start:stop]
        f[key].read_direct(out, np.s_[start:stop])
        return out


def read_locations(path: str | Path, start: int = 0, stop: int | None = None) -> ShardLocations:
    """The names, CRS and corners of the patches [start, stop) of the shard at ``path``;
    ShardError if unreadable."""
    with open_shard(path) as f:
        rows = np.s_[start:stop]
        return ShardLocations(
            [_text(v) for v in f["names"][rows]],
            [_text(v) for v in f["crs"][rows]],
            np.asarray(f["ulxy"][rows], dtype=np.float64),
        )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
