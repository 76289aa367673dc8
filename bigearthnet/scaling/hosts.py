"""The hosts folder an elastic run discovers its workers in, and the two ways to fill it.

``jobs/elastic/discover_hosts.sh`` prints the ``host:slots`` lines of every ``*.hosts`` file
in the folder (slots of a host listed twice are summed); Horovod calls it every second or
so and resizes the run when the answer changes. Two resizers add and remove such files:

* :class:`SlurmHolders` - on a cluster. Slurm cannot add nodes to a running job, so each
  *holder* job holds a node and registers its ``host:slots`` for as long as it runs
  (``jobs/elastic/holder.sbatch``); growing submits holders, shrinking cancels the newest.
* :class:`LocalSlots` - on one machine. Each *entry* is a file ``local-NNN.hosts`` holding
  ``localhost:SLOTS``, written atomically; growing writes entries, shrinking removes the
  newest. The measure-decide-resize loop then runs on a workstation exactly as on a
  cluster, with no scheduler.

Both leave alone what they did not add (the entries the run started on), and both answer
``resize_to(workers)`` with a line saying what they did. One controller per hosts folder:
:func:`claim` locks it, as a training locks its run folder.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from bigearthnet.core import runlock
from bigearthnet.core.errors import InputError
from bigearthnet.core.util import atomic_write_text, jobs_dir

LOCAL_ENTRY = re.compile(r"^local-(\d+)\.hosts$")


class ControlError(InputError):
    """A problem the user must fix; printed as one line, exit 2."""


class Resizer(Protocol):
    """What the follow loops need: resize, and say what was done."""

    def resize_to(self, workers: int) -> str: ...


def check_hosts_dir(hosts_dir: Path) -> None:
    if not hosts_dir.is_dir():
        raise ControlError(f"{hosts_dir}: hosts folder does not exist")


def claim(hosts_dir: Path) -> None:
    """Lock ``hosts_dir`` for this process: two controllers resizing one run would undo each
    other's resizes. Released when the command ends (``cli.common.run``)."""
    check_hosts_dir(hosts_dir)
    try:
        runlock.acquire(hosts_dir)
    except runlock.RunLocked as err:
        who = err.holder.describe() if err.holder else "another process"
        raise ControlError(
            f"{hosts_dir}: another bigearthnet-elastic ({who}) follows this hosts folder; "
            "one controller per run"
        ) from None


def discovered(hosts_dir: Path) -> dict[str, int]:
    """host -> slots, exactly as Horovod's discovery sees them."""
    env = {**os.environ, "ELASTIC_HOSTS_DIR": str(hosts_dir)}
    result = run_command(["bash", str(jobs_dir() / "elastic" / "discover_hosts.sh")], env=env)
    return {h: int(n) for h, n in (line.rsplit(":", 1) for line in result.splitlines())}


class LocalSlots:
    """Resize a run on this machine by writing and removing ``localhost:SLOTS`` entries."""

    def __init__(self, hosts_dir: Path, *, slots: int) -> None:
        check_hosts_dir(hosts_dir)
        self.hosts_dir, self.slots = hosts_dir, slots

    def entries(self) -> list[Path]:
        """This resizer's entries, oldest first."""
        return [path for _number, path in self._numbered()]

    def _numbered(self) -> list[tuple[int, Path]]:
        found = [(LOCAL_ENTRY.match(p.name), p) for p in self.hosts_dir.iterdir()]
        return sorted((int(match[1]), p) for match, p in found if match)

    def grow(self, count: int) -> list[str]:
        first = max((number for number, _path in self._numbered()), default=0) + 1
        names = []
        for number in range(first, first + count):
            path = self.hosts_dir / f"local-{number:03d}.hosts"
            atomic_write_text(path, f"localhost:{self.slots}\n")
            names.append(path.name)
        return names

    def shrink(self, count: int) -> list[str]:
        newest = self.entries()[::-1][:count]
        for path in newest:
            path.unlink(missing_ok=True)
        return [p.name for p in newest]

    def resize_to(self, workers: int) -> str:
        current = sum(discovered(self.hosts_dir).values())
        if workers > current:
            added = self.grow(math.ceil((workers - current) / self.slots))
            return f"{current} slots: wrote {', '.join(added)}"
        if workers < current:
            removed = self.shrink(math.ceil((current - workers) / self.slots))
            return f"{current} slots: removed {', '.join(removed) or '(none of ours left)'}"
        return f"{current} slots: nothing to do"


class SlurmHolders:
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
        check_hosts_dir(hosts_dir)
        self.hosts_dir, self.name, self.slots = hosts_dir, name, slots
        self.jobs = jobs_dir()
        self.holder = holder or self.jobs / "elastic" / "holder.sbatch"
        self.sbatch_args = list(sbatch_args)

    @property
    def job_name(self) -> str:
        return f"{self.name}-holder"

    def holders(self) -> list[tuple[str, str]]:
        """(job id, state) of this run's holder jobs, oldest first."""
        out = run_command(
            ["squeue", "--noheader", "--me", "--name", self.job_name, "--format", "%i %T"]
        )
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
        return [run_command(cmd, env=env).strip().split(";")[0] for _ in range(count)]

    def shrink(self, count: int) -> list[str]:
        newest = self.holders()[::-1][:count]
        running = [job for job, state in newest if state != "PENDING"]
        pending = [job for job, state in newest if state == "PENDING"]
        if running:
            # SIGTERM first: the holder's trap removes its hosts file, a clean shrink.
            run_command(["scancel", "--signal=TERM", "--full", *running])
        if pending:  # a pending job cannot be signalled; it has registered nothing yet
            run_command(["scancel", *pending])
        return [job for job, _state in newest]

    def resize_to(self, workers: int) -> str:
        """Submit or cancel holders until about ``workers`` slots are (or will be) there."""
        current = sum(discovered(self.hosts_dir).values())
        pending = sum(1 for _job, state in self.holders() if state == "PENDING") * self.slots
        if workers > current + pending:
            jobs = self.grow(math.ceil((workers - current - pending) / self.slots))
            return f"{current} slots (+{pending} pending): submitted holders {', '.join(jobs)}"
        if workers < current:
            jobs = self.shrink(math.ceil((current - workers) / self.slots))
            return f"{current} slots: cancelled holders {', '.join(jobs) or '(none left)'}"
        return f"{current} slots (+{pending} pending): nothing to do"


def run_command(cmd: list[str], env: dict[str, str] | None = None) -> str:
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    except FileNotFoundError:
        raise ControlError(f"{cmd[0]}: command not found (is Slurm installed here?)") from None
    if result.returncode != 0:
        message = (result.stderr.strip() or result.stdout.strip()).splitlines()
        raise ControlError(f"{' '.join(cmd[:2])} failed: {message[-1] if message else '?'}")
    return result.stdout
