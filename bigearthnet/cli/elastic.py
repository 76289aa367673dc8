"""``bigearthnet-elastic``: grow and shrink an elastic training run with Slurm holder jobs.

    bigearthnet-elastic --hosts-dir H grow 2          # submit 2 holder jobs
    bigearthnet-elastic --hosts-dir H shrink 1        # cancel the newest holder
    bigearthnet-elastic --hosts-dir H status          # holders and discovered slots
    bigearthnet-elastic --hosts-dir H follow --run-dir RUN --schedule ramp.txt
    bigearthnet-elastic --hosts-dir H follow --run-dir RUN --policy gns --max-workers 8

See :mod:`bigearthnet.scaling.controller` for how holders work. No TensorFlow here: the
controller runs on a login node.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bigearthnet.cli.common import Parser, checked, run
from bigearthnet.core.config import load_run_config
from bigearthnet.core.errors import ConfigError, require_positive, require_positive_int
from bigearthnet.scaling.controller import PROG, Controller, parse_schedule
from bigearthnet.scaling.policy import PolicySettings

POSITIVE = checked(require_positive_int, int)


def build_parser() -> Parser:
    p = Parser(
        prog=PROG,
        description="Grow and shrink an elastic training run by submitting and cancelling "
        "Slurm holder jobs (see jobs/elastic/).",
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
        default=int(os.environ.get("ELASTIC_SLOTS", 1)),
        help="workers one holder adds, e.g. GPUs per node (default: 1)",
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
    sub = p.add_subparsers(dest="command", required=True)
    grow = sub.add_parser("grow", help="submit N holder jobs")
    grow.add_argument("count", type=POSITIVE, help="holder jobs to submit")
    shrink = sub.add_parser("shrink", help="cancel the newest N holders")
    shrink.add_argument("count", type=POSITIVE, help="holder jobs to cancel")
    sub.add_parser("status", help="holder jobs and the slots discovery reports")
    follow = sub.add_parser(
        "follow", help="resize as epochs finish: by a schedule file or by the noise scale"
    )
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
        help="stop following after this many epochs (--policy: default the run's epochs)",
    )
    follow.add_argument("--max-workers", type=POSITIVE, help="--policy: the largest world")
    follow.add_argument(
        "--min-workers", type=POSITIVE, default=1, help="--policy: the smallest world (default 1)"
    )
    follow.add_argument(
        "--margin",
        type=checked(require_positive, float),
        default=1.0,
        help="--policy: grow only while global batch x margin <= B_simple (default: 1)",
    )
    follow.add_argument(
        "--dwell-epochs",
        type=POSITIVE,
        default=2,
        help="--policy: epochs between two resizes (default: 2)",
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
    ctl = Controller(
        args.hosts_dir,
        name=args.name,
        slots=args.slots,
        holder=args.holder,
        sbatch_args=args.sbatch_arg,
    )
    if args.command == "grow":
        print("submitted holder jobs:", " ".join(ctl.grow(args.count)))
    elif args.command == "shrink":
        print("cancelled holder jobs:", " ".join(ctl.shrink(args.count)) or "(none)")
    elif args.command == "status":
        slots = ctl.discovered()
        for job, state in ctl.holders():
            print(f"holder {job} {state}")
        for host, n in slots.items():
            print(f"host {host}:{n}")
        print(f"total {sum(slots.values())} slot(s) on {len(slots)} host(s)")
    elif args.schedule is not None:
        actions = parse_schedule(args.schedule)
        ctl.follow(args.run_dir, actions, poll=args.poll, epochs=args.epochs)
    else:
        _follow_policy(ctl, args)
    return 0


def _follow_policy(ctl: Controller, args: argparse.Namespace) -> None:
    if args.max_workers is None:
        raise ConfigError("--policy gns needs --max-workers")
    if args.min_workers > args.max_workers:
        raise ConfigError("--min-workers must not exceed --max-workers")
    settings = PolicySettings(
        max_workers=args.max_workers,
        min_workers=args.min_workers,
        margin=args.margin,
        dwell_epochs=args.dwell_epochs,
    )
    epochs = args.epochs or load_run_config(args.run_dir).epochs
    ctl.follow_policy(args.run_dir, settings, poll=args.poll, epochs=epochs)


if __name__ == "__main__":
    sys.exit(main())
