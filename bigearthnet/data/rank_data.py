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

The pipeline yields uint16 images and uint8 labels; conversion to float, normalisation and
augmentation happen in the training step on the device, so the host only moves uint16.

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
from typing import Any

import numpy as np
import tensorflow as tf

from bigearthnet.data.loader import Prefetcher, RowGather, aligned_empty, tensor_view
from bigearthnet.data.partition import epoch_order, rank_range, split_batches
from bigearthnet.formats.manifest import Manifest, ShardEntry, split_shards, verify_shard
from bigearthnet.formats.shards import CHUNK_ROWS, ShardError, read_rows

WINDOW_BLOCKS = 8  # streaming: 8 x 16 patches (44 MB) shuffled together


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
    ):
        self.data_dir = Path(data_dir)
        self.split = split
        self.label_key = f"labels{labels}"
        if labels == 43 and 43 not in manifest.label_sets:
            raise ShardError(
                f"{self.data_dir}: --labels 43 but these shards hold 19-class labels only"
            )
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
        self._on_device: tf.Tensor | None = None
        self._gather: RowGather | None = None
        self._labels = self._read_rows(self.label_key, self.start, self.stop)
        if cache in ("memory", "device"):
            images = self._read_images_aligned()
            self._images = images
            self._gather = RowGather(images, threads=threads, empty=aligned_empty)
            if cache == "device" and len(self):
                with tf.device(device):  # one copy to the accelerator, for the whole run
                    self._on_device = tf.identity(tensor_view(images))

    def __len__(self) -> int:
        return self.stop - self.start

    @property
    def labels(self) -> np.ndarray:
        return self._labels

    def names(self) -> list[str]:
        raw = self._read_rows("names", self.start, self.stop)
        return [n.decode() if isinstance(n, bytes) else str(n) for n in raw]

    def take(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Images and labels at arbitrary positions of the part (elastic training's global
        order): gathered from the cache, else read as sorted contiguous runs."""
        positions = np.asarray(positions)
        if self._images is not None:
            return self._images[positions], self._labels[positions]
        order = np.argsort(positions)
        ordered = positions[order]
        runs = _contiguous_runs(ordered)
        images = np.concatenate(
            [self._read_rows("images", self.start + r[0], self.start + r[-1] + 1) for r in runs]
        )
        out = np.empty_like(images)
        out[order] = images  # back to the requested order
        return out, self._labels[positions]

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
            shape = self.image_shape if key == "images" else ()
            return np.zeros((0, *shape), dtype=np.uint16 if key == "images" else np.uint8)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def _read_images_aligned(self) -> np.ndarray:
        """The part's images in one aligned array, read straight into it (no concatenation)."""
        out = aligned_empty((len(self), *self.image_shape), np.uint16)
        pos = 0
        for file in self.files:
            lo, hi = max(self.start, file.start), min(self.stop, file.start + file.count)
            if lo < hi:
                rows = out[pos : pos + hi - lo]  # a contiguous view: read straight into it
                read_rows(file.path, "images", lo - file.start, hi - file.start, out=rows)
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
        """Yield (images uint16, labels uint8) for steps ``start_step..steps-1`` of an epoch;
        all ``steps`` batches together cover the part exactly once - or, with ``limit``,
        the first ``limit`` samples of the epoch's order (a capped epoch). ``batch_size``:
        that many per batch, the last taking the rest (training); None: near-equal
        batches (validation, evaluation). ``tensors``: as
        tensors (what :meth:`dataset` hands the step): gathered on the device from the device
        cache, else by the row-copy threads from the memory cache."""
        convert = tf.convert_to_tensor if tensors else np.asarray
        if self._images is None:  # streaming: read, then (tensors) one copy into a tensor
            cut = (steps, batch_size)
            for images, labels in self._stream(cut, epoch, seed, shuffle, start_step, limit):
                yield convert(images), convert(labels)
            return
        order = epoch_order(len(self), seed, epoch, self.rank, shuffle)[:limit]
        for idx in split_batches(order, steps, batch_size)[start_step:]:
            idx = np.sort(idx)  # sorted gathers are cache-friendlier; batch order is free
            yield self._batch_images(idx, tensors=tensors), convert(self._labels[idx])

    def _batch_images(self, idx: np.ndarray, *, tensors: bool):
        gather = self._gather
        assert gather is not None  # made with the cache; without one, batches() streams
        if not tensors:
            return gather.images[idx]
        if self._on_device is not None:
            return tf.gather(self._on_device, idx)
        return tensor_view(gather(idx))

    def _stream(self, cut, epoch, seed, shuffle, start_step, limit) -> Iterator:
        steps, batch_size = cut
        order = self._stream_order(epoch, seed, shuffle)[:limit]
        bounds = np.cumsum([0] + [len(b) for b in split_batches(order, steps, batch_size)])
        window_rows = WINDOW_BLOCKS * CHUNK_ROWS
        loaded: dict[int, dict[int, np.ndarray]] = {}  # window -> {position: image}
        for step in range(start_step, steps):
            lo, hi = int(bounds[step]), int(bounds[step + 1])
            first, last = lo // window_rows, (hi - 1) // window_rows
            for w in [w for w in loaded if w < first]:
                del loaded[w]  # batches move forward through the windows: free the old ones
            for w in range(first, last + 1):
                if w not in loaded:
                    loaded[w] = self._load_window(order[w * window_rows : (w + 1) * window_rows])
            idx = order[lo:hi]
            rows = {p: img for w in range(first, last + 1) for p, img in loaded[w].items()}
            yield np.stack([rows[int(p)] for p in idx]), self._labels[idx]

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

    def _load_window(self, positions: np.ndarray) -> dict[int, np.ndarray]:
        rows: dict[int, np.ndarray] = {}
        for run in _contiguous_runs(np.sort(positions)):
            data = self._read_rows("images", self.start + run[0], self.start + run[-1] + 1)
            rows.update(zip(run.tolist(), data))
        return rows

    def dataset(self, steps: int, **kwargs: Any) -> Prefetcher:
        """The batches of :meth:`batches` (same arguments) as (uint16, uint8) tensors, made
        by a background thread ``PREFETCH`` steps ahead (reading overlaps the step);
        iterate it once."""
        return Prefetcher(self._host_tensors(steps, **kwargs))

    def _host_tensors(self, steps: int, **kwargs: Any) -> Iterator:
        # Pinned to the cache's device: on a GPU node an eager op would otherwise run on the
        # GPU and copy a host cache there. From a host cache the step copies each batch over.
        with tf.device(self.device):
            yield from self.batches(steps, tensors=True, **kwargs)


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
