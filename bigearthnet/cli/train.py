"""``train.py`` / ``bigearthnet-train``: data-parallel training on preprocessed shards.

One process per GPU (or per CPU socket), started by any Horovod launcher::

    python train.py --data shards/ --run-dir runs/r50             # 1 process
    horovodrun -np 8 -H n1:4,n2:4 python train.py --data ...      # Gloo or MPI
    srun --mpi=pmix python train.py --data ...                    # Slurm, MPI-built Horovod

Options: defaults in code (bigearthnet/core/options.py), then each ``--config FILE.yaml``,
then flags; ``--print-config`` prints what that resolves to, as YAML a ``--config`` takes.
The resolved options are saved as RUN/config.yaml; rerunning with the same --run-dir
resumes from RUN/checkpoints. Exit codes: 0 done, 1 training failed (e.g. non-finite
loss), 2 bad input or options (nothing trained), 3 stopped by SIGUSR1/SIGTERM after
checkpointing (a batch script requeues; the rerun continues at that step).

This driver parses, sets up Horovod, and decides: fixed-size or elastic training, then (both)
the final evaluation of the best checkpoint on the test split.
"""

from __future__ import annotations

import argparse
import os
import sys

from bigearthnet.cli.common import Parser, run
from bigearthnet.cli.report import write_quietly
from bigearthnet.core.config import (
    TrainConfig,
    add_arguments,
    config_yaml,
    default_threads,
    resolve,
)
from bigearthnet.core.errors import EXIT_REQUEUE, ConfigError
from bigearthnet.core.signals import STOP, ignore_warnings_now, remember_warnings

PROG = "train.py"
__all__ = ["EXIT_REQUEUE", "build_parser", "cli", "main"]


def build_parser() -> Parser:
    parser = Parser(
        prog=PROG,
        usage="%(prog)s --data SHARDS --run-dir RUN [--config FILE.yaml] [--print-config] "
        "[options]",
        description="Data-parallel (Horovod) training of a multi-label classifier on "
        "BigEarthNet HDF5 shards made by bigearthnet-preprocess.",
        epilog="Recipes: configs/*.yaml. Outputs in RUN/: config.yaml, checkpoints/, "
        "history.csv, efficiency.json, tensorboard/, eval-test/. Exit codes: 0 done, "
        "1 failed, 2 bad input, 3 checkpointed after a stop request (requeue).",
    )
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    return run(build_parser(), lambda args: _train(args, ["train.py", *given]), argv)


def cli(argv: list[str] | None = None) -> int:
    """``python train.py`` and the ``bigearthnet-train`` command: :func:`main` in a process
    of its own, where a SIGUSR1 outside the training's handlers never kills (start-up: it
    stops training at the first step; after training stopped: ignored)."""
    remember_warnings()
    try:
        return main(argv)
    finally:
        ignore_warnings_now()


def check_model(cfg: TrainConfig) -> None:
    """ConfigError unless ``--model`` names a model of the registry (which loads no
    TensorFlow to answer: a typo costs a second, not a start-up of every rank)."""
    from bigearthnet import models

    if cfg.model not in models.MODELS:
        raise ConfigError(
            f"--model {cfg.model!r} is not in the model registry; choose one of "
            f"{', '.join(models.available_models())}"
        )


def check_inputs(cfg: TrainConfig) -> TrainConfig:
    """What every rank reads before TensorFlow loads (a mistake answers at once, not after
    the start-up of every rank): the model in the registry, the shards' manifest (and
    whether they hold the reference maps a --pixel-loss-weight needs), and a --run-dir
    train.py may write into. Returns ``cfg`` with the pixel-loss weight resolved."""
    from bigearthnet.core.dense_head import with_pixel_head
    from bigearthnet.formats.manifest import read_manifest
    from bigearthnet.formats.run_folder import check_training_folder

    check_model(cfg)
    cfg = with_pixel_head(cfg, read_manifest(cfg.data).map_count("train"))
    check_training_folder(cfg.run_dir)
    return cfg


def _train(args: argparse.Namespace, command: list[str]) -> int:
    cfg = resolve(args, TrainConfig)
    if args.print_config:  # the options only: the data and the run folder may be elsewhere
        check_model(cfg)
        sys.stdout.write(config_yaml(cfg))
        return 0
    cfg = check_inputs(cfg)
    # TensorFlow's C++ INFO lines (oneDNN, CPU features) drown the rank logs; keep warnings.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    # From here on SIGUSR1/SIGTERM mean "checkpoint and stop" (requeue), never a crash:
    # installed before TensorFlow is imported, which takes seconds on every rank. Elastic
    # runs take SIGUSR1 alone: horovodrun ends the workers it drops with SIGTERM.
    with STOP.handling(warning_only=cfg.elastic):
        from bigearthnet.core import distributed

        distributed.init(
            threads=cfg.threads or default_threads(),
            fusion_threshold_mb=cfg.fusion_threshold_mb,
            cycle_time_ms=cfg.cycle_time_ms,
            timeline=cfg.timeline,
            elastic=cfg.elastic,
        )
        if cfg.elastic:
            from bigearthnet.formats.manifest import read_manifest
            from bigearthnet.training.elastic import ElasticTrainer

            # The evaluation runs inside the elastic function, in whatever world trained
            # last: a worker lost during it resets the world, which evaluates again.
            test_count = read_manifest(cfg.data).count("test")
            ElasticTrainer(cfg, command, then=lambda: _evaluate_test(cfg, test_count)).run()
        else:
            _train_then_evaluate(cfg, command)
        write_quietly(cfg.run_dir)
    return 0


def _train_then_evaluate(cfg: TrainConfig, command: list[str]) -> None:
    from bigearthnet.training.trainer import Trainer

    trainer = Trainer(cfg, command)
    trainer.run()
    test_count = trainer.manifest.count("test")
    del trainer  # free this rank's cached training data before the test split is loaded
    _evaluate_test(cfg, test_count)


def _evaluate_test(cfg: TrainConfig, test_count: int) -> None:
    """Collective: the best checkpoint on the test split (fixed-size and elastic runs alike),
    unless --no-eval-test or the data has no test split."""
    from bigearthnet.core import distributed

    if not cfg.eval_test:
        return
    if not test_count:
        distributed.log.warning("no test split in %s: skipping the final evaluation", cfg.data)
        return
    from pathlib import Path

    from bigearthnet.evaluation.evaluate import evaluate_run
    from bigearthnet.evaluation.options import EvalOptions

    # Every rank scores its part of the test split with the best checkpoint. A warning
    # (also one left from the last epoch) stops it with exit 3: the job may not live to
    # its end, and the rerun, with every epoch done, only evaluates.
    opts = EvalOptions(run_dir=Path(cfg.run_dir), data=Path(cfg.data), split="test")
    evaluate_run(opts, stop=lambda: STOP.requested)


if __name__ == "__main__":
    sys.exit(cli())
