"""What following the noise scale saves: one recipe to one validation target, three ways.

* **fixed small** - ``train.py`` on 2 ranks (horovodrun -np 2) for the whole run;
* **fixed large** - the same on 4 ranks;
* **elastic** - an elastic run started on 2 ranks that ``bigearthnet-elastic follow --policy
  gns --local 1 --max-workers 4`` grows and shrinks from the B_simple it measures.

Each stops at ``--target-f1`` (validation micro-F1) and is costed from its history
(:mod:`bigearthnet.scaling.savings`): optimizer steps, training samples and rank-seconds to
the target. McCandlish et al.'s claim to test: the elastic run needs fewer steps than the
fixed small world and fewer samples than the fixed large one. This machine has 2 cores, so 4
ranks are oversubscribed: compare steps and samples; rank-seconds are given for
completeness only. Prints a Markdown table per seed and writes ``malleable.json`` and a
picture (world size, global batch and B_simple against epochs) into ``--out``.

    python benchmarks/malleable.py --out docs/images --seeds 0 1 2   # ~8 minutes here
    python benchmarks/malleable.py --patches 2000 --difficulty realistic --layout v2 \
        --target-f1 0.68 --seeds 0 1 2 --out DIR   # the realistic archive: ~25 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import common
from common import HOROVODRUN, PYTHON, REPO, horovodrun, say, shards, synthetic_archive

from bigearthnet.formats.history import read_history
from bigearthnet.scaling.savings import CostToTarget, compare, cost_to_target

DISCOVER = REPO / "jobs" / "elastic" / "discover_hosts.sh"
FOLLOWER = str(Path(sys.executable).with_name("bigearthnet-elastic"))
RECIPE = [
    *("--model", "tiny", "--optimizer", "adam", "--lr", "0.005", "--warmup-epochs", "0"),
    *("--threads", "1", "--no-progress", "--no-eval-test", "--commit-every", "2"),
]
POLICY = [
    # --min-workers 2: one rank measures no B_simple, and the run's own 2 slots stay anyway.
    *("--policy", "gns", "--local", "1", "--max-workers", "4", "--min-workers", "2"),
    *("--margin", "1"),
    *("--dwell-epochs", "2", "--plateau-epochs", "3", "--plateau-delta", "0.005"),
    *("--poll", "0.5", "--history-timeout", "600"),
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter, allow_abbrev=False
    )
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/ben-malleable"))
    p.add_argument("--out", type=Path, help="folder for malleable.json and malleable.png")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--epochs", type=int, default=30, help="the recipe's epochs (LR schedule)")
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--target-f1", type=float, default=0.88)
    p.add_argument("--patches", type=int, default=800, help="archive size (v1: 60/20/20 split)")
    p.add_argument("--difficulty", choices=("simple", "realistic"), default="simple")
    p.add_argument("--layout", choices=("v1", "v2"), default="v1")
    return p


def common_args(args: argparse.Namespace, data: Path, run: Path, seed: int) -> list[str]:
    return [
        *("--data", str(data), "--run-dir", str(run), "--epochs", str(args.epochs)),
        *("--batch-size", str(args.batch_size), "--target-f1", str(args.target_f1)),
        *("--seed", str(seed), "--no-resume", *RECIPE),
    ]


def fixed(ranks: int, train_args: list[str]) -> None:
    common.run(horovodrun(ranks, ["train.py", *train_args])).check(f"fixed {ranks} ranks")


def elastic(work: Path, run: Path, train_args: list[str]) -> None:
    hosts = work / f"hosts-{run.name}"
    hosts.mkdir(parents=True, exist_ok=True)
    for stale in hosts.glob("*.hosts"):
        stale.unlink()
    (hosts / "start.hosts").write_text("localhost:2\n")
    env = {**os.environ, "ELASTIC_HOSTS_DIR": str(hosts), "TF_CPP_MIN_LOG_LEVEL": "2"}
    cmd = [HOROVODRUN, "-np", "2", "--min-np", "1", "--max-np", "4", "--gloo"]
    cmd += ["--host-discovery-script", str(DISCOVER), "--network-interface", "lo"]
    train = subprocess.Popen(
        [*cmd, PYTHON, "train.py", "--elastic", *train_args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    follow = [FOLLOWER, "--hosts-dir", str(hosts), "follow", "--run-dir", str(run), *POLICY]
    followed = subprocess.run(follow, cwd=REPO, env=env, capture_output=True, text=True)
    if train.wait() != 0 or followed.returncode != 0:
        raise SystemExit(f"elastic run failed: {followed.stderr.strip()}")


def measure(args: argparse.Namespace, data: Path, seed: int) -> list[CostToTarget]:
    work = args.work_dir
    costs = []
    for name, start in (("fixed 2 ranks", 2), ("fixed 4 ranks", 4), ("elastic from 2", 0)):
        run = work / f"seed{seed}-{name.replace(' ', '-')}"
        say(f"seed {seed}: {name}")
        train_args = common_args(args, data, run, seed)
        if start:
            fixed(start, train_args)
        else:
            elastic(work, run, train_args)
        costs.append(cost_to_target(name, read_history(run), args.target_f1))
    return costs


def _most_resized(args: argparse.Namespace) -> int:
    """The seed whose elastic run changed size most often: the picture shows the loop."""

    def changes(seed: int) -> int:
        worlds = [r.world_size for r in read_history(args.work_dir / f"seed{seed}-elastic-from-2")]
        return sum(a != b for a, b in zip(worlds, worlds[1:], strict=False))

    return max(args.seeds, key=changes)


def plot(args: argparse.Namespace, seed: int, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5.5), sharex=True)
    for name, style in (("fixed-2-ranks", ":"), ("fixed-4-ranks", "--"), ("elastic-from-2", "-")):
        rows = read_history(args.work_dir / f"seed{seed}-{name}")
        epochs = [r.epoch for r in rows]
        label = name.replace("-", " ")
        top.step(epochs, [r.world_size for r in rows], style, where="mid", label=label)
        noise = [r.gns_b_simple or float("nan") for r in rows]
        bottom.plot(epochs, noise, style, marker="o", ms=3, label=f"B_simple, {label}")
        if name.startswith("elastic"):
            batch = [r.global_batch or 0 for r in rows]
            bottom.step(epochs, batch, "-", where="mid", color="k", label="global batch, elastic")
    top.set_ylabel("world size (ranks)")
    top.legend(fontsize=8)
    bottom.set_ylabel("samples")
    bottom.set_yscale("log")
    bottom.set_xlabel("epoch")
    bottom.legend(fontsize=8)
    top.set_title(
        f"noise-scale policy vs fixed worlds (seed {seed}), target val micro-F1 {args.target_f1}"
    )
    fig.tight_layout()
    fig.savefig(out / "malleable.png", dpi=110)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    archive = synthetic_archive(
        args.work_dir, args.patches, difficulty=args.difficulty, layout=args.layout
    )
    data = shards(archive, args.work_dir / f"shards-{archive.name}", "--shard-size", "100")
    results = {}
    for seed in args.seeds:
        costs = measure(args, data, seed)
        results[seed] = [asdict(c) for c in costs]
        print(f"\nseed {seed}, target validation micro-F1 {args.target_f1}:")
        print(compare(costs), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        recipe = {k: v for k, v in vars(args).items() if k not in ("work_dir", "out")}
        (args.out / "malleable.json").write_text(
            json.dumps({"recipe": recipe, "policy": POLICY, "runs": results}, indent=1)
        )
        plot(args, _most_resized(args), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
