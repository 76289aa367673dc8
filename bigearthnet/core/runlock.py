"""One writer per run folder: rank 0 holds an exclusive lock on ``RUN/`` for as long as it
writes there.

Two trainings on one run folder (a job resubmitted while the first still runs, a requeued
job racing its orphaned step) would interleave one ``history.csv`` and one set of
checkpoints; the second one must stop at start, saying who holds the folder.

Mechanisms:

* ``flock`` (the default): an OS lock on ``RUN/.lock``, held through an open file for the
  process's lifetime. The kernel drops it when the process ends, also after ``kill -9``:
  nothing is left to clean up. The holder's host, PID, start time and Slurm job id are
  written into the file for the message the second run prints. A command releases its
  locks when it ends (:func:`release_all`, called by ``cli.common.run``), so commands run
  one after the other in one process (tests, notebooks) do not block each other.
* ``lease``: where the file system has no working ``flock`` (some Lustre and NFS mounts
  refuse it; others, mounted with ``localflock``, grant it per node only, so set
  ``BIGEARTHNET_RUN_LOCK=lease`` there): ``RUN/.lease`` names the holder and a heartbeat
  thread rewrites it every few seconds; a lease not renewed for ``STALE_AFTER_S`` is stale
  and may be taken over.

``--force-unlock`` removes a leftover lease for the manual case (a holder that died on
another host, before the lease went stale), refusing while the holder is a live process on
this host. An flock needs no unlocking: it ends with its process.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

from bigearthnet.core.errors import InputError
from bigearthnet.core.util import atomic_write_json

log = logging.getLogger("bigearthnet")  # the ranks' logger (distributed.py sets it up)
LOCK_FILE = ".lock"
LEASE_FILE = ".lease"
MECHANISM_ENV = "BIGEARTHNET_RUN_LOCK"  # flock (default) or lease
STALE_AFTER_S = 120.0  # a lease not renewed for this long belongs to a dead holder
HEARTBEAT_S = STALE_AFTER_S / 8
NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


class RunLocked(InputError):
    """Another process holds the run folder (exit 2: nothing was done)."""

    def __init__(self, message: str, holder: Holder | None = None) -> None:
        super().__init__(message)
        self.holder = holder  # who holds it, where known


@dataclass(frozen=True)
class Holder:
    """Who holds a run folder."""

    host: str
    pid: int
    started: str
    job_id: str | None
    mechanism: str
    heartbeat: float = 0.0  # lease: time.time() of the last renewal

    @classmethod
    def me(cls, mechanism: str) -> Holder:
        return cls(
            host=socket.gethostname(),
            pid=os.getpid(),
            started=time.strftime("%Y-%m-%dT%H:%M:%S"),
            job_id=os.environ.get("SLURM_JOB_ID"),
            mechanism=mechanism,
            heartbeat=time.time(),
        )

    def describe(self) -> str:
        job = f", Slurm job {self.job_id}" if self.job_id else ""
        return f"host {self.host} PID {self.pid} since {self.started}{job}"

    def alive_here(self) -> bool:
        """Whether the holder is a running process on this host (unknown elsewhere)."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # exists, owned by someone else
        return True


def _read_holder(path: Path) -> Holder | None:
    try:
        return Holder(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None  # absent, or being written: no one to name


class RunLock:
    """The lock of one run folder held by this process (:func:`acquire`)."""

    def __init__(self, run_dir: Path, holder: Holder, handle: IO[str] | None) -> None:
        self.run_dir, self.holder = run_dir, holder
        self._handle = handle  # flock: the open file that holds the lock
        self._stop = threading.Event()
        if handle is None:
            threading.Thread(target=self._renew, name="run-lease", daemon=True).start()

    def _renew(self) -> None:
        lease = self.run_dir / LEASE_FILE
        while not self._stop.wait(HEARTBEAT_S):
            self.holder = Holder(**{**asdict(self.holder), "heartbeat": time.time()})
            try:
                atomic_write_json(lease, asdict(self.holder))
            except OSError as err:  # a full disk or an outage: try again at the next beat
                log.warning("%s: lease not renewed (%s); retrying", lease, err)

    def release(self) -> None:
        """Give the folder up (also happens when the process ends)."""
        self._stop.set()
        if self._handle is not None:
            self._handle.close()  # closing the file drops the flock
        elif _read_holder(self.run_dir / LEASE_FILE) == self.holder:
            (self.run_dir / LEASE_FILE).unlink(missing_ok=True)
        _HELD.pop(self.run_dir, None)


_HELD: dict[Path, RunLock] = {}  # this process's locks: evaluation after training reuses


def release_all() -> None:
    """Release every lock this process holds (a command ends: cli.common.run)."""
    for lock in list(_HELD.values()):
        lock.release()


def acquire(run_dir: str | Path, *, force_unlock: bool = False) -> RunLock:
    """Lock ``run_dir`` for this process (created if missing); RunLocked when another
    process holds it. Idempotent within a process."""
    folder = Path(run_dir).resolve()
    if folder in _HELD:
        return _HELD[folder]
    folder.mkdir(parents=True, exist_ok=True)
    if force_unlock:
        _force_unlock(folder)
    mechanism = os.environ.get(MECHANISM_ENV, "flock")
    if mechanism not in ("flock", "lease"):
        raise InputError(f"{MECHANISM_ENV}={mechanism}: use flock or lease")
    lock = _flock(folder) if mechanism == "flock" else None
    if lock is None:
        lock = _lease(folder)
    log.info("%s: held by this process (%s)", folder, lock.holder.mechanism)
    _HELD[folder] = lock
    return lock


def _flock(folder: Path) -> RunLock | None:
    """The flock of ``folder``, or None where the file system has none (lease instead)."""
    path = folder / LOCK_FILE
    handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 (held for the process's life)
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        holder = _read_holder(path)
        raise RunLocked(_locked_message(folder, holder), holder) from None
    except OSError as err:
        handle.close()
        if err.errno in NO_FLOCK:
            log.warning("%s: no flock on this file system (%s): using a lease", folder, err)
            return None
        raise
    holder = Holder.me("flock")
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps(asdict(holder)))
    handle.flush()
    return RunLock(folder, holder, handle)


def _lease(folder: Path) -> RunLock:
    path = folder / LEASE_FILE
    current = _read_holder(path)
    if current is not None and _lease_valid(current):
        raise RunLocked(_locked_message(folder, current), current)
    holder = Holder.me("lease")
    atomic_write_json(path, asdict(holder))
    # Two starters that both saw no lease: the later write wins; the other backs off.
    time.sleep(0.2)
    if _read_holder(path) != holder:
        winner = _read_holder(path)
        raise RunLocked(_locked_message(folder, winner), winner)
    return RunLock(folder, holder, None)


def _lease_valid(holder: Holder) -> bool:
    if holder.host == socket.gethostname() and not holder.alive_here():
        return False  # its process is gone: no need to wait for the stale time
    return time.time() - holder.heartbeat < STALE_AFTER_S


def _locked_message(folder: Path, holder: Holder | None) -> str:
    who = holder.describe() if holder else "another process"
    return (
        f"{folder}: run folder in use by {who}; wait for it to end, or use another --run-dir "
        "(--force-unlock if that process is gone)"
    )


def _force_unlock(folder: Path) -> None:
    """Remove a leftover lease, unless its holder runs on this host. (The lock file stays:
    deleting it under a live flock holder elsewhere would let two processes hold one.)"""
    holder = _read_holder(folder / LEASE_FILE)
    if holder is not None and holder.alive_here():
        raise RunLocked(
            f"{folder}: --force-unlock refused: the holder ({holder.describe()}) is running"
        )
    if holder is not None:
        log.warning("%s: --force-unlock removed the lease of %s", folder, holder.describe())
    (folder / LEASE_FILE).unlink(missing_ok=True)
