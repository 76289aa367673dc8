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
    bigearthnet-elastic --hosts-dir H follow --run-dir RUN --policy gns --max-workers 8

A schedule file says, line by line, what to do once an epoch has finished::

    # a batch-size ramp: small world early, more workers once training is stable
    epoch 3: grow to 4 workers
    epoch 8: shrink to 2 workers

``--policy gns`` decides after every epoch from the gradient noise scale the run measures
(:mod:`bigearthnet.scaling.policy`) and writes each decision, with the numbers behind it, to
``RUN/elastic_decisions.csv`` (the controller's own file; the run itself records the resizes
that happened in ``RUN/elastic_events.csv``).

No TensorFlow here: the controller runs on a login node.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core.errors import InputError
from bigearthnet.core.util import jobs_dir, read_csv, write_csv
from bigearthnet.formats.history import read_history
from bigearthnet.scaling.policy import Decision, PolicySettings, decide

PROG = "bigearthnet-elastic"
DECISIONS = "elastic_decisions.csv"
DECISION_FIELDS = [
    "time",
    "epoch",
    "verb",
    "workers_before",
    "workers_after",
    "b_simple",
    "global_batch_before",
    "global_batch_after",
    "reason",
    "outcome",
]
SCHEDULE_LINE = re.compile(r"^epoch\s+(\d+)\s*:\s*(grow|shrink)\s+to\s+(\d+)\s+workers?$")


class ControlError(InputError):
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

    def __init__(
        self,
        hosts_dir: Path,
        *,
        name: str,
        slots: int,
        holder: Path | None = None,
        sbatch_args: Sequence[str] = (),
    ) -> None:
        if not hosts_dir.is_dir():
            raise ControlError(f"{hosts_dir}: hosts folder does not exist")
        self.hosts_dir, self.name, self.slots = hosts_dir, name, slots
        self.jobs = jobs_dir()
        self.holder = holder or self.jobs / "elastic" / "holder.sbatch"
        self.sbatch_args = list(sbatch_args)

    @property
    def job_name(self) -> str:
        return f"{self.name}-holder"

    def discovered(self) -> dict[str, int]:
        """host -> slots, exactly as Horovod's discovery sees them."""
        env = {**os.environ, "ELASTIC_HOSTS_DIR": str(self.hosts_dir)}
        result = _run(["bash", str(self.jobs / "elastic" / "discover_hosts.sh")], env=env)
        return {h: int(n) for h, n in (line.rsplit(":", 1) for line in result.splitlines())}

    def holders(self) -> list[tuple[str, str]]:
        """(job id, state) of this run's holder jobs, oldest first."""
        out = _run(["squeue", "--noheader", "--me", "--name", self.job_name, "--format", "%i %T"])
        jobs = [line.split(maxsplit=1) for line in out.splitlines() if line.strip()]
        return sorted(((job, state) for job, state in jobs), key=lambda j: int(j[0].split("_")[0]))

    def grow(self, count: int) -> list[str]:
        # Slurm runs a copy of the holder script: BEN_REPO tells it where jobs/common.sh is.
        env = {
            **os.environ,
            "ELASTIC_HOSTS_DIR": str(self.hosts_dir.resolve()),
            "ELASTIC_SLOTS": str(self.slots),
            "BEN_REPO": str(self.jobs.parent),
        }
        cmd = [
            "sbatch",
            "--parsable",
            f"--job-name={self.job_name}",
            *self.sbatch_args,
            str(self.holder),
        ]
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

    def follow(
        self, run_dir: Path, actions: list[Action], *, poll: float, epochs: int | None
    ) -> None:
        """Apply each action once its epoch has finished; return when all are applied
        or the run reached its last epoch."""
        todo = list(actions)
        while todo:
            done = finished_epochs(run_dir)
            while todo and todo[0].epoch <= done:
                action = todo.pop(0)
                outcome = self.resize_to(action.workers)
                print(
                    f"[{PROG}] epoch {done} ({action.where}): {action.verb} to "
                    f"{action.workers}: {outcome}",
                    flush=True,
                )
            if todo and epochs is not None and done >= epochs:
                print(f"[{PROG}] run finished; {len(todo)} action(s) never applied", flush=True)
                return
            if todo:
                time.sleep(poll)

    def follow_policy(
        self, run_dir: Path, settings: PolicySettings, *, poll: float, epochs: int
    ) -> None:
        """Decide after every finished epoch (:func:`~bigearthnet.scaling.policy.decide`), resize
        when the decision says so, record it; return once ``epochs`` epochs are done."""
        seen, last_change = 0, 0
        while seen < epochs:
            rows = read_history(run_dir)
            decision = decide(rows, settings, last_change_epoch=last_change)
            if decision is not None and decision.epoch > seen:
                seen = decision.epoch
                outcome = "-"
                if decision.verb != "stay":
                    outcome = self.resize_to(decision.workers_after)
                    last_change = decision.epoch
                print(
                    f"[{PROG}] epoch {decision.epoch}: {decision.verb} "
                    f"{decision.workers_before} -> {decision.workers_after} workers "
                    f"({decision.reason}); {outcome}",
                    flush=True,
                )
                record_decision(run_dir, decision, outcome=outcome)
            if seen < epochs:
                time.sleep(poll)


def record_decision(run_dir: Path, decision: Decision, *, outcome: str) -> None:
    """Append one decision to ``RUN/elastic_decisions.csv`` (written atomically)."""
    path = run_dir / DECISIONS
    rows: list[dict] = read_csv(path) if path.is_file() else []
    b_simple = "" if decision.b_simple is None else f"{decision.b_simple:.1f}"
    rows.append(
        {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "epoch": decision.epoch,
            "verb": decision.verb,
            "workers_before": decision.workers_before,
            "workers_after": decision.workers_after,
            "b_simple": b_simple,
            "global_batch_before": decision.global_batch_before,
            "global_batch_after": decision.global_batch_after,
            "reason": decision.reason,
            "outcome": outcome,
        }
    )
    write_csv(path, DECISION_FIELDS, rows)


def finished_epochs(run_dir: Path) -> int:
    return max((row.epoch for row in read_history(run_dir)), default=0)


def _run(cmd: list[str], env: dict[str, str] | None = None) -> str:
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    except FileNotFoundError:
        raise ControlError(f"{cmd[0]}: command not found (is Slurm installed here?)") from None
    if result.returncode != 0:
        message = (result.stderr.strip() or result.stdout.strip()).splitlines()
        raise ControlError(f"{' '.join(cmd[:2])} failed: {message[-1] if message else '?'}")
    return result.stdout
