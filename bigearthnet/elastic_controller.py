"""``bigearthnet-elastic``: grow and shrink an elastic training run with Slurm jobs.

Slurm cannot add nodes to a running job (``scontrol update NumNodes=`` only shrinks, and
an ssh into a node of another job is refused by ``pam_slurm_adopt``). So an elastic run
is several jobs: the *driver* job runs ``horovodrun --host-discovery-script`` and each
*holder* job holds a node and registers its ``host:slots`` in a shared hosts folder for as
long as it runs (``jobs/elastic/holder.sbatch``; ``discover_hosts.sh`` reads the folder).
This controller submits and cancels holders:

    bigearthnet-elastic --hosts-dir H grow 2          # submit 2 holder jobs
    bigearthnet-elastic --hosts-dir H shrink 1        # cancel the newest holder
    bigearthnet-elastic --hosts-dir H status          # holders and discovered slots
    bigearthnet-elastic --hosts-dir H follow --run-dir RUN --schedule ramp.txt

A schedule file says, line by line, what to do once an epoch has finished::

    # a batch-size ramp: small world early, more workers once training is stable
    epoch 3: grow to 4 workers
    epoch 8: shrink to 2 workers

No TensorFlow here: the controller runs on a login node.
"""

from __future__ import annotations

import csv
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.util import OneLineParser, first_line

PROG = "bigearthnet-elastic"
REPO = Path(__file__).resolve().parents[1]
DISCOVER = REPO / "jobs" / "elastic" / "discover_hosts.sh"
HOLDER = REPO / "jobs" / "elastic" / "holder.sbatch"
SCHEDULE_LINE = re.compile(r"^epoch\s+(\d+)\s*:\s*(grow|shrink)\s+to\s+(\d+)\s+workers?$")


class ControlError(RuntimeError):
    """A problem the user must fix; printed as one line, exit 2."""


@dataclass(frozen=True)
class Action:
    epoch: int  # applied once this many epochs have finished
    verb: str  # grow | shrink
    workers: int  # the target world size
    where: str  # file:line, for messages


def parse_schedule(path: Path) -> list[Action]:
    """Actions of a schedule file in epoch order; ControlError names a bad line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise ControlError(f"{path}: cannot read schedule ({err.strerror})") from None
    actions = []
    for number, raw in enumerate(lines, start=1):
        line = raw.split("#", 1)[0].strip().lower()
        if not line:
            continue
        match = SCHEDULE_LINE.match(line)
        if not match or int(match.group(3)) < 1:
            raise ControlError(
                f"{path}:{number}: expected 'epoch N: grow|shrink to M workers', got {raw!r}"
            )
        actions.append(Action(int(match[1]), match[2], int(match[3]), f"{path.name}:{number}"))
    return sorted(actions, key=lambda a: a.epoch)


class Controller:
    """Holder jobs of one elastic run, identified by their job name."""

    def __init__(self, hosts_dir: Path, name: str, slots: int, holder: Path, sbatch_args=()):
        self.hosts_dir, self.name, self.slots = hosts_dir, name, slots
        self.holder, self.sbatch_args = holder, list(sbatch_args)

    @property
    def job_name(self) -> str:
        return f"{self.name}-holder"

    def discovered(self) -> dict[str, int]:
        """host -> slots, exactly as Horovod's discovery sees them."""
        env = {**os.environ, "ELASTIC_HOSTS_DIR": str(self.hosts_dir)}
        result = _run(["bash", str(DISCOVER)], env=env)
        return {h: int(n) for h, n in (line.rsplit(":", 1) for line in result.splitlines())}

    def holders(self) -> list[tuple[str, str]]:
        """(job id, state) of this run's holder jobs, oldest first."""
        out = _run(["squeue", "--noheader", "--me", "--name", self.job_name, "--format", "%i %T"])
        jobs = [tuple(line.split()) for line in out.splitlines() if line.strip()]
        return sorted(jobs, key=lambda job: int(job[0].split("_")[0]))

    def grow(self, count: int) -> list[str]:
        # Slurm runs a copy of the holder script: BEN_REPO tells it where jobs/common.sh is.
        env = {**os.environ, "ELASTIC_HOSTS_DIR": str(self.hosts_dir.resolve()),
               "ELASTIC_SLOTS": str(self.slots), "BEN_REPO": str(REPO)}  # fmt: skip
        cmd = ["sbatch", "--parsable", f"--job-name={self.job_name}", *self.sbatch_args,
               str(self.holder)]  # fmt: skip
        # The holder logs to logs/ here; sbatch does not create it, and a job whose log
        # cannot be opened fails without a trace.
        Path("logs").mkdir(exist_ok=True)
        return [_run(cmd, env=env).strip().split(";")[0] for _ in range(count)]

    def shrink(self, count: int) -> list[str]:
        newest = self.holders()[::-1][:count]
        running = [job for job, state in newest if state != "PENDING"]
        pending = [job for job, state in newest if state == "PENDING"]
        if running:
            # SIGTERM first: the holder's trap removes its hosts file, a clean shrink.
            _run(["scancel", "--signal=TERM", "--full", *running])
        if pending:  # a pending job cannot be signalled; it has registered nothing yet
            _run(["scancel", *pending])
        return [job for job, _state in newest]

    def resize_to(self, workers: int) -> str:
        """Submit or cancel holders until about ``workers`` slots are (or will be) there."""
        current = sum(self.discovered().values())
        pending = sum(1 for _job, state in self.holders() if state == "PENDING") * self.slots
        if workers > current + pending:
            jobs = self.grow(math.ceil((workers - current - pending) / self.slots))
            return f"{current} slots (+{pending} pending): submitted holders {', '.join(jobs)}"
        if workers < current:
            jobs = self.shrink(math.ceil((current - workers) / self.slots))
            return f"{current} slots: cancelled holders {', '.join(jobs) or '(none left)'}"
        return f"{current} slots (+{pending} pending): nothing to do"

    def follow(self, run_dir: Path, actions: list[Action], poll: float, epochs: int | None):
        """Apply each action once its epoch has finished; return when all are applied
        or the run reached its last epoch."""
        todo = list(actions)
        while todo:
            done = finished_epochs(run_dir)
            while todo and todo[0].epoch <= done:
                action = todo.pop(0)
                outcome = self.resize_to(action.workers)
                print(f"[{PROG}] epoch {done} ({action.where}): {action.verb} to "
                      f"{action.workers}: {outcome}", flush=True)  # fmt: skip
            if todo and epochs is not None and done >= epochs:
                print(f"[{PROG}] run finished; {len(todo)} action(s) never applied", flush=True)
                return
            if todo:
                time.sleep(poll)


def finished_epochs(run_dir: Path) -> int:
    path = run_dir / "history.csv"
    if not path.is_file():
        return 0
    with path.open(newline="", encoding="utf-8") as f:
        return max((int(row["epoch"]) for row in csv.DictReader(f)), default=0)


def _run(cmd: list[str], env: dict | None = None) -> str:
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    except FileNotFoundError:
        raise ControlError(f"{cmd[0]}: command not found (is Slurm installed here?)") from None
    if result.returncode != 0:
        message = (result.stderr.strip() or result.stdout.strip()).splitlines()
        raise ControlError(f"{' '.join(cmd[:2])} failed: {message[-1] if message else '?'}")
    return result.stdout


def build_parser() -> OneLineParser:
    p = OneLineParser(
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
        type=int,
        default=int(os.environ.get("ELASTIC_SLOTS", 1)),
        help="workers one holder adds, e.g. GPUs per node (default: 1)",
    )
    p.add_argument("--holder", type=Path, default=HOLDER, help="holder job script")
    p.add_argument(
        "--sbatch-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra sbatch option for holders (repeatable), e.g. --sbatch-arg=-A=proj",
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("grow", help="submit N holder jobs").add_argument("count", type=int)
    sub.add_parser("shrink", help="cancel the newest N holders").add_argument("count", type=int)
    sub.add_parser("status", help="holder jobs and the slots discovery reports")
    follow = sub.add_parser("follow", help="apply a schedule file as epochs finish")
    follow.add_argument("--run-dir", type=Path, required=True, help="the run's folder")
    follow.add_argument(
        "--schedule", type=Path, required=True, help="lines 'epoch N: grow|shrink to M workers'"
    )
    follow.add_argument("--epochs", type=int, help="stop following after this many epochs")
    follow.add_argument("--poll", type=float, default=10.0, help="seconds between checks")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.hosts_dir is None:
            raise ControlError("--hosts-dir (or ELASTIC_HOSTS_DIR) is required")
        if not args.hosts_dir.is_dir():
            raise ControlError(f"{args.hosts_dir}: hosts folder does not exist")
        if args.slots < 1 or getattr(args, "count", 1) < 1:
            raise ControlError("--slots and N must be at least 1")
        ctl = Controller(args.hosts_dir, args.name, args.slots, args.holder, args.sbatch_arg)
        return _dispatch(ctl, args)
    except ControlError as err:
        print(f"{PROG}: error: {first_line(err)}", file=sys.stderr)
        return 2


def _dispatch(ctl: Controller, args) -> int:
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
    else:
        ctl.follow(args.run_dir, parse_schedule(args.schedule), args.poll, args.epochs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
