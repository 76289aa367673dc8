"""Train a multi-label land-cover classifier on preprocessed BigEarthNet shards.

One process per GPU (or per CPU socket), started by any Horovod launcher::

    python train.py --data shards/ --run-dir runs/r50             # 1 process
    horovodrun -np 8 -H n1:4,n2:4 python train.py --data ...      # Gloo or MPI
    srun --mpi=pmix python train.py --data ...                    # Slurm, MPI-built Horovod

Options: defaults in code (bigearthnet/config.py), then ``--config FILE.yaml``, then flags.
The resolved options are saved as RUN/config.yaml; rerunning with the same --run-dir
resumes from RUN/checkpoints. Exit codes: 0 done, 1 training failed (e.g. non-finite
loss), 2 bad input or options (nothing trained), 3 stopped by SIGUSR1/SIGTERM after
checkpointing mid-epoch (a batch script requeues; the rerun continues at that step).
"""

from __future__ import annotations

import argparse
import os
import sys

from bigearthnet.config import (
    ConfigError,
    TrainConfig,
    add_config_arguments,
    default_threads,
    resolve,
)
from bigearthnet.signals import STOP, remember_warnings
from bigearthnet.util import OneLineParser

EXIT_REQUEUE = 3  # stopped by SIGUSR1/SIGTERM after checkpointing: resubmit to continue


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="train.py",
        description="Data-parallel (Horovod) training of a multi-label classifier on "
        "BigEarthNet HDF5 shards made by bigearthnet-preprocess.",
        epilog="Recipes: configs/*.yaml. Outputs in RUN/: config.yaml, checkpoints/, "
        "history.csv, efficiency.json, tensorboard/, eval-test/.",
    )
    add_config_arguments(parser, TrainConfig)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = resolve(args, TrainConfig)
    except ConfigError as err:
        print(f"train.py: error: {err}", file=sys.stderr)
        return 2
    # TensorFlow's C++ INFO lines (oneDNN, CPU features) drown the rank logs; keep warnings.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    # From here on SIGUSR1/SIGTERM mean "checkpoint and stop" (requeue), never a crash:
    # installed before TensorFlow is imported, which takes seconds on every rank. Elastic
    # runs take SIGUSR1 alone: horovodrun ends the workers it drops with SIGTERM.
    with STOP.handling(warning_only=cfg.elastic):
        return _run(cfg)


def _run(cfg: TrainConfig) -> int:
    from bigearthnet import distributed, training
    from bigearthnet.checkpoints import CheckpointError
    from bigearthnet.shards import ShardError

    try:
        distributed.init(
            threads=cfg.threads or default_threads(),
            fusion_threshold_mb=cfg.fusion_threshold_mb,
            cycle_time_ms=cfg.cycle_time_ms,
            timeline=cfg.timeline,
            elastic=cfg.elastic,
        )
    except distributed.DistributedError as err:
        print(f"train.py: error: {err}", file=sys.stderr)
        return 2
    try:
        training.train(cfg)
    except (ConfigError, ShardError, CheckpointError, distributed.DistributedError) as err:
        distributed.log.error("error: %s", err)
        return 2
    except ValueError as err:  # e.g. an unknown model name from the registry
        distributed.log.error("error: %s", err)
        return 2
    except training.TrainingError as err:
        distributed.log.error("training stopped: %s", err)
        return 1
    except training.RequeueRequested as err:
        distributed.log.warning("%s (exit %d: requeue me)", err, EXIT_REQUEUE)
        return EXIT_REQUEUE
    return 0


def cli(argv: list[str] | None = None) -> int:
    """``python train.py`` and the ``bigearthnet-train`` command: :func:`main` in a process
    of its own, where a SIGUSR1 outside the training's handlers never kills (start-up: it
    stops training at the first step; after training stopped: ignored)."""
    remember_warnings()
    return main(argv)


if __name__ == "__main__":
    sys.exit(cli())
