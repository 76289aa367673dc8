"""``bigearthnet-elastic``: grow and shrink an elastic training run.

    bigearthnet-elastic --hosts-dir H grow 2          # submit 2 Slurm holder jobs
    bigearthnet-elastic --hosts-dir H shrink 1        # cancel the newest holder
    bigearthnet-elastic --hosts-dir H status          # holders and discovered slots
    bigearthnet-elastic --hosts-dir H follow --run-dir RUN --schedule ramp.txt
    bigearthnet-elastic --hosts-dir H follow --run-dir RUN --policy gns --max-workers 8
    bigearthnet-elastic --hosts-dir H follow --run-dir RUN --policy gns --max-workers 4 \
        --local 1                                     # this machine: localhost entries

See :mod:`bigearthnet.scaling.hosts` for holders and local entries,
:mod:`bigearthnet.scaling.controller` for the follow loops. No TensorFlow here: the
controller runs on a login node.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from bigearthnet.cli.common import Parser, checked, run
from bigearthnet.core.declare import add_options, from_args
from bigearthnet.core.errors import ConfigError, require_positive, require_positive_int
from bigearthnet.scaling import hosts
from bigearthnet.scaling.controller import (
    PROG,
    RunWatch,
    check_run_dir,
    follow_policy,
    follow_schedule,
    parse_schedule,
)
from bigearthnet.scaling.hosts import LocalSlots, Resizer, SlurmHolders
from bigearthnet.scaling.policy import PolicySettings

POSITIVE = checked(require_positive_int, int)


def build_parser() -> Parser:
    p = Parser(
        prog=PROG,
        description="Grow and shrink an elastic training run: by submitting and cancelling "
        "Slurm holder jobs (see jobs/elastic/), or on one machine by writing localhost "
        "entries into the hosts folder (follow --local).",
    )
    p.add_argument(
        "--hosts-dir",
        type=Path,
        default=os.environ.get("ELASTIC_HOSTS_DIR"),
        help="folder the holders register in (default: $ELASTIC_HOSTS_DIR)",
    )
    p.add_argument(
        "--name",
        default=os.environ.get("ELASTIC_NAME", "ben-elastic"),
        help="run name; holder jobs are called NAME-holder (default: ben-elastic)",
    )
    p.add_argument(
        "--slots",
        type=POSITIVE,
        help="workers one holder adds, e.g. GPUs per node (default: $ELASTIC_SLOTS or 1)",
    )
    p.add_argument(
        "--holder", type=Path, help="holder job script (default: jobs/elastic/holder.sbatch)"
    )
    p.add_argument(
        "--sbatch-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra sbatch option for holders (repeatable), e.g. --sbatch-arg=-A=proj",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           title="commands (COMMAND --help for its options)")  # fmt: skip
    grow = sub.add_parser(
        "grow", help="submit N holder jobs",
        description="Submit COUNT Slurm holder jobs (jobs/elastic/holder.sbatch); each "
        "registers --slots workers in the hosts folder once it runs, and the run grows at its "
        "next discovery.",
    )  # fmt: skip
    grow.add_argument("count", type=POSITIVE, help="holder jobs to submit")
    shrink = sub.add_parser(
        "shrink", help="cancel the newest N holders",
        description="Cancel the newest COUNT holder jobs: a running one removes its hosts "
        "file first (SIGTERM), a pending one had registered nothing; the run shrinks at its "
        "next discovery.",
    )  # fmt: skip
    shrink.add_argument("count", type=POSITIVE, help="holder jobs to cancel")
    sub.add_parser(
        "status", help="holder jobs and the slots discovery reports",
        description="List this run's holder jobs (when Slurm is there) and the hosts and "
        "slots the hosts folder offers now.",
    )  # fmt: skip
    follow = sub.add_parser(
        "follow", help="resize by a schedule or by the noise scale",
        description="Follow a running elastic run and resize it after each finished epoch: "
        "to the worker counts of a schedule file (--schedule), or by the measured gradient "
        "noise scale (--policy gns); through Slurm holder jobs, or with --local on this "
        "machine. Ends when the run ends, or after --epochs.",
    )  # fmt: skip
    follow.add_argument("--run-dir", type=Path, required=True, help="the run's folder")
    how = follow.add_mutually_exclusive_group(required=True)
    how.add_argument("--schedule", type=Path, help="lines 'epoch N: grow|shrink to M workers'")
    how.add_argument(
        "--policy",
        choices=("gns",),
        help="gns: grow while the global batch stays below the measured gradient noise "
        "scale B_simple, shrink when it falls below or validation F1 plateaus",
    )
    follow.add_argument(
        "--epochs",
        type=POSITIVE,
        help="stop following after this many epochs (default: when the run ends)",
    )
    add_options(follow, PolicySettings)
    follow.add_argument(
        "--local",
        type=POSITIVE,
        metavar="SLOTS",
        help="resize on this machine instead of through Slurm: each grow step writes an "
        "entry 'localhost:SLOTS' into the hosts folder, each shrink step removes the newest",
    )
    follow.add_argument(
        "--history-timeout",
        type=checked(require_positive, float),
        default=3600.0,
        metavar="S",
        help="give up when RUN/history.csv gains no epoch for S seconds (default: 3600)",
    )
    follow.add_argument(
        "--poll",
        type=checked(require_positive, float),
        default=10.0,
        help="seconds between checks of RUN/history.csv (default: 10)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), _control, argv)


def _control(args: argparse.Namespace) -> int:
    if args.hosts_dir is None:
        raise ConfigError("--hosts-dir (or ELASTIC_HOSTS_DIR) is required")
    if args.command != "follow":
        return _by_hand(_holders(args), args)
    # Every input is checked before the hosts folder is claimed: a refusal resizes nothing.
    check_run_dir(args.run_dir)
    actions = parse_schedule(args.schedule) if args.schedule is not None else None
    settings = from_args(PolicySettings, args) if actions is None else None
    resizer = _resizer(args)
    hosts.claim(args.hosts_dir)
    # Following ends with the run (RUN/status.json) or after --epochs.
    watch = RunWatch(args.run_dir, args.epochs, args.history_timeout)
    if actions is not None:
        follow_schedule(resizer, watch, actions, poll=args.poll)
    elif settings is not None:
        follow_policy(resizer, watch, settings, poll=args.poll)
    return 0


def _holders(args: argparse.Namespace) -> SlurmHolders:
    slots = args.slots or int(os.environ.get("ELASTIC_SLOTS", 1))
    return SlurmHolders(
        args.hosts_dir, name=args.name, slots=slots, holder=args.holder, sbatch_args=args.sbatch_arg
    )


def _resizer(args: argparse.Namespace) -> Resizer:
    if args.local is None:
        return _holders(args)
    slurm = [
        flag
        for flag, given in (
            ("--slots", args.slots),
            ("--holder", args.holder),
            ("--sbatch-arg", args.sbatch_arg),
        )
        if given
    ]
    if slurm:
        raise ConfigError(f"--local resizes without Slurm: drop {', '.join(slurm)}")
    return LocalSlots(args.hosts_dir, slots=args.local)


def _by_hand(ctl: SlurmHolders, args: argparse.Namespace) -> int:
    if args.command == "grow":
        print("submitted holder jobs:", " ".join(ctl.grow(args.count)))
    elif args.command == "shrink":
        print("cancelled holder jobs:", " ".join(ctl.shrink(args.count)) or "(none)")
    else:
        slots = hosts.discovered(args.hosts_dir)
        holders = ctl.holders() if shutil.which("squeue") else []  # no Slurm: local entries
        for job, state in holders:
            print(f"holder {job} {state}")
        for host, n in slots.items():
            print(f"host {host}:{n}")
        print(f"total {sum(slots.values())} slot(s) on {len(slots)} host(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
