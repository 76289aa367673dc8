"""How a batch is gathered on the host: the row-copy threads of the memory cache, aligned
buffers TensorFlow views without a copy, and the thread that prepares batches ahead of the
step.

Row copies (``np.take`` into a buffer, which releases the GIL) are what scales with threads;
fancy indexing into a new array was 4x slower in the same measurement. TensorFlow's CPU
tensors must be 64-byte aligned (EIGEN_MAX_ALIGN_BYTES) to be views of NumPy memory
(DLPack). Figures: benchmarks/README.md, P2 and P7.
"""

from __future__ import annotations

import math
import os
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tensorflow as tf

from bigearthnet.core.errors import ConfigError

MAX_DEFAULT_THREADS = 8  # beyond this one node's memory bandwidth, not threads, limits
PREFETCH = 2  # batches prepared ahead of the training step
ALIGN = 64  # bytes: TensorFlow's CPU tensors must be aligned so (EIGEN_MAX_ALIGN_BYTES)


def rank_cpus() -> int:
    """Cores this process may run on (Slurm's binding included)."""
    return len(os.sched_getaffinity(0))


def loader_threads(requested: int | None, *, ranks_on_node: int) -> int:
    """Host gather threads for one rank: ``requested`` checked against the rank's cores, else
    half the rank's CPU share (the other half runs TensorFlow's ops and Horovod)."""
    cpus = rank_cpus()
    if requested is not None:
        if requested < 1 or requested > cpus:
            raise ConfigError(
                f"--loader-threads must be between 1 and this rank's {cpus} core(s), "
                f"got {requested}"
            )
        return requested
    slurm_share = os.environ.get("SLURM_CPUS_PER_TASK", "")
    share = int(slurm_share) if slurm_share.isdigit() else max(1, cpus // max(1, ranks_on_node))
    return max(1, min(MAX_DEFAULT_THREADS, share // 2))


def aligned_empty(shape: tuple[int, ...], dtype, align: int = ALIGN) -> np.ndarray:
    """An uninitialised array whose data starts on an ``align``-byte boundary."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    raw = np.empty(nbytes + align, dtype=np.uint8)
    offset = -raw.ctypes.data % align
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


def tensor_view(array: np.ndarray) -> tf.Tensor:
    """A tf.Tensor sharing ``array``'s memory (no copy: the cache is not held twice)."""
    if array.ctypes.data % ALIGN or not array.flags.c_contiguous:
        raise ValueError("the image cache must be C-contiguous and 64-byte aligned")
    return tf.experimental.dlpack.from_dlpack(array.__dlpack__())


class RowGather:
    """Copies the rows ``idx`` of a uint16 cache into a new aligned buffer with ``threads``
    threads, each a contiguous slice of the batch. A new buffer per batch: the tensor that
    views it may still be in use by the step when the next batch is gathered."""

    def __init__(
        self, images: np.ndarray, *, threads: int, empty: Callable[..., np.ndarray]
    ) -> None:
        self.images = images
        self.threads = threads
        self.empty = empty
        self.pool = ThreadPoolExecutor(threads, "gather") if threads > 1 else None

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        out = self.empty((len(idx), *self.images.shape[1:]), self.images.dtype)
        if self.pool is None or len(idx) < 2 * self.threads:
            # mode "clip": with "raise" numpy copies through a temporary buffer (half the
            # speed); the indices come from our own permutation, so they are in range.
            np.take(self.images, idx, axis=0, out=out, mode="clip")
            return out
        bounds = np.linspace(0, len(idx), self.threads + 1).astype(int)
        copies = [
            self.pool.submit(np.take, self.images, idx[lo:hi], 0, out[lo:hi], "clip")
            for lo, hi in zip(bounds[:-1], bounds[1:])
        ]
        for copy in copies:
            copy.result()  # re-raises a thread's exception here
        return out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False)


class Prefetcher:
    """Iterator over the items of ``source``, produced by a daemon thread ``depth`` ahead.

    TensorFlow ops release the GIL, so the thread's gathers overlap the training step. An
    exception in the thread is raised by ``next``; dropping the iterator early (a stop
    signal, an error in the step) stops the thread at its next item.
    """

    _END = object()

    def __init__(self, source: Iterator, depth: int = PREFETCH):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        # The thread must not reference self, or an abandoned iterator is never collected.
        args = (source, self._queue, self._stop)
        threading.Thread(target=_produce, args=args, daemon=True, name="batches").start()

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self):
        item = self._queue.get()
        if item is Prefetcher._END:
            self._queue.put(item)  # stays exhausted
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()

    def __del__(self) -> None:
        self._stop.set()


def _produce(source: Iterator, out: queue.Queue, stop: threading.Event) -> None:
    def put(item) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    try:
        for item in source:
            if not put(item):
                return
        put(Prefetcher._END)
    except Exception as err:  # handed to the consumer, raised there
        put(err)
