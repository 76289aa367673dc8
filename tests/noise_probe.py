"""Test helper: feed a replica fixed batches and write what its noise-scale monitor saw.

Run as ``python tests/noise_probe.py OUT.json --passes P`` on one rank, or under
``horovodrun -np R``: every update takes the same global batch of ``B x R x P`` samples (a
fixed function of the update number), rank r training on its r-th slice in P micro-batches
of B. Rank 0 writes each update's noise sample and a digest of the final weights, so a global
batch split as 2 ranks x b and as 1 rank x 2 accumulated b can be compared.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

import numpy as np
import tensorflow as tf
from helpers import pooled_linear_replica, synthetic_batch

from bigearthnet.core import distributed

UPDATES = 6


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--passes", type=int, default=1)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    distributed.init(threads=1)
    rank, size = distributed.rank(), distributed.size()
    replica = pooled_linear_replica(batch_size=args.batch, passes=args.passes, lr=0.5)
    global_batch = args.batch * size * args.passes
    samples = []
    for update in range(UPDATES):
        images, labels = synthetic_batch(global_batch, seed=update)
        mine = slice(rank * args.batch * args.passes, (rank + 1) * args.batch * args.passes)
        images, labels = images[mine], labels[mine]
        for micro in range(args.passes):
            part = slice(micro * args.batch, (micro + 1) * args.batch)
            result = replica.train_step(
                tf.constant(images[part]),
                tf.constant(labels[part]),
                seed=tf.constant([0, 0], tf.int64),
                stop=False,
                apply=micro == args.passes - 1,
            )
        assert result.noise is not None
        samples.append(vars(result.noise))
    weights = b"".join(np.asarray(w, np.float32).tobytes() for w in replica.model.get_weights())
    if rank == 0:
        with open(args.out, "w") as out:
            json.dump({"samples": samples, "weights": hashlib.sha256(weights).hexdigest()}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
