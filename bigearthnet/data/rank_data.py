"""Input pipelines over the HDF5 shards: each rank reads its own disjoint part of a split.

Partition. The shards of a split, in manifest order, form one index space ``0..N-1``;
rank ``r`` of ``n`` owns the contiguous range ``[r*N//n, (r+1)*N//n)``. When there are
more shards than ranks that is (mostly) whole shard files per rank; when there are fewer,
index ranges inside files. The parts differ by at most one sample and never overlap, so
across ranks every sample is seen exactly once per epoch.

Steps. Synchronous data-parallel training needs the same number of steps on every rank
(each step is an allreduce), so every rank cuts its part into the epoch's steps
(:class:`~bigearthnet.core.batch.BatchPlan`): ``--batch-size`` samples each, the last step
taking what is left (:func:`~bigearthnet.data.partition.split_batches`).

Shuffling. A new permutation of the rank's part each epoch, from ``(seed, epoch, rank)``.
With ``cache="memory"`` the part is read once and kept as uint16 (reading the data again
every epoch is what starved the seed study's GPUs). With ``cache="none"`` the part is
streamed: blocks of ``CHUNK_ROWS`` contiguous rows in random order, shuffled within
windows of ``WINDOW_BLOCKS`` blocks, so reads stay sequential and memory stays small.

The pipeline yields :class:`Batch` items: uint16 images and uint8 labels, and, for a part
opened with ``maps=True`` (the dense head trains), each patch's reference map ``map19``
(uint8 19-class indices, ``NO_LABEL`` where there is none) and ``has_map``, kept in the same
place as the images (14,400 bytes a patch more); conversion to float, normalisation and
augmentation happen in the training step on the device, so the host only moves integers.

Speed. A background thread prepares the batches ``PREFETCH`` steps ahead of the training
step. The memory cache is read into a 64-byte aligned array; ``--loader-threads`` threads
copy a batch's rows into a fresh aligned buffer that TensorFlow views without a copy
(DLPack). With the device cache the batch is gathered where the cache lives
(:mod:`bigearthnet.data.cache`). Figures: benchmarks/README.md, P2 and P7.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from bigearthnet.data.loader import Prefetcher, RowGather, aligned_empty, tensor_view
from bigearthnet.data.partition import epoch_order, rank_range, split_batches
from bigearthnet.formats.manifest import Manifest, ShardEntry, split_shards, verify_shard
from bigearthnet.formats.shard_maps import HAS_MAP_KEY, MAP_KEY, map_shape
from bigearthnet.formats.shards import CHUNK_ROWS, ShardError, read_rows

WINDOW_BLOCKS = 8  # streaming: 8 x 16 patches (44 MB) shuffled together


class Batch(NamedTuple):
    """One batch of a part: NumPy arrays, or tensors (:meth:`RankData.dataset`)."""

    images: Any  # uint16 (b, 120, 120, channels)
    labels: Any  # uint8 (b, classes)
    maps: Any = None  # uint8 (b, 120, 120) map19 rows; None: the part carries no maps
    has_map: Any = None  # uint8 (b,): 1 where the row's map is stored


@dataclass(frozen=True)
class ShardFile:
    path: Path
    start: int  # global index of the file's first row
    count: int


class RankData:
    """One rank's part of one split: its rows, labels and names, read once or streamed."""

    def __init__(
        self,
        data_dir: str | Path,
        manifest: Manifest,
        split: str,
        *,
        labels: int,
        rank: int = 0,
        size: int = 1,
        cache: str = "memory",
        device: str = "/CPU:0",
        threads: int = 1,
        verify: bool = True,
        maps: bool = False,
    ):
        self.data_dir = Path(data_dir)
        self.split = split
        self.label_key = f"labels{labels}"
        if labels == 43 and 43 not in manifest.label_sets:
            raise ShardError(
                f"{self.data_dir}: --labels 43 but these shards hold 19-class labels only"
            )
        if maps and not manifest.has_maps:
            raise ShardError(f"{self.data_dir}: these shards hold no reference maps")
        self.maps = maps
        self.files = _shard_files(self.data_dir, manifest, split)
        self.image_shape = manifest.image_shape
        self.total = sum(f.count for f in self.files)
        self.start, self.stop = rank_range(self.total, rank, size)
        self.rank = rank
        self.cache = cache
        self.device = device
        if verify:
            for entry in self._my_entries(manifest):
                verify_shard(self.data_dir, entry)
        self._images: np.ndarray | None = None
        self._maps: np.ndarray | None = None
        self._on_device: tf.Tensor | None = None
        self._maps_on_device: tf.Tensor | None = None
        self._gather: RowGather | None = None
        self._labels = self._read_rows(self.label_key, self.start, self.stop)
        self._has_map = self._read_rows(HAS_MAP_KEY, self.start, self.stop) if maps else None
        if cache in ("memory", "device"):
            images = self._read_aligned("images", self.image_shape, np.uint16)
            self._images = images
            self._gather = RowGather(images, threads=threads, empty=aligned_empty)
            if maps:
                self._maps = self._read_aligned(MAP_KEY, map_shape(), np.uint8)
            if cache == "device" and len(self):
                with tf.device(device):  # one copy to the accelerator, for the whole run
                    self._on_device = tf.identity(tensor_view(images))
                    if self._maps is not None:
                        self._maps_on_device = tf.identity(tensor_view(self._maps))

    def __len__(self) -> int:
        return self.stop - self.start

    @property
    def labels(self) -> np.ndarray:
        return self._labels

    def names(self) -> list[str]:
        raw = self._read_rows("names", self.start, self.stop)
        return [n.decode() if isinstance(n, bytes) else str(n) for n in raw]

    def take(self, positions: np.ndarray) -> Batch:
        """The rows at arbitrary positions of the part (elastic training's global order):
        gathered from the cache, else read as sorted contiguous runs."""
        positions = np.asarray(positions)
        if self._images is not None:
            maps = self._maps[positions] if self._maps is not None else None
            return Batch(self._images[positions], self._labels[positions], maps,
                         self._row_has_map(positions))  # fmt: skip
        images = self._read_positions("images", positions)
        maps = self._read_positions(MAP_KEY, positions) if self.maps else None
        return Batch(images, self._labels[positions], maps, self._row_has_map(positions))

    def _row_has_map(self, positions: np.ndarray) -> np.ndarray | None:
        return self._has_map[positions] if self._has_map is not None else None

    def _read_positions(self, key: str, positions: np.ndarray) -> np.ndarray:
        """Rows of ``key`` at ``positions`` (in that order), read as sorted contiguous runs."""
        order = np.argsort(positions)
        runs = _contiguous_runs(positions[order])
        rows = np.concatenate(
            [self._read_rows(key, self.start + r[0], self.start + r[-1] + 1) for r in runs]
        )
        out = np.empty_like(rows)
        out[order] = rows  # back to the requested order
        return out

    def _my_entries(self, manifest: Manifest) -> list[ShardEntry]:
        mine = []
        for entry, file in zip(split_shards(manifest, self.split), self.files):
            if file.start < self.stop and file.start + file.count > self.start:
                mine.append(entry)
        return mine

    def _read_rows(self, key: str, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of one dataset, across file boundaries, contiguous reads only."""
        parts = []
        for file in self.files:
            lo, hi = max(start, file.start), min(stop, file.start + file.count)
            if lo < hi:
                parts.append(read_rows(file.path, key, lo - file.start, hi - file.start))
        if not parts:
            shape = {"images": self.image_shape, MAP_KEY: map_shape()}.get(key, ())
            return np.zeros((0, *shape), dtype=np.uint16 if key == "images" else np.uint8)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def _read_aligned(self, key: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """The part's rows of ``key`` in one aligned array, read straight into it (no
        concatenation)."""
        out = aligned_empty((len(self), *shape), dtype)
        pos = 0
        for file in self.files:
            lo, hi = max(self.start, file.start), min(self.stop, file.start + file.count)
            if lo < hi:
                rows = out[pos : pos + hi - lo]  # a contiguous view: read straight into it
                read_rows(file.path, key, lo - file.start, hi - file.start, out=rows)
                pos += hi - lo
        return out

    # ------------------------------------------------------------------ batches

    def batches(
        self,
        steps: int,
        *,
        epoch: int,
        seed: int,
        shuffle: bool,
        start_step: int = 0,
        limit: int | None = None,
        tensors: bool = False,
        batch_size: int | None = None,
    ) -> Iterator:
        """Yield :class:`Batch` items for steps ``start_step..steps-1`` of an epoch;
        all ``steps`` batches together cover the part exactly once - or, with ``limit``,
        the first ``limit`` samples of the epoch's order (a capped epoch). ``batch_size``:
        that many per batch, the last taking the rest (training); None: near-equal
        batches (validation, evaluation). ``tensors``: as
        tensors (what :meth:`dataset` hands the step): gathered on the device from the device
        cache, else by the row-copy threads from the memory cache."""
        convert = _converter(tensors)
        if self._images is None:  # streaming: read, then (tensors) one copy into a tensor
            cut = (steps, batch_size)
            for batch in self._stream(cut, epoch, seed, shuffle, start_step, limit):
                yield Batch(*map(convert, batch))
            return
        order = epoch_order(len(self), seed, epoch, self.rank, shuffle)[:limit]
        for idx in split_batches(order, steps, batch_size)[start_step:]:
            idx = np.sort(idx)  # sorted gathers are cache-friendlier; batch order is free
            yield Batch(
                self._batch_images(idx, tensors=tensors),
                convert(self._labels[idx]),
                self._batch_maps(idx, tensors=tensors),
                convert(self._row_has_map(idx)),
            )

    def _batch_images(self, idx: np.ndarray, *, tensors: bool):
        gather = self._gather
        assert gather is not None  # made with the cache; without one, batches() streams
        if not tensors:
            return gather.images[idx]
        if self._on_device is not None:
            return tf.gather(self._on_device, idx)
        return tensor_view(gather(idx))

    def _batch_maps(self, idx: np.ndarray, *, tensors: bool):
        """The batch's maps (None without): 14 KB a row, so copied whole rather than by the
        row-copy threads."""
        if self._maps is None or not tensors:
            return None if self._maps is None else self._maps[idx]
        if self._maps_on_device is not None:
            return tf.gather(self._maps_on_device, idx)
        return tf.convert_to_tensor(self._maps[idx])

    def _stream(self, cut, epoch, seed, shuffle, start_step, limit) -> Iterator:
        steps, batch_size = cut
        order = self._stream_order(epoch, seed, shuffle)[:limit]
        bounds = np.cumsum([0] + [len(b) for b in split_batches(order, steps, batch_size)])
        window_rows = WINDOW_BLOCKS * CHUNK_ROWS
        # window -> {position: (image, map or None)}
        loaded: dict[int, dict[int, tuple[np.ndarray, np.ndarray | None]]] = {}
        for step in range(start_step, steps):
            lo, hi = int(bounds[step]), int(bounds[step + 1])
            first, last = lo // window_rows, (hi - 1) // window_rows
            for w in [w for w in loaded if w < first]:
                del loaded[w]  # batches move forward through the windows: free the old ones
            for w in range(first, last + 1):
                if w not in loaded:
                    loaded[w] = self._load_window(order[w * window_rows : (w + 1) * window_rows])
            idx = order[lo:hi]
            rows = {p: row for w in range(first, last + 1) for p, row in loaded[w].items()}
            images, maps = zip(*(rows[int(p)] for p in idx))
            yield Batch(np.stack(images), self._labels[idx],
                        np.stack(maps) if self.maps else None, self._row_has_map(idx))  # fmt: skip

    def _stream_order(self, epoch: int, seed: int, shuffle: bool) -> np.ndarray:
        positions = np.arange(len(self))
        if not shuffle:
            return positions
        rng = np.random.default_rng([seed, epoch, self.rank])
        blocks = [positions[i : i + CHUNK_ROWS] for i in range(0, len(positions), CHUNK_ROWS)]
        blocks = [blocks[i] for i in rng.permutation(len(blocks))]
        windows = []
        for w in range(0, len(blocks), WINDOW_BLOCKS):
            window = np.concatenate(blocks[w : w + WINDOW_BLOCKS])
            windows.append(window[rng.permutation(len(window))])
        return np.concatenate(windows) if windows else positions

    def _load_window(self, positions: np.ndarray) -> dict[int, tuple[np.ndarray, Any]]:
        rows: dict[int, tuple[np.ndarray, Any]] = {}
        for run in _contiguous_runs(np.sort(positions)):
            lo, hi = self.start + run[0], self.start + run[-1] + 1
            images = self._read_rows("images", lo, hi)
            maps = self._read_rows(MAP_KEY, lo, hi) if self.maps else [None] * len(images)
            rows.update(zip(run.tolist(), zip(images, maps)))
        return rows

    def dataset(self, steps: int, **kwargs: Any) -> Prefetcher:
        """The batches of :meth:`batches` (same arguments) as tensors, made
        by a background thread ``PREFETCH`` steps ahead (reading overlaps the step);
        iterate it once."""
        return Prefetcher(self._host_tensors(steps, **kwargs))

    def _host_tensors(self, steps: int, **kwargs: Any) -> Iterator:
        # Pinned to the cache's device: on a GPU node an eager op would otherwise run on the
        # GPU and copy a host cache there. From a host cache the step copies each batch over.
        with tf.device(self.device):
            yield from self.batches(steps, tensors=True, **kwargs)


def _converter(tensors: bool):
    """A batch field as a tensor (``tensors``) or an array; None stays None."""
    convert = tf.convert_to_tensor if tensors else np.asarray
    return lambda value: None if value is None else convert(value)


def _contiguous_runs(sorted_positions: np.ndarray) -> list[np.ndarray]:
    breaks = np.nonzero(np.diff(sorted_positions) != 1)[0] + 1
    return np.split(sorted_positions, breaks)


def _shard_files(data_dir: Path, manifest: Manifest, split: str) -> list[ShardFile]:
    files, start = [], 0
    for entry in split_shards(manifest, split):
        files.append(ShardFile(entry.path(data_dir), start, entry.count))
        start += entry.count
    if start == 0:
        raise ShardError(f"{data_dir}: the {split} split is empty")
    return files
