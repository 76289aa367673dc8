"""Test helper: the dense head's loss over ranks. Run as ``python tests/pixel_probe.py
OUT.json`` (one rank, the whole batch) or under ``horovodrun -np 2`` (each rank half of it).

Every update takes the same global batch of 8 small images with reference maps, a fixed
function of the update: rank r trains on its r-th half, whose rows carry very different
numbers of labelled pixels (rank 1's are mostly rows without a map). Rank 0 writes each
update's loss, the final weights and, before training, every rank's pixel loss sum and
labelled pixels, so that 2 ranks x 4 can be compared with 1 rank x 8.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import tensorflow as tf
from helpers import pooled_linear_replica, synthetic_batch

from bigearthnet import models
from bigearthnet.core import distributed
from bigearthnet.core.constants import NO_LABEL
from bigearthnet.data.augment import PixelTargets, labelled_maps
from bigearthnet.training.losses import pixel_loss_sum

UPDATES, GLOBAL_BATCH = 4, 8


def global_maps(update: int) -> tuple[np.ndarray, np.ndarray]:
    """(maps, has_map) of the update's global batch: the second half mostly without maps."""
    rng = np.random.default_rng(100 + update)
    maps = rng.integers(0, models.PIXEL_CLASSES, (GLOBAL_BATCH, 8, 8)).astype(np.uint8)
    maps[rng.random(maps.shape) < 0.3] = NO_LABEL
    has_map = np.array([1, 1, 1, 1, 0, 1, 0, 0], np.uint8)
    maps[has_map == 0] = NO_LABEL
    return maps, has_map


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    args = parser.parse_args()
    distributed.init(threads=1)
    rank, size = distributed.rank(), distributed.size()
    per_rank = GLOBAL_BATCH // size
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    replica = pooled_linear_replica(batch_size=per_rank, passes=1, lr=0.5, pixel_loss_weight=1.0)
    images0, _ = synthetic_batch(GLOBAL_BATCH, seed=0)
    maps0, has_map0 = global_maps(0)
    x = (images0[mine].astype(np.float32) - 1000.0) / 300.0  # the replica's normalisation
    pixels = models.split_outputs(replica.model(x))[1]
    targets = PixelTargets(labelled_maps(maps0[mine], has_map0[mine]))
    parts = [float(pixel_loss_sum(targets, pixels)), float(targets.weight_sum())]
    parts = distributed.allgather(np.array([parts]), name="pixel_parts").tolist()
    losses = []
    for update in range(UPDATES):
        images, labels = synthetic_batch(GLOBAL_BATCH, seed=update)
        maps, has_map = global_maps(update)
        result = replica.train_step(
            tf.constant(images[mine]),
            tf.constant(labels[mine]),
            seed=tf.constant([0, 0], tf.int64),
            stop=False,
            maps=tf.constant(maps[mine]),
            has_map=tf.constant(has_map[mine]),
        )
        losses.append(result.loss)
    weights = [np.asarray(w, np.float64).ravel().tolist() for w in replica.model.get_weights()]
    if rank == 0:
        with open(args.out, "w") as out:
            json.dump({"losses": losses, "weights": weights, "parts": parts}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
