"""An elastic run's two logs, one writer and one reader each:

``RUN/elastic_events.csv``     what happened to the run: every resize and change of hosts,
                               written by rank 0 of the run (``training``);
``RUN/elastic_decisions.csv``  what the controller decided each epoch and why, written by
                               ``bigearthnet-elastic follow`` (``scaling``).

Rows are appended by rewriting the file atomically; readers get typed records.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core.util import read_csv, write_csv
from bigearthnet.formats.run_folder import ELASTIC_DECISIONS as DECISIONS
from bigearthnet.formats.run_folder import ELASTIC_EVENTS as EVENTS


@dataclass(frozen=True)
class ElasticEvent:
    """A resize (``new_size`` the new world) or a change of hosts, at a position."""

    event: str
    old_size: int
    new_size: int | None
    epoch: int
    consumed: int  # samples of the epoch consumed when it happened
    batch: int  # the per-rank batch
    time: str = ""  # local time, set when appended


@dataclass(frozen=True)
class Decision:
    """One epoch's verdict of the elastic policy, with the numbers behind it."""

    epoch: int
    workers_before: int
    workers_after: int
    b_simple: float | None
    global_batch_before: int
    global_batch_after: int
    reason: str

    @property
    def verb(self) -> str:
        if self.workers_after > self.workers_before:
            return "grow"
        return "shrink" if self.workers_after < self.workers_before else "stay"


@dataclass(frozen=True)
class DecisionRecord:
    """A row of the decisions file: the decision, what became of it, and when."""

    decision: Decision
    outcome: str
    time: str = ""


EVENT_FIELDS = ("time", "old_size", "new_size", "epoch", "consumed", "batch", "event")
DECISION_FIELDS = (
    "time", "epoch", "verb", "workers_before", "workers_after", "b_simple",
    "global_batch_before", "global_batch_after", "reason", "outcome",
)  # fmt: skip


def _append(path: Path, fields: tuple[str, ...], row: dict) -> None:
    rows: list[dict] = read_csv(path) if path.is_file() else []
    rows.append(row)
    write_csv(path, fields, rows)


def _cell(value: object) -> object:
    return "" if value is None else value


def append_event(run_dir: Path, event: ElasticEvent) -> None:
    row = {k: _cell(v) for k, v in dataclasses.asdict(event).items()}
    row["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    _append(Path(run_dir) / EVENTS, EVENT_FIELDS, row)


def append_decision(run_dir: Path, decision: Decision, *, outcome: str) -> None:
    row = {k: _cell(v) for k, v in dataclasses.asdict(decision).items()}
    row.update(
        time=time.strftime("%Y-%m-%dT%H:%M:%S"),
        verb=decision.verb,
        b_simple="" if decision.b_simple is None else f"{decision.b_simple:.1f}",
        outcome=outcome,
    )
    _append(Path(run_dir) / DECISIONS, DECISION_FIELDS, row)


def _int_or_none(text: str) -> int | None:
    return int(text) if text not in ("", None) else None


def read_events(run_dir: Path) -> list[ElasticEvent]:
    """The run's events, oldest first ([] for a run that never resized)."""
    path = Path(run_dir) / EVENTS
    if not path.is_file():
        return []
    return [
        ElasticEvent(
            event=row.get("event") or "",  # runs of older versions lack the column
            old_size=int(row["old_size"]),
            new_size=_int_or_none(row["new_size"]),
            epoch=int(row["epoch"]),
            consumed=int(row["consumed"]),
            batch=int(row["batch"]),
            time=row["time"],
        )
        for row in read_csv(path)
    ]


def read_decisions(run_dir: Path) -> list[DecisionRecord]:
    """The controller's decisions, oldest first ([] when no controller followed the run)."""
    path = Path(run_dir) / DECISIONS
    if not path.is_file():
        return []
    return [
        DecisionRecord(
            Decision(
                epoch=int(row["epoch"]),
                workers_before=int(row["workers_before"]),
                workers_after=int(row["workers_after"]),
                b_simple=float(row["b_simple"]) if row["b_simple"] else None,
                global_batch_before=int(row["global_batch_before"]),
                global_batch_after=int(row["global_batch_after"]),
                reason=row["reason"],
            ),
            outcome=row["outcome"],
            time=row["time"],
        )
        for row in read_csv(path)
    ]
