"""``RUN/status.json``: how a training ended, its one writer and its one reader.

Rank 0 writes it when the epoch driver stops for good: ``finished`` (``--epochs`` done),
``target`` (``--target-f1`` reached) or ``early_stop`` (``--early-stopping-patience``); a
later run on the folder removes it as it starts.
Readers that watch a run from outside (``bigearthnet-elastic follow``) stop following when
it appears, whatever ``--epochs`` said; a folder without it holds a run still going, or one
that was stopped or failed and may be resumed.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bigearthnet.core.errors import InputError
from bigearthnet.core.util import atomic_write_json
from bigearthnet.formats.run_folder import STATUS

ENDINGS = ("finished", "target", "early_stop")


@dataclass(frozen=True)
class RunStatus:
    state: str  # one of ENDINGS
    epoch: int  # epochs completed
    reason: str  # in words, for people
    time: str = ""  # when it ended (local ISO time)


def write_status(run_dir: str | Path, status: RunStatus) -> None:
    if status.state not in ENDINGS:
        raise ValueError(f"run status {status.state!r}: expected one of {ENDINGS}")
    stamped = RunStatus(
        status.state, status.epoch, status.reason, time.strftime("%Y-%m-%dT%H:%M:%S")
    )
    atomic_write_json(Path(run_dir) / STATUS, asdict(stamped))


def clear_status(run_dir: str | Path) -> None:
    (Path(run_dir) / STATUS).unlink(missing_ok=True)


def read_status(run_dir: str | Path) -> RunStatus | None:
    """How the run in ``run_dir`` ended; None while it has not (or never wrote one)."""
    path = Path(run_dir) / STATUS
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return RunStatus(**data)
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as err:
        raise InputError(f"{path}: not a run status file ({err})") from None
