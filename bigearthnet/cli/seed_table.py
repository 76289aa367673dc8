"""``bigearthnet-seed-table``: the seed study's batch table in miniature - one recipe, the
same epochs at >= 4 global batch sizes spanning >= 32x, with SGD and LAMB; writes
``DIR/seed_table.csv`` and ``DIR/seed_table.html`` (:mod:`bigearthnet.scaling.seed_table`).

    bigearthnet-seed-table --data SHARDS --out DIR --batches 16,64,256,1024 -- --model tiny

On one machine the runs go through horovodrun; inside a Slurm allocation through srun
(jobs/seed_table.sbatch). Rerunning the same command resumes unfinished runs.
"""

from __future__ import annotations

import argparse
import sys

from bigearthnet.cli.common import Parser, run, study_parser, study_settings
from bigearthnet.scaling.seed_table import SeedTableSettings

PROG = "bigearthnet-seed-table"
OWNED = ("--batch-size", "--lr", "--optimizer", "--data", "--run-dir")


def build_parser() -> Parser:
    return study_parser(PROG, __doc__.split("\n\n")[0], SeedTableSettings)


def _handle(args: argparse.Namespace) -> int:
    from bigearthnet.scaling.seed_table import run_seed_table

    settings = study_settings(SeedTableSettings, args, OWNED)
    rows = run_seed_table(settings, log=lambda line: print(line, file=sys.stderr, flush=True))
    for row in rows:
        final = "n/a" if row.final_micro_f1 is None else f"{row.final_micro_f1:.3f}"
        missed = "" if row.reached_target else " (target not reached)"
        print(f"[seed-table] {row.optimizer} batch {row.global_batch}: final micro-F1 {final}, "
              f"best {row.best_micro_f1:.3f}, {row.updates} updates{missed}")  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)


if __name__ == "__main__":
    sys.exit(main())
