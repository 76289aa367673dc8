"""P4 and P6: weak scaling from 1 to 2 ranks, and the data wait of a 2-rank run.

Side by side, runs interleaved: train.py with ResNet-50, the same per-rank batch and steps,
one TensorFlow thread per rank (Horovod's and TensorFlow's threads share the 2 cores), on 1
rank and on 2 ranks (horovodrun, Gloo), as users run it (gradients allreduced as backprop
makes them, overlapping the backward pass).

* P4 = (samples/s of 2 ranks / samples/s of 1 rank) / 2; a run's rate is the median over
  its epochs after the first (the warm-up).
* P6 = data-wait fraction of the step time in the 2-rank run (efficiency.json).
* P4-machine, a control without any communication: two unrelated 1-rank runs at the same
  time against one alone - how far this machine's 2 cores scale by themselves.
* Where the rest goes: one 1-rank and one 2-rank run with ``--comm-timing``, which cuts
  each step in two (gradients, then allreduce + update; no overlap) so that efficiency.json
  splits it into compute and communication (including waiting for the slower rank).

Knobs, each a 2-rank run against the 2-rank default of the same repetition (the first
``--knob-repeats``): one grouped allreduce after the backward pass, fp16 gradient
compression, a small tensor-fusion buffer (4 MB instead of Horovod's default), and 2
backward passes per allreduce.
"""

from __future__ import annotations

from pathlib import Path

import common
from common import Figure

KNOBS = {
    "grouped": ["--grouped-allreduce"],
    "fp16": ["--fp16-allreduce"],
    "fusion": ["--fusion-threshold-mb", "4"],
    "bpps2": ["--backward-passes-per-step", "2"],
}
KNOB_TEXT = {
    "grouped": ("knob --grouped-allreduce / default, 2 ranks", "no overlap with backprop"),
    "fp16": ("knob --fp16-allreduce / default, 2 ranks", "half the bytes; casts cost compute"),
    "fusion": ("knob --fusion-threshold-mb 4 / default, 2 ranks", "more, smaller messages"),
    "bpps2": ("knob --backward-passes-per-step 2 / default, 2 ranks", "half the allreduces"),
}
TIMED = {"1 rank, --comm-timing": ("1rank-timed", 1), "2 ranks, --comm-timing": ("2ranks-timed", 2)}


def run(args, work: Path) -> list[Figure]:
    data = common.train_shards(work)
    results: dict[str, list[dict]] = {}

    batch = ["--batch-size", str(args.batch_size)] if args.batch_size else []

    def variant(name: str, ranks: int, extra: list[str]):
        def measure(rep: int) -> float:
            run_dir = work / f"p4-{name}-{rep}"
            out = common.train_run(data, run_dir, ranks, [*extra, *batch], f"train.py {name}")
            results.setdefault(name, []).append(out)
            return out["samples_per_s"]

        return measure

    def independent(rep: int) -> float:
        """Control: two unrelated 1-rank runs at once - the machine's own 1 -> 2 scaling."""
        runs = common.at_once(
            lambda i: common.train_run(
                data, work / f"p4-solo{i}-{rep}", 1, batch, "train.py control"
            )
        )
        return sum(r["samples_per_s"] for r in runs)

    variants = {
        "1 rank": variant("1rank", 1, []),
        "2 ranks": variant("2ranks", 2, []),
        "2 x 1 rank, independent": independent,
    }
    for label, (name, ranks) in TIMED.items():
        variants[label] = variant(name, ranks, ["--comm-timing"])
    for knob in args.knobs:
        variants[knob] = variant(knob, 2, KNOBS[knob])
    per_rank = args.batch_size or common.TRAIN_BATCH
    common.say(f"P4/P6: ResNet-50, batch {per_rank}/rank, 1 thread/rank, knobs {args.knobs}")
    once = [*args.knobs, "2 x 1 rank, independent", *TIMED]
    limit = {name: args.knob_repeats for name in once}
    rates = common.interleave(variants, args.repeats, common.say, limit=limit)
    return figures(args, rates, results)


def figures(args, rates: dict, results: dict) -> list[Figure]:
    efficiency = common.paired_ratio(rates["2 ranks"], rates["1 rank"]) / 2
    machine = common.paired_ratio(rates["2 x 1 rank, independent"], rates["1 rank"]) / 2
    wait = common.median([r["efficiency"]["data_wait_fraction"] for r in results["2ranks"]])
    reports = [r["efficiency"] for r in results["2ranks-timed"]]
    comm = common.median([r["communication_efficiency"] for r in reports])
    balance = common.median([r["load_balance"] for r in reports])
    one = results["1rank-timed"]
    comm_1 = common.median([r["efficiency"]["communication_efficiency"] for r in one])
    slowdown = common.paired_ratio(
        [compute_per_sample(r) for r in reports],
        [compute_per_sample(r["efficiency"]) for r in one],
    )
    details = {
        "samples_per_s": rates,
        "two_rank_efficiency_reports": reports,
        "one_rank_communication_efficiency": comm_1,
        "compute_per_sample_2_over_1_rank": slowdown,
        "machine_bound": machine,
    }
    limit = (
        f"timed runs, 2 ranks: communication efficiency {comm:.2f} without overlap (1 rank: "
        f"{comm_1:.2f}, the update alone), load balance {balance:.2f}, compute per sample "
        f"{slowdown:.2f}x that of 1 rank (control without communication, P4-machine: "
        f"{machine:.2f})"
    )
    out = [
        Figure(
            "P4",
            "weak scaling 2x1 thread vs 1x1 thread: throughput ratio / 2",
            efficiency,
            "x",
            ">=",
            0.90,
            limit,
            details,
        ),
        Figure(
            "P4-machine",
            "control: 2 independent 1-rank runs at once vs 1 alone: throughput ratio / 2",
            machine,
            "x",
            limited_by="shared core resources of the 2 vCPUs and co-tenants; 1 repetition",
        ),
        Figure(
            "P6",
            "data-wait fraction of step time, 2-rank ResNet-50 run",
            wait,
            "%",
            "<",
            0.05,
            "prefetch thread keeps >= 2 batches ready; only the epoch's first waits",
        ),
    ]
    for knob in args.knobs:
        what, why = KNOB_TEXT[knob]
        out.append(common.knob_figure(f"K-{knob}", what, rates[knob], rates["2 ranks"], why))
    return out


def compute_per_sample(report: dict) -> float:
    """The slowest rank's forward+backward seconds per sample (--comm-timing's split)."""
    slowest = max(report["per_rank"], key=lambda r: r["compute_s"] or 0.0)
    return (slowest["compute_s"] or float("nan")) / max(slowest["samples"], 1)


def build_parser():
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.set_defaults(repeats=3)
    parser.add_argument("--batch-size", type=int, help="per-rank batch (default: the recipe's 8)")
    common.add_knob_arguments(parser, KNOBS, "2-rank knobs")
    return parser


if __name__ == "__main__":
    raise SystemExit(common.run_cli(build_parser(), run))
