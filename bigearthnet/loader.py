"""Feeding the step: where a rank's images live (the cache choice) and how a batch is gathered.

An H100 trains this ResNet-50 at ~12,500 samples/s (measured elsewhere with PyTorch; see
``benchmarks/README.md``), 4.3 GB/s of uint16 images per GPU. Two ways keep it fed:

* **device cache** - the rank's uint16 part is placed in accelerator memory once; each batch
  is gathered there (and converted, normalised and augmented by the step, also there), so
  the host moves nothing per step. BigEarthNet v1 is 204 GB: 25 GB per GPU at 8 GPUs.
* **memory cache** - the part stays in host RAM; ``threads`` host threads copy a batch's
  rows into a fresh 64-byte aligned buffer that TensorFlow views without a copy. Row copies
  (``np.take`` into a buffer, which releases the GIL) are what scales with threads; fancy
  indexing into a new array was 4x slower in the same measurement.

Without an accelerator the "device" is the CPU, so the device path runs - and is tested -
on this machine too.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from bigearthnet.errors import ConfigError

DEVICE_SHARE = 0.7  # of the accelerator's free memory the cache may take: the rest is the
# model's (ResNet-50 at batch 512 in bf16 needs a few GB of activations and workspace)
MAX_DEFAULT_THREADS = 8  # beyond this one node's memory bandwidth, not threads, limits


@dataclass(frozen=True)
class CacheChoice:
    """Where the images of this rank live for the run, and why (logged at start-up)."""

    kind: str  # "device", "memory" or "none"
    device: str  # TensorFlow device the batches are gathered on
    reason: str
    fell_back: bool = False  # --cache device did not fit: worth a warning


def accelerator() -> str | None:
    """This rank's accelerator (Horovod pins one GPU per rank), or None."""
    gpus = tf.config.list_logical_devices("GPU")
    return gpus[0].name if gpus else None


def accelerator_free_bytes() -> int | None:
    """Free memory of this rank's GPU as the driver reports it (nvidia-smi), None if unknown.
    TensorFlow itself only reports what it has allocated, not what the device has left."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits", "-i"]
            + [visible],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
        return int(out.split()[0]) * 1024**2
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def choose_cache(
    requested: str,
    *,
    part_bytes: int,
    host_problem: str | None,
    device: str | None,
    device_free: int | None,
) -> CacheChoice:
    """Resolve ``--cache`` for a rank whose images take ``part_bytes``.

    ``host_problem`` says why the memory cache would not fit on this node (None: it fits);
    ``device``/``device_free`` describe the accelerator (None: there is none / unknown).
    ``device!`` is ``device`` that fails (ConfigError, exit 2) instead of falling back.
    """
    cpu = "/CPU:0"
    if requested == "none":
        return CacheChoice("none", cpu, "--cache none: read from the shards every epoch")
    if requested in ("auto", "device", "device!"):
        fits, why = _device_fits(part_bytes, device, device_free, host_problem)
        if fits and (device or requested != "auto"):
            return CacheChoice("device", device or cpu, why)
        if requested == "device!":
            raise ConfigError(f"--cache device!: {why}")
        fell_back = requested == "device"
        if fell_back:
            why = f"--cache device {why}; falling back to --cache memory"
        elif not device:
            why = "no accelerator: the images stay in host memory"
    else:
        why, fell_back = "--cache memory", False
    if host_problem:
        raise ConfigError(host_problem)
    return CacheChoice("memory", cpu, why, fell_back=fell_back)


def _device_fits(
    part_bytes: int, device: str | None, free: int | None, host_problem: str | None
) -> tuple[bool, str]:
    gb = 1024**3
    if device is None:  # the CPU is the device: host memory decides
        if host_problem:
            return False, host_problem
        return True, "no accelerator: the device cache lives in host memory (CPU device)"
    if free is None:
        return False, f"free memory of {device} unknown (no nvidia-smi)"
    budget = DEVICE_SHARE * free
    sizes = f"{part_bytes / gb:.1f} GB of images, {free / gb:.1f} GB free on {device}"
    if part_bytes > budget:
        return False, f"does not fit: {sizes} (the cache may take {DEVICE_SHARE:.0%})"
    return True, f"fits: {sizes}"


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
