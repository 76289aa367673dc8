"""Where a rank's images live for the run (``--cache``), decided once at start-up and logged
with the reason.

An H100 trains this ResNet-50 at ~12,500 samples/s (measured elsewhere with PyTorch; see
``benchmarks/README.md``), 4.3 GB/s of uint16 images per GPU. Two ways keep it fed:

* **device cache** - the rank's uint16 part is placed in accelerator memory once; each batch
  is gathered there (and converted, normalised and augmented by the step, also there), so
  the host moves nothing per step. BigEarthNet v1 is 204 GB: 25 GB per GPU at 8 GPUs.
* **memory cache** - the part stays in host RAM; the loader's threads copy a batch's rows
  into an aligned buffer (:mod:`bigearthnet.data.loader`).
* **none** - streamed from the shards every epoch.

Without an accelerator the "device" is the CPU, so the device path runs - and is tested -
on this machine too. The memory cache is refused at start-up where it would not fit the
node (better a clear error than the OOM killer).
"""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass

import numpy as np
import psutil
import tensorflow as tf

from bigearthnet.core import distributed
from bigearthnet.core.errors import ConfigError
from bigearthnet.formats.shard_maps import map_shape
from bigearthnet.formats.shards import image_shape

log = distributed.log

DEVICE_SHARE = 0.7  # of the accelerator's free memory the cache may take: the rest is the


def sample_bytes(channels: int, maps: bool = False) -> int:
    """One uint16 image of ``channels`` channels: 345,600 bytes for the 12 S2 bands; with
    ``maps`` (the dense head trains) its uint8 reference map and has_map flag too: 14,401
    bytes more."""
    image = int(np.prod(image_shape(channels))) * 2
    return image + (int(np.prod(map_shape())) + 1 if maps else 0)


CACHE_SHARE = 0.8  # of the node's available memory that the image caches may take


@dataclass(frozen=True)
class CacheChoice:
    """Where the images of this rank live for the run, and why (logged at start-up)."""

    kind: str  # "device", "memory" or "none"
    device: str  # TensorFlow device the batches are gathered on
    reason: str
    fell_back: bool = False  # --cache device did not fit: worth a warning


def choose_rank_cache(
    requested: str, *, samples_per_rank: int, channels: int, maps: bool = False
) -> CacheChoice:
    """Where this rank's images (and ``maps``: reference maps) live for the run
    (``--cache``), logged with the reason; ConfigError when the cache asked for cannot be
    had."""
    device = accelerator()
    choice = choose_cache(
        requested,
        part_bytes=samples_per_rank * sample_bytes(channels, maps),
        host_problem=cache_problem(
            samples_per_rank, distributed.local_size(), memory_available(), channels, maps
        ),
        device=device,
        device_free=accelerator_free_bytes() if device else None,
    )
    level = logging.WARNING if choice.fell_back else logging.INFO
    log.log(level, "cache: %s on %s (%s)", choice.kind, choice.device, choice.reason)
    return choice


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


def memory_available() -> int | None:
    """Memory the node can still give without swapping (the kernel's MemAvailable), in bytes;
    None where psutil cannot tell."""
    try:
        return int(psutil.virtual_memory().available)
    except (OSError, RuntimeError, AttributeError):
        return None


def cache_problem(
    samples_per_rank: int,
    ranks_on_node: int,
    available: int | None,
    channels: int,
    maps: bool = False,
) -> str | None:
    """Why ``--cache memory`` would not fit on this node, or None when it fits (or the
    available memory is unknown): better a clear error at start-up than the OOM killer."""
    image_bytes = sample_bytes(channels, maps)
    need = samples_per_rank * image_bytes * ranks_on_node
    if available is None or need <= CACHE_SHARE * available:
        return None
    gb = 1024**3
    return (
        f"--cache memory needs {need / gb:.1f} GB on this node ({ranks_on_node} rank(s) x "
        f"{samples_per_rank:,} {'patches with maps' if maps else 'images'} of "
        f"{image_bytes / 1e6:.2f} MB) but only "
        f"{available / gb:.1f} GB are available; use --cache none (streaming from the "
        "shards), more nodes, or fewer ranks per node"
    )


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
