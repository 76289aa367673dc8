"""Follow an elastic training run and resize it as its epochs finish.

The run is watched through its folder only (``RUN/history.csv``, ``RUN/status.json``), and
resized through its hosts folder by a :class:`~bigearthnet.scaling.hosts.Resizer`: Slurm
holder jobs on a cluster, ``localhost`` entries on one machine (:mod:`bigearthnet.scaling.hosts`).

    bigearthnet-elastic --hosts-dir H follow --run-dir RUN --schedule ramp.txt
    bigearthnet-elastic --hosts-dir H follow --run-dir RUN --policy gns --max-workers 8
    bigearthnet-elastic --hosts-dir H follow --run-dir RUN --policy gns --max-workers 4 --local 1

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

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from bigearthnet.core.config import load_run_config
from bigearthnet.core.errors import InputError, RunFailed
from bigearthnet.formats.elastic_log import append_decision
from bigearthnet.formats.history import HistoryRow, read_history
from bigearthnet.formats.run_status import RunStatus, read_status
from bigearthnet.scaling.hosts import ControlError, Resizer
from bigearthnet.scaling.policy import PolicySettings, decide

PROG = "bigearthnet-elastic"
SCHEDULE_LINE = re.compile(r"^epoch\s+(\d+)\s*:\s*(grow|shrink)\s+to\s+(\d+)\s+workers?$")


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


@dataclass
class RunWatch:
    """What a follow loop knows of the run it follows: its finished epochs, whether it
    ended (``RUN/status.json``), and whether it has gone quiet for too long."""

    run_dir: Path
    epochs: int | None  # stop following after this many (None: until the run ends)
    quiet_limit: float  # seconds without a new epoch before giving up
    seen: int = 0
    since: float = field(default_factory=time.monotonic)
    # The status of an earlier run in the folder, there before following began: the run
    # being followed may not have started yet (and cleared it) - it says nothing of that run.
    earlier: RunStatus | None = field(init=False)

    def __post_init__(self) -> None:
        self.earlier = read_status(self.run_dir)
        if self.earlier is not None:
            say(
                f"{self.run_dir}: a run there ended after epoch {self.earlier.epoch} "
                f"({self.earlier.time}); following the next one to start in it"
            )

    def rows(self) -> list[HistoryRow]:
        """The history of the run followed ([] while the folder still holds only an
        earlier run's, and until the first epoch)."""
        rows = read_history(self.run_dir)
        last = rows[-1].epoch if rows else 0
        if self.earlier is not None and last == self.earlier.epoch:
            rows, last = [], 0  # the ended run's history: this run has not written yet
        if last < self.seen:  # a run started over in the folder (--no-resume)
            self.seen = 0
        if last > self.seen:
            self.seen, self.since = last, time.monotonic()
        elif time.monotonic() - self.since > self.quiet_limit:
            self._gone_quiet()
        return rows

    def _gone_quiet(self) -> None:
        limit = f"{self.quiet_limit:g} s (--history-timeout)"
        if not self.seen:
            raise ControlError(
                f"{self.run_dir}: no epoch in history.csv after {limit}: is a training "
                "writing to this folder?"
            )
        raise RunFailed(f"{self.run_dir}: no new epoch after epoch {self.seen} for {limit}")

    def run_over(self) -> str | None:
        """Why the run followed has ended (``RUN/status.json``); None while it goes on."""
        status = read_status(self.run_dir)
        if status is not None and status != self.earlier and status.epoch >= self.seen:
            return f"the run ended after epoch {status.epoch} ({status.reason})"
        return None

    def final_epoch(self) -> int | None:
        """The epoch the run followed ends with (``--epochs`` in its RUN/config.yaml, which
        it writes as it starts); None while unknown."""
        try:
            return load_run_config(self.run_dir).epochs
        except (InputError, OSError):
            return None

    def limit_reached(self) -> str | None:
        """``--epochs`` epochs are done (None: not yet, or no limit)."""
        if self.epochs is not None and self.seen >= self.epochs:
            return f"epoch {self.seen} of {self.epochs} done"
        return None

    def ended(self) -> str | None:
        """Why following is over: the run ended, or ``--epochs`` epochs are done."""
        return self.run_over() or self.limit_reached()


def check_run_dir(run_dir: Path) -> None:
    """A run folder the training has made, or will make (following may start first)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ControlError(f"{run_dir}: not a run folder")
    if not run_dir.parent.is_dir():
        raise ControlError(f"{run_dir}: its folder {run_dir.parent} does not exist")


def follow_schedule(
    resizer: Resizer, watch: RunWatch, actions: list[Action], *, poll: float
) -> None:
    """Apply each action once its epoch has finished; return when all are applied or the
    run has ended."""
    todo = list(actions)
    while todo:
        watch.rows()
        while todo and todo[0].epoch <= watch.seen:
            action = todo.pop(0)
            outcome = resizer.resize_to(action.workers)
            say(
                f"epoch {watch.seen} ({action.where}): {action.verb} to {action.workers}: {outcome}"
            )
        ended = watch.ended()
        if todo and ended:
            say(f"{ended}; {len(todo)} action(s) never applied")
            return
        if todo:
            time.sleep(poll)


def follow_policy(
    resizer: Resizer, watch: RunWatch, settings: PolicySettings, *, poll: float
) -> None:
    """Decide after every finished epoch (:func:`~bigearthnet.scaling.policy.decide`), resize
    when the decision says so, record it; return once the run has ended."""
    decided, last_change = 0, 0
    while True:
        rows = watch.rows()
        if rows and rows[-1].epoch < decided:  # a run started over: so do the decisions
            decided, last_change = 0, 0
        decision = decide(rows, settings, last_change_epoch=last_change)
        # No resize for a run that is over, nor after its last epoch: it ends before a new
        # world could start. The last epoch of the follower's --epochs is still decided on.
        over = watch.run_over()
        final = watch.final_epoch()
        if decision is not None and final is not None and decision.epoch >= final:
            decision = None
        if decision is not None and decision.epoch > decided and not over:
            decided = decision.epoch
            outcome = "-"
            if decision.verb != "stay":
                outcome = resizer.resize_to(decision.workers_after)
                last_change = decision.epoch
            say(
                f"epoch {decision.epoch}: {decision.verb} {decision.workers_before} -> "
                f"{decision.workers_after} workers ({decision.reason}); {outcome}"
            )
            append_decision(watch.run_dir, decision, outcome=outcome)
        if ended := over or watch.limit_reached():
            say(f"{ended}: stop following")
            return
        time.sleep(poll)


def say(message: str) -> None:
    print(f"[{PROG}] {message}", flush=True)
