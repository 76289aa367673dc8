"""P3-dense-step: the dense head's cost per training step, ResNet-50, in one process.

Two replicas of the training step (``training.replica.Replica``, what train.py runs),
ResNet-50, batch 8, SGD, one TensorFlow thread: one without the dense head
(``--pixel-loss-weight 0``) and one with it (0.1, maps with 19 classes in every pixel).
After two untimed steps each (tracing, allocations), their steps alternate (A B, B A, ...)
on the same uint16 batch, so that a slow phase of a shared machine hits both alike; the
figure is the median over the pairs of (step time without / with the head), i.e. training
samples/s with the head over without it. The process-level pair of P3-dense
(``train_throughput.py --knobs dense``) includes the input pipeline and the epoch's ends, but
on a loaded machine its two runs, minutes apart, see different machines.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import common
from common import Figure

BATCH = 8
STEPS = 24  # timed pairs
WEIGHT = 0.1  # the default where the shards hold maps (the cost does not depend on it)


def run(args, work: Path) -> list[Figure]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    from bigearthnet.core import constants, distributed
    from bigearthnet.core.config import TrainConfig
    from bigearthnet.formats.model_inputs import ModelInputs
    from bigearthnet.training.replica import Replica
    from bigearthnet.training.trainer import make_schedule

    distributed.init(threads=1)
    n = len(constants.BANDS)
    inputs = ModelInputs(constants.BANDS, (1000.0,) * n, (300.0,) * n, (1.0,) * n, (0.0,) * n,
                         "bilinear", constants.CLASSES_19)  # fmt: skip
    rng = np.random.default_rng(0)
    images = tf.constant(rng.integers(0, 3000, (BATCH, 120, 120, n), dtype=np.uint16))
    labels = tf.constant(rng.integers(0, 2, (BATCH, 19), dtype=np.uint8))
    maps = {"maps": tf.constant(rng.integers(0, 19, (BATCH, 120, 120), dtype=np.uint8)),
            "has_map": tf.constant(np.ones(BATCH, np.uint8))}  # fmt: skip
    replicas = {}
    for weight in (0.0, WEIGHT):
        cfg = TrainConfig(data=str(work), run_dir=str(work), model="resnet50", epochs=1,
                          batch_size=BATCH, optimizer="sgd", lr=0.001, threads=1,
                          pixel_loss_weight=weight)  # fmt: skip
        schedule = make_schedule(cfg, world_size=1, updates_per_epoch=1)
        replicas[weight] = Replica(cfg, inputs=inputs, schedule=schedule)

    def step(weight: float, i: int) -> float:
        start = time.perf_counter()
        replicas[weight].train_step(images, labels, seed=tf.constant([1, i], tf.int64),
                                    stop=False, **(maps if weight else {}))  # fmt: skip
        return time.perf_counter() - start

    for weight in replicas:
        step(weight, 0), step(weight, 1)
    times: dict[float, list[float]] = {weight: [] for weight in replicas}
    for i in range(args.repeats * STEPS // 2):
        for weight in (0.0, WEIGHT) if i % 2 == 0 else (WEIGHT, 0.0):
            times[weight].append(step(weight, i + 2))
    common.say(f"P3-dense-step: median step {np.median(times[0.0]):.3f} s without the head, "
               f"{np.median(times[WEIGHT]):.3f} s with it")  # fmt: skip
    return [
        Figure(
            "P3-dense-step",
            f"training samples/s with the dense head / without it, ResNet-50, batch {BATCH}, "
            "1 thread, the replica's step in one process, steps alternated",
            common.paired_ratio(times[0.0], times[WEIGHT]),
            "x",
            ">=",
            0.8,
            "the decoder (+1.2 % parameters, +4.6 % forward FLOPs) and the per-pixel softmax "
            "cross-entropy and bilinear resize over 120 x 120 x 19 values, forward and back: "
            "memory-bound work the FLOPs do not show",
            {"without (s)": times[0.0], "with (s)": times[WEIGHT]},
        )
    ]


if __name__ == "__main__":
    raise SystemExit(common.run_cli(common.base_parser(__doc__.splitlines()[0]), run))
