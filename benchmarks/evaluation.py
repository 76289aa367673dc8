"""P5: parallel evaluation, wall time with 2 ranks against 1 rank.

Side by side, runs interleaved: ``bigearthnet.evaluation.evaluate.evaluate_run`` - what evaluate.py
runs after start-up: read the config and checkpoint, rebuild and restore the ResNet-50,
predict the rank's part of the split, gather, check coverage, the report on rank 0 and the
plots on rank 1, predictions.h5 and the files written by rank 0 - timed between two
barriers, on 1 rank and on 2 ranks (horovodrun, Gloo), one TensorFlow thread per rank. The
whole command's wall time (interpreter, TensorFlow and Horovod start-up included) is
reported beside it. P5-machine, a control: two unrelated 1-rank evaluations at once against
one alone, halved - the best P5 this machine allows with no serial part at all.

The checkpoint is that of the P3 benchmark's train.py run when the work folder has it,
else a 1-epoch ResNet-50 run made here.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import common
from common import Figure

SPLIT = "train"  # the largest split of the 2,000-patch archive (1,200 patches)
BATCH = 32


def trained_run(work: Path) -> Path:
    """A ResNet-50 run with a checkpoint: P3's, or one trained here for one epoch."""
    for run in (work / "p3-default-0", work / "p5-run"):
        if (run / "checkpoints" / "best.json").is_file():
            return run
    run = work / "p5-run"
    common.train_run(common.train_shards(work), run, 1, ["--epochs", "1"], "train.py for P5")
    return run


def evaluate(run: Path, data: Path, out: Path, ranks: int, split: str) -> dict:
    argv = [str(Path(__file__)), "--worker", "--run", str(run), "--data", str(data),
            "--out", str(out), "--split", split]  # fmt: skip
    result = common.launch(ranks, argv).check(f"evaluation on {ranks} rank(s)")
    line = [x for x in result.stdout.splitlines() if '{"seconds"' in x][-1]  # rank 0's
    timing = json.loads(line[line.index("{") :])  # horovodrun prefixes "[0]<stdout>:"
    return {"seconds": timing["seconds"], "command_s": result.wall_s}


def worker(run: Path, data: Path, out: Path, split: str) -> None:
    """In each rank: evaluate_run between two barriers; rank 0 prints the seconds."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from bigearthnet.core import distributed
    from bigearthnet.evaluation import evaluate as evaluation
    from bigearthnet.evaluation.options import EvalOptions

    distributed.init(threads=1)
    distributed.barrier()
    start = time.perf_counter()
    opts = EvalOptions(run_dir=Path(run), data=Path(data), split=split, out=Path(out),
                       batch_size=BATCH)  # fmt: skip
    evaluation.evaluate_run(opts)
    distributed.barrier()
    if distributed.is_root():
        print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)


def run(args, work: Path) -> list[Figure]:
    data = common.eval_shards(work)
    trained = trained_run(work)
    results: dict[int, list[dict]] = {1: [], 2: []}

    def ranks(n: int):
        def measure(rep: int) -> float:
            results[n].append(evaluate(trained, data, work / f"p5-eval-{n}-{rep}", n, args.split))
            return results[n][-1]["seconds"]

        return measure

    def independent(rep: int) -> float:
        """Control: two unrelated 1-rank evaluations of the whole split at once."""
        runs = common.at_once(
            lambda i: evaluate(trained, data, work / f"p5-solo{i}-{rep}", 1, args.split)
        )
        return max(r["seconds"] for r in runs)

    common.say(f"P5: evaluate_run of ResNet-50 on the {args.split} split, 1 vs 2 ranks")
    variants = {"1 rank": ranks(1), "2 ranks": ranks(2), "2 x 1 rank, independent": independent}
    limit = {"2 x 1 rank, independent": 1}
    times = common.interleave(variants, args.repeats, common.say, limit=limit)
    # Two evaluations at once take c times as long as one alone: with no serial part at
    # all, 2 ranks could at best take c/2 of 1 rank's time on this machine.
    machine = common.paired_ratio(times["2 x 1 rank, independent"], times["1 rank"]) / 2
    command = [common.paired_ratio([r["command_s"] for r in results[2]],
                                   [r["command_s"] for r in results[1]])]  # fmt: skip
    details = {"seconds": times, "runs": results, "split": args.split}
    return [
        Figure("P5", "evaluation wall time, 2 ranks / 1 rank (evaluate_run)",
               common.paired_ratio(times["2 ranks"], times["1 rank"]), "x", "<=", 0.6,
               f"the machine: two evaluations at once took {2 * machine:.2f}x the time of "
               "one (P5-machine); serial: model build + restore on each rank (~3 s), "
               "rank 0's report while rank 1 draws the plots", details),
        Figure("P5-cmd", "evaluate command wall time incl. start-up, 2 ranks / 1 rank",
               command[0], "x", limited_by="interpreter + TensorFlow start-up on both ranks"),
        Figure("P5-machine", "control: 2 independent 1-rank evaluations at once / 1 alone, / 2",
               machine, "x", limited_by="both vCPUs predicting at once: shared memory "
               "bandwidth and caches, co-tenants; 1 repetition"),
    ]  # fmt: skip


def build_parser():
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--split", default=SPLIT, help="split of the 2,000-patch shards")
    parser.add_argument("--worker", action="store_true", help="(internal) one rank's work")
    parser.add_argument("--run", type=Path, help="(internal) the run to evaluate")
    parser.add_argument("--data", type=Path, help="(internal) the shards to evaluate on")
    parser.add_argument("--out", type=Path, help="(internal) the report folder")
    return parser


if __name__ == "__main__":
    if "--worker" in sys.argv:
        cli = build_parser().parse_args()
        worker(cli.run, cli.data, cli.out, cli.split)
        raise SystemExit(0)
    raise SystemExit(common.run_cli(build_parser(), run))
