"""P2: the training input pipeline's samples/s per process against the memory bound.

Side by side in one process, epochs interleaved, no model:

* the pipeline exactly as train.py builds it: ``RankData(...).dataset(steps, epoch, seed,
  shuffle=True)`` (shuffled uint16 batches of the rank's part, prefetched tensors);
* the memory bound: the same batches gathered with numpy from the warm in-memory array
  into one reused buffer (``np.take(..., out=buf)``), i.e. one copy of the bytes, nothing else.

Knobs measured on the same data: ``--cache none`` (streaming from the shards every epoch)
and normalisation on the host (float32 batches out of the pipeline, twice the bytes) instead
of inside the training step.

P7, the loader's supply (#13): the same pipeline with ``--loader-threads 2`` and with
``--cache device`` (on this CPU the device is the CPU: ``tf.gather`` from the cache tensor),
each over the same single-thread memory bound; the per-thread rate in the details. Beside
them in ``benchmarks/README.md``: what one H100 consumes (measured elsewhere).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import common
import numpy as np
from common import Figure

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
BATCH = 64
EPOCHS = 3  # per measurement


def pipeline_rate(part, steps: int, rep: int, host_normalize=None) -> float:
    """Samples/s over ``EPOCHS`` epochs of the train.py pipeline (tensors materialised)."""
    start, samples = time.perf_counter(), 0
    for epoch in range(rep * EPOCHS, (rep + 1) * EPOCHS):
        for images, *_ in part.dataset(steps, epoch=epoch, seed=0, shuffle=True):
            if host_normalize is not None:
                images = host_normalize(images.numpy())
            samples += int(images.shape[0])
    return samples / (time.perf_counter() - start)


def bound_rate(part, steps: int, rep: int, buffer: np.ndarray) -> float:
    """Samples/s of numpy gathering the same shuffled batches into a reused buffer."""
    from bigearthnet.data.partition import epoch_order, split_batches

    images = part._images  # the warm cache the pipeline gathers from
    start, samples = time.perf_counter(), 0
    for epoch in range(rep * EPOCHS, (rep + 1) * EPOCHS):
        for idx in split_batches(epoch_order(len(part), 0, epoch, 0, True), steps):
            idx = np.sort(idx)
            # mode="clip": np.take buffers its output under the default mode="raise"
            np.take(images, idx, axis=0, out=buffer[: len(idx)], mode="clip")
            samples += len(idx)
    return samples / (time.perf_counter() - start)


def run(args, work: Path) -> list[Figure]:
    from bigearthnet.core.batch import BatchPlan
    from bigearthnet.data.normalization import band_stats
    from bigearthnet.data.rank_data import RankData
    from bigearthnet.formats.manifest import read_manifest

    data = common.eval_shards(work)
    manifest = read_manifest(data)

    def part(cache: str, threads: int = 1) -> RankData:
        return RankData(
            data, manifest, "train", labels=19, cache=cache, threads=threads, verify=False
        )

    memory, streaming = part("memory"), part("none")
    two_threads, on_device = part("memory", threads=2), part("device")
    steps = BatchPlan(args.batch_size).steps(memory.total)
    buffer = np.empty((args.batch_size, *manifest.image_shape), dtype=np.uint16)
    mean, std = band_stats(manifest)

    def host_normalize(images: np.ndarray) -> np.ndarray:
        return (images.astype(np.float32) - mean) / std

    common.say(f"P2: {len(memory)} samples, batch {args.batch_size}, {args.repeats} epochs each")
    rates = common.interleave(
        {
            "pipeline": lambda ep: pipeline_rate(memory, steps, ep),
            "bound": lambda ep: bound_rate(memory, steps, ep, buffer),
            "cache none": lambda ep: pipeline_rate(streaming, steps, ep),
            "host normalize": lambda ep: pipeline_rate(memory, steps, ep, host_normalize),
            "2 threads": lambda ep: pipeline_rate(two_threads, steps, ep),
            "device cache": lambda ep: pipeline_rate(on_device, steps, ep),
        },
        args.repeats,
        common.say,
        warmup=True,
    )
    details = {k: v for k, v in rates.items()} | {"batch": args.batch_size, "samples": len(memory)}
    gb_s = common.median(rates["bound"]) * memory._images[0].nbytes / 1e9
    return [*_p2(rates, details, gb_s), *_p7(rates, details)]


def _p2(rates: dict, details: dict, gb_s: float) -> list[Figure]:
    return [
        Figure(
            "P2",
            "input pipeline samples/s per process / numpy memory bound",
            common.paired_ratio(rates["pipeline"], rates["bound"]),
            "x",
            ">=",
            0.5,
            f"one gather copy per batch (bound {gb_s:.1f} GB/s here) + thread hand-off",
            details,
        ),
        common.knob_figure(
            "K-cache",
            "knob --cache none (streaming) / memory: pipeline samples/s",
            rates["cache none"],
            rates["pipeline"],
            "HDF5 reads of 16-row chunks + per-row assembly in Python",
        ),
        common.knob_figure(
            "K-norm",
            "knob normalise on host (float32 out) / in the step: pipeline samples/s",
            rates["host normalize"],
            rates["pipeline"],
            "float conversion on the host, 2x the bytes to move",
        ),
    ]


def _p7(rates: dict, details: dict) -> list[Figure]:
    per_thread = {
        "1 thread": common.median(rates["pipeline"]),
        "2 threads, per thread": common.median(rates["2 threads"]) / 2,
    }
    return [
        Figure(
            "P7-1t",
            "loader supply, memory cache, 1 thread / numpy memory bound (1 thread)",
            common.paired_ratio(rates["pipeline"], rates["bound"]),
            limited_by="= P2: one row copy per sample into a fresh aligned buffer",
            details=details,
        ),
        Figure(
            "P7-2t",
            "loader supply, memory cache, --loader-threads 2 / numpy memory bound (1 thread)",
            common.paired_ratio(rates["2 threads"], rates["bound"]),
            limited_by="2 vCPUs shared with the consumer thread and co-tenants",
            details={"samples_per_s": per_thread},
        ),
        Figure(
            "P7-dev",
            "loader supply, --cache device (CPU device here) / numpy memory bound (1 thread)",
            common.paired_ratio(rates["device cache"], rates["bound"]),
            limited_by="tf.gather on the CPU device; on a GPU the gather runs in device memory",
        ),
    ]


def build_parser():
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=BATCH, help="batch size per rank")
    parser.set_defaults(repeats=5)
    return parser


if __name__ == "__main__":
    raise SystemExit(common.run_cli(build_parser(), run))
