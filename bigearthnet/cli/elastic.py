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
import shutil
import sys
from dataclasses import dataclass, fields
from pathlib import Path

from bigearthnet.cli.common import Parser, run
from bigearthnet.core.declare import add_options, check_fields, flag_name, from_args, option, reuse
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


@dataclass(frozen=True, kw_only=True)
class HoldersOptions:
    """The hosts folder and the holder jobs: every sub-command's options; a job script sets
    them in the environment."""

    hosts_dir: Path = option(help="folder the holders register in", env="ELASTIC_HOSTS_DIR")
    name: str = option("ben-elastic", "run name; holder jobs are called NAME-holder",
                       env="ELASTIC_NAME")  # fmt: skip
    slots: int = option(1, "workers one holder adds, e.g. GPUs per node",
                        check=require_positive_int, env="ELASTIC_SLOTS")  # fmt: skip
    holder: Path | None = option(None, "holder job script (default: "
                                 "jobs/elastic/holder.sbatch)")  # fmt: skip
    sbatch_arg: tuple[str, ...] = option(
        (), "extra sbatch option for holders (repeatable), e.g. --sbatch-arg=-A=proj",
        repeat=True, metavar="ARG",
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)

    def holders(self) -> SlurmHolders:
        return SlurmHolders(self.hosts_dir, name=self.name, slots=self.slots,
                            holder=self.holder, sbatch_args=self.sbatch_arg)  # fmt: skip


@dataclass(frozen=True)
class GrowOptions:
    count: int = option(help="holder jobs to submit", positional=True,
                        check=require_positive_int, metavar="COUNT")  # fmt: skip


@dataclass(frozen=True)
class ShrinkOptions:
    count: int = reuse(GrowOptions, "count", help="holder jobs to cancel")


@dataclass(frozen=True, kw_only=True)
class FollowOptions:
    """``follow``: which run, resized how, watched how often (the policy's limits are
    :class:`~bigearthnet.scaling.policy.PolicySettings`)."""

    run_dir: Path = option(help="the run's folder", metavar="RUN")
    schedule: Path | None = option(None, "lines 'epoch N: grow|shrink to M workers'")
    policy: str | None = option(
        None, "gns: grow while the global batch stays below the measured gradient noise scale "
        "B_simple, shrink when it falls below or validation F1 plateaus", choices=("gns",),
    )  # fmt: skip
    epochs: int | None = option(None, "stop following after this many epochs (default: when "
                                "the run ends)", check=require_positive_int)  # fmt: skip
    local: int | None = option(
        None, "resize on this machine instead of through Slurm: each grow step writes an "
        "entry 'localhost:SLOTS' into the hosts folder, each shrink step removes the newest",
        check=require_positive_int, metavar="SLOTS",
    )  # fmt: skip
    history_timeout: float = option(3600.0, "give up when RUN/history.csv gains no epoch for "
                                    "S seconds", check=require_positive, metavar="S")  # fmt: skip
    poll: float = option(10.0, "seconds between checks of RUN/history.csv",
                         check=require_positive)  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)
        if (self.schedule is None) == (self.policy is None):
            raise ConfigError("follow by --schedule FILE or by --policy gns: give one of them")


def build_parser() -> Parser:
    p = Parser(
        prog=PROG,
        description="Grow and shrink an elastic training run: by submitting and cancelling "
        "Slurm holder jobs (see jobs/elastic/), or on one machine by writing localhost "
        "entries into the hosts folder (follow --local).",
    )
    add_options(p, HoldersOptions)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           title="commands (COMMAND --help for its options)")  # fmt: skip
    grow = sub.add_parser(
        "grow", help="submit N holder jobs",
        description="Submit COUNT Slurm holder jobs (jobs/elastic/holder.sbatch); each "
        "registers --slots workers in the hosts folder once it runs, and the run grows at its "
        "next discovery.",
    )  # fmt: skip
    add_options(grow, GrowOptions)
    shrink = sub.add_parser(
        "shrink", help="cancel the newest N holders",
        description="Cancel the newest COUNT holder jobs: a running one removes its hosts "
        "file first (SIGTERM), a pending one had registered nothing; the run shrinks at its "
        "next discovery.",
    )  # fmt: skip
    add_options(shrink, ShrinkOptions)
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
    add_options(follow, FollowOptions)
    add_options(follow, PolicySettings)
    return p


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), _control, argv)


def _control(args: argparse.Namespace) -> int:
    held = from_args(HoldersOptions, args)
    if args.command != "follow":
        return _by_hand(held, args)
    follow = from_args(FollowOptions, args)
    # Every input is checked before the hosts folder is claimed: a refusal resizes nothing.
    check_run_dir(follow.run_dir)
    actions = parse_schedule(follow.schedule) if follow.schedule is not None else None
    settings = from_args(PolicySettings, args) if actions is None else None
    resizer = _resizer(held, follow, args)
    hosts.claim(held.hosts_dir)
    # Following ends with the run (RUN/status.json) or after --epochs.
    watch = RunWatch(follow.run_dir, follow.epochs, follow.history_timeout)
    if actions is not None:
        follow_schedule(resizer, watch, actions, poll=follow.poll)
    elif settings is not None:
        follow_policy(resizer, watch, settings, poll=follow.poll)
    return 0


def _resizer(held: HoldersOptions, follow: FollowOptions, args: argparse.Namespace) -> Resizer:
    if follow.local is None:
        return held.holders()
    # What was typed (a job script's environment may say more: it is not used here).
    slurm = [flag_name(f) for f in _SLURM_ONLY if f.name in vars(args)]
    if slurm:
        raise ConfigError(f"--local resizes without Slurm: drop {', '.join(slurm)}")
    return LocalSlots(held.hosts_dir, slots=follow.local)


_SLURM_ONLY = [f for f in fields(HoldersOptions) if f.name in ("slots", "holder", "sbatch_arg")]


def _by_hand(held: HoldersOptions, args: argparse.Namespace) -> int:
    ctl = held.holders()
    if args.command == "grow":
        print("submitted holder jobs:", " ".join(ctl.grow(from_args(GrowOptions, args).count)))
    elif args.command == "shrink":
        cancelled = ctl.shrink(from_args(ShrinkOptions, args).count)
        print("cancelled holder jobs:", " ".join(cancelled) or "(none)")
    else:
        slots = hosts.discovered(held.hosts_dir)
        holders = ctl.holders() if shutil.which("squeue") else []  # no Slurm: local entries
        for job, state in holders:
            print(f"holder {job} {state}")
        for host, n in slots.items():
            print(f"host {host}:{n}")
        print(f"total {sum(slots.values())} slot(s) on {len(slots)} host(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
