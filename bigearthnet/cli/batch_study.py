"""``bigearthnet-batch-study``: the same recipe at several global batch sizes, steps to a
target validation micro-F1 at each; ``study.csv`` and a log-log plot answer "up to which
batch size can we scale?" (see :mod:`bigearthnet.scaling.batch_study`).

    bigearthnet-batch-study --data SHARDS --out STUDY --batches 64,128,256,512,1024 \\
        --target-f1 0.7 --optimizer lamb --base-lr 0.002 --base-batch 256 --rule sqrt --ranks 2

On one machine the points run under horovodrun; inside a Slurm allocation under srun
(jobs/batch_study.sbatch). Rerunning the same command resumes unfinished points.
"""

from __future__ import annotations

import argparse
import sys

from bigearthnet.cli.common import Parser, run, study_parser, study_settings
from bigearthnet.core.errors import InputError
from bigearthnet.scaling.study_outputs import StudySettings

PROG = "bigearthnet-batch-study"
OWNED = ("--batch-size", "--lr", "--data", "--run-dir")  # the study sets them for each point


def build_parser() -> Parser:
    return study_parser(PROG, __doc__.split("\n\n")[0], StudySettings)


def _handle(args: argparse.Namespace) -> int:
    from bigearthnet.scaling.batch_study import run_study

    settings = study_settings(StudySettings, args, OWNED)
    results = run_study(settings, log=lambda line: print(line, file=sys.stderr, flush=True))
    if not any(r.steps_to_target is not None and not r.diverged for r in results):
        raise InputError(
            f"{settings.out}: no batch size reached val micro-F1 {settings.target_f1} within "
            "its budget (study.html says what each reached): lower --target-f1 or raise --epochs"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)


if __name__ == "__main__":
    sys.exit(main())
