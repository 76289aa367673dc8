"""Preprocessing, step 2: one shard from its patches (see
:mod:`bigearthnet.preprocessing.preprocess`).

Each patch's 20 m and 60 m bands are upsampled to the 10 m grid and its Sentinel-1 dB values
encoded (:func:`assemble`, also what ``bigearthnet-map`` uses, so a map window equals a shard
image), blocks of patches are written to the shard under a temporary name, and the band
sums for the train statistics are accumulated in float64. Where the archive has reference
maps, each patch's map is placed on its grid (:mod:`.reference_maps`) and stored beside its
image.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from pathlib import Path

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.util import atomic_write_json, sha256_file
from bigearthnet.formats.shard_maps import HAS_MAP_KEY, MAP_KEY, absent_map
from bigearthnet.formats.shards import ShardWriter, encode_db, image_shape
from bigearthnet.preprocessing import reference_maps
from bigearthnet.preprocessing.archive import (
    PatchError,
    read_patch,
)
from bigearthnet.preprocessing.plan import PARTS, ShardPlan
from bigearthnet.preprocessing.reference_maps import MapTally, PatchGrid
from bigearthnet.preprocessing.resample import upsample

BLOCK = 32  # patches assembled in memory before a write: ~11 MB, bounds RSS per worker


@functools.cache
def _resolution_groups(bands: tuple[str, ...]) -> tuple[tuple[int, list[int]], ...]:
    """(resolution, channel indices) of the S2 bands in ``bands``: upsampled together."""
    groups = []
    for res in (10, 20, 60):
        indices = [i for i, b in enumerate(bands) if constants.BAND_RESOLUTION_M.get(b) == res]
        if indices:
            groups.append((res, indices))
    return tuple(groups)


def assemble(
    patch,
    resampling: str,
    bands: tuple[str, ...] = constants.BANDS,
    out: np.ndarray | None = None,
    size: int | tuple[int, int] = constants.PATCH_SIZE,
) -> np.ndarray:
    """(120, 120, len(bands)) uint16, channels in ``bands`` order: S2 10 m bands copied
    bit-exact, 20/60 m upsampled, S1 dB encoded (formats/shards.encode_db).

    ``out`` (a row of a block being assembled) is filled in place instead of a new array.
    ``size``: another square of 10 m px (a scene map's large window; its bands' native
    squares of ``size`` / factor px), or (height, width) (such a window at a scene's edge).
    """
    height, width = (size, size) if isinstance(size, int) else size
    image = np.empty((height, width, len(bands)), dtype=np.uint16) if out is None else out
    for _res, indices in _resolution_groups(bands):
        stack = np.stack([patch.bands[bands[i]] for i in indices])
        image[:, :, indices] = upsample(stack, size, resampling).transpose(1, 2, 0)
    for i, band in enumerate(bands):
        if band in constants.S1_BANDS:
            image[:, :, i] = encode_db(patch.bands[band])
    return image


def write_shard(
    shard: ShardPlan,
    out: Path,
    version: str,
    resampling: str,
    plan_id: str,
    bands: tuple[str, ...] = constants.BANDS,
    maps: str | None = None,
    progress=None,
) -> dict:
    """Read, upsample and write one shard; returns (and saves) its sidecar record.
    ``maps``: the archive has reference maps, and this is the --map-label-mismatch policy."""
    with43 = version == "v1"
    attrs = {
        "bands": list(bands),
        "classes19": list(constants.CLASSES_19),
        "classes43": list(constants.CLASSES_43) if with43 else [],
        "resampling": resampling,
        "source_version": version,
    }
    writer = ShardWriter(out / shard.file, shard.split, len(shard.refs), attrs, with43, bool(maps))
    sums = np.zeros((2, len(bands)), dtype=np.float64)
    rejects: list[tuple[str, str]] = []
    tally = _MapRows(maps) if maps else None
    try:
        with one_blas_thread():
            for start in range(0, len(shard.refs), BLOCK):
                refs = shard.refs[start : start + BLOCK]
                block = _read_block(refs, version, resampling, bands, rejects, sums, tally)
                if block is not None:
                    writer.append(block)
                if progress is not None:
                    progress(len(refs))
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    record = {
        "file": shard.file,
        "split": shard.split,
        "count": writer.rows,
        "sha256": sha256_file(out / shard.file),
        "pixel_count": writer.rows * constants.PATCH_SIZE * constants.PATCH_SIZE,
        "band_sum": sums[0].tolist(),
        "band_sumsq": sums[1].tolist(),
        "rejects": rejects,
        "plan_id": plan_id,
    }
    if tally is not None:  # kept patches whose map is absent, and the map figures
        record.update(map_notes=tally.notes, maps=dataclasses.asdict(tally.tally))
    atomic_write_json(out / PARTS / f"{shard.file}.json", record)
    return record


def _read_block(refs, version, resampling, bands, rejects, sums, maps) -> dict | None:
    # Patches are assembled straight into the block that is written (no per-patch copies).
    images = np.empty((len(refs), *image_shape(len(bands))), dtype=np.uint16)
    names: list[str] = []
    labels19: list[np.ndarray] = []
    labels43: list[np.ndarray] = []
    crs: list[str] = []
    ulxy: list[tuple[float, float]] = []
    for ref in refs:
        try:
            patch = read_patch(ref, version, bands)
            if maps is not None:
                maps.add(ref, patch)
        except PatchError as err:
            rejects.append((ref.name, str(err)))
            continue
        assemble(patch, resampling, bands, out=images[len(names)])
        names.append(patch.name)
        labels19.append(patch.labels19)
        if patch.labels43 is not None:  # v1 archives (with43); v2 patches have none
            labels43.append(patch.labels43)
        crs.append(patch.crs)
        ulxy.append((patch.ulx, patch.uly))
    if not names:
        return None
    images = images[: len(names)]
    sums += band_sums(images)
    block = {
        "images": images,
        "labels19": np.stack(labels19),
        "names": names,
        "crs": crs,
        "ulxy": np.asarray(ulxy, dtype=np.float64),
    }
    if labels43:
        block["labels43"] = np.stack(labels43)
    if maps is not None:
        block.update(maps.take())
    return block


class _MapRows:
    """The reference maps of a shard's rows, as its blocks are read: each patch's map
    placed (or absent, with a note), the figures tallied."""

    def __init__(self, policy: str):
        self.policy = policy
        self.tally = MapTally()
        self.notes: list[tuple[str, str]] = []  # kept patches without their map, and why
        self._maps: list[np.ndarray] = []
        self._has: list[int] = []

    def add(self, ref, patch) -> None:
        """Decide the patch's map; PatchError when the policy drops the patch."""
        assert ref.map_file is not None  # the listing names every patch's map file
        grid = PatchGrid(patch.crs, patch.ulx, patch.uly)
        decision = reference_maps.decide(ref.map_file, grid, patch.labels19, self.policy)
        self.tally.add(decision)
        if decision.drop_patch:
            raise PatchError(decision.note)
        if decision.note:
            self.notes.append((ref.name, decision.note))
        self._maps.append(absent_map() if decision.map19 is None else decision.map19)
        self._has.append(int(decision.map19 is not None))

    def take(self) -> dict[str, np.ndarray]:
        """The block's map rows, in the order of :meth:`add`."""
        rows = {MAP_KEY: np.stack(self._maps), HAS_MAP_KEY: np.asarray(self._has, np.uint8)}
        self._maps, self._has = [], []
        return rows


def band_sums(images: np.ndarray) -> np.ndarray:
    """(2, bands) float64: per-band sum and sum of squares over every pixel of ``images``.

    Exact: per image every partial sum is an integer below 2**53. The products with a
    vector of ones run as BLAS matrix-vector products, twice as fast as reductions along
    the pixel axis of a channels-last array.
    """
    ones = np.ones(images.shape[1] * images.shape[2])
    sums = np.zeros((2, images.shape[-1]))
    for image in images:
        flat = image.reshape(len(ones), -1).astype(np.float64)
        sums[0] += ones @ flat
        flat *= flat
        sums[1] += ones @ flat
    return sums


@contextlib.contextmanager
def one_blas_thread():
    """Run BLAS single-threaded: the per-patch upsampling products are tiny, so BLAS
    threads only add hand-offs and contend with the other workers for the cores
    (measured: 2 BLAS threads made one worker ~1.5x slower on 2 cores)."""
    try:
        from threadpoolctl import threadpool_limits  # installed with scikit-learn
    except ImportError:  # pragma: no cover - the default thread count is merely slower
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield
