"""A throw-away single-node Slurm cluster for tests: munged, slurmctld and slurmd on this host.

:class:`SlurmCluster` writes everything into one fresh folder under /tmp (a munge key, socket
and log; slurm.conf; state, spool and log folders), starts the three daemons in the
foreground as child processes on free ports, and points the client commands (sbatch,
scontrol, ...) at them through ``SLURM_CONF``. The node is this host (``hostname -s``) with
its real CPU count and memory, in a partition ``debug``. :meth:`SlurmCluster.stop` cancels
the jobs, kills whatever the cluster started (found by a marker in the environment of
slurmd and of every job) and removes the folder; the daemons also get SIGTERM should the
test process die without cleaning up (``PR_SET_PDEATHSIG``).

Deliberate choices in slurm.conf:

* ``ProctrackType=proctrack/linuxproc`` and ``TaskPlugin=task/none``: no cgroups needed;
* no accounting (``sacct`` answers nothing): job states come from ``scontrol show job``,
  kept for the whole session by ``MinJobAge``; ``jobcomp/filetxt`` records finished jobs;
* ``cred_expire=10``: Slurm holds a requeued job back for cred_expire + 1 seconds (121 s by
  default), which would make the requeue test slow;
* ``KillWait=10``: time-limited jobs are killed 10 s after SIGTERM rather than 30 s;
* ``sched_interval=2,bf_interval=2``: a requeued job starts as soon as its hold ends, not at
  the next 30-60 s scheduling pass;
* ``TmpFS`` in the cluster's folder: the PMIx plugin makes ``spmix_appdir_<uid>_<job>.<step>``
  there for each step and fails the launch when it already exists. Every test cluster
  numbers its jobs from 1, so a folder left in a shared /tmp by an earlier cluster's killed
  step made a later cluster's job of the same number fail to start;
* ``OverSubscribe=YES`` on the partition: jobs that ask ``--oversubscribe`` may share CPUs
  (the noise-scale policy's test runs a 2-task driver and a holder on the 2 CPUs); jobs that
  do not ask keep their CPUs to themselves, as on a production partition.

Requirements: root (slurmd runs jobs as their user, munged must run as ``munge``), the
Debian packages slurm-wlm and munge, a ``munge`` user, two CPUs. Where they are missing,
:func:`unavailable_reason` says why and the ``slurm_cluster`` fixture skips (or fails,
with ``BEN_REQUIRE=slurm``, so that CI cannot pass by skipping).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import REPO, unavailable

CLIENTS = ("sbatch", "scontrol", "squeue", "scancel", "sinfo", "srun")
DAEMONS = ("munged", "slurmctld", "slurmd")
# States a job does not leave (a requeued job passes through REQUEUED back to PENDING).
FINAL_STATES = frozenset(
    [
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    ]
)
MARKER = "BEN_TEST_SLURM_ROOT"  # in the environment of slurmd, its steps and every job
SYSTEM_MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
PR_SET_PDEATHSIG = 1


class SlurmUnavailable(RuntimeError):
    """This machine cannot run the test cluster; the message says why."""


def unavailable_reason() -> str | None:
    """Why a test cluster cannot start here, or None when it should."""
    if os.name != "posix" or os.geteuid() != 0:
        return "needs root (slurmd runs jobs as their user, munged runs as user munge)"
    missing = [cmd for cmd in (*DAEMONS, *CLIENTS, "munge", "unmunge") if not shutil.which(cmd)]
    if missing:
        return f"{', '.join(missing)} not installed (Debian: apt-get install slurm-wlm munge)"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no 'munge' user (it comes with the munge package)"
    if (os.cpu_count() or 1) < 2:
        return "needs at least 2 CPUs for the 2-task jobs"
    return None


@dataclass
class Job:
    """One ``scontrol show job`` record."""

    job_id: int
    fields: dict[str, str]

    @property
    def state(self) -> str:
        return self.fields.get("JobState", "UNKNOWN")

    @property
    def exit_code(self) -> str:
        return self.fields.get("ExitCode", "")

    @property
    def restarts(self) -> int:
        return int(self.fields.get("Restarts", "0"))

    @property
    def log_path(self) -> Path:
        return Path(self.fields["StdOut"])

    def log(self) -> str:
        """The job's output file (stdout and stderr), '' when there is none (yet)."""
        try:
            return self.log_path.read_text(errors="replace")
        except (KeyError, OSError):
            return ""

    def describe(self) -> str:
        keys = ("JobState", "Reason", "ExitCode", "Restarts", "RunTime", "TimeLimit", "StdOut")
        summary = " ".join(f"{k}={self.fields.get(k, '?')}" for k in keys)
        return f"job {self.job_id}: {summary}\n--- log (last 60 lines) ---\n" + "\n".join(
            self.log().splitlines()[-60:]
        )


def parse_job_record(line: str) -> dict[str, str]:
    """``Key=Value Key=Value ...`` (scontrol -o) -> dict; values here hold no spaces."""
    return dict(re.findall(r"(\w[\w:/]*)=(\S*)", line))


def _free_ports(count: int) -> list[int]:
    """Ports free right now (held open together, so they differ)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _node_hardware() -> tuple[int, int]:
    """(CPUs, RealMemory in MB) as slurmd itself sees them."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30).stdout
    fields = parse_job_record(out.splitlines()[0]) if out else {}
    cpus = int(fields.get("CPUs", os.cpu_count() or 1))
    memory = int(fields.get("RealMemory", 1024))
    return cpus, max(memory - 256, 256)  # a little less than reported: the node must fit


class SlurmCluster:
    """A single-node Slurm in a temporary folder; see the module docstring."""

    def __init__(self, keep: bool = False):
        self.keep = keep  # leave the folder (logs, conf) behind for debugging
        self.host = socket.gethostname().split(".")[0]
        self.root = Path(tempfile.mkdtemp(prefix="ben-slurm-", dir="/tmp"))
        # munged (user munge) must reach its files through this folder.
        self.root.chmod(0o755)
        self.conf = self.root / "etc" / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket.2"
        self.procs: dict[str, subprocess.Popen] = {}
        self.notes: list[str] = []  # machine-specific decisions, for the test report
        self._stopped = False
        atexit.register(self.stop)

    # ------------------------------------------------------------------ environment

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment for client commands and jobs: pointed at this
        cluster, without the Slurm variables of any job the tests themselves run in."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))
        }
        env.update(SLURM_CONF=str(self.conf), **{MARKER: str(self.root)}, **extra)
        return env

    def run(
        self, *cmd: str, check: bool = True, timeout: float = 60, **kwargs
    ) -> subprocess.CompletedProcess:
        kwargs.setdefault("env", self.env())
        result = subprocess.run(
            list(cmd), capture_output=True, text=True, timeout=timeout, **kwargs
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd)} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result

    # ------------------------------------------------------------------ start

    def start(self, timeout: float = 60) -> None:
        """Start munged, slurmctld and slurmd; return once the node is idle."""
        try:
            self._start_munge()
            self._write_conf()
            self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
            self._wait_for(self._ping_ok, timeout, "slurmctld to answer")
            self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.host])
            self._wait_for(lambda: self.node_state() == "idle", timeout, "the node to be idle")
        except SlurmUnavailable:
            raise
        except Exception as err:
            raise SlurmUnavailable(f"{err}\n{self.daemon_logs()}") from err

    def _start_munge(self) -> None:
        """munged with its own key, socket, pid and log here; else the system's munged."""
        folder = self.munge_socket.parent
        folder.mkdir()
        key = folder / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        for path in (folder, key):
            shutil.chown(path, "munge", "munge")
        args = [
            "munged",
            "--foreground",
            f"--socket={self.munge_socket}",
            f"--key-file={key}",
            f"--pid-file={folder / 'munged.pid'}",
            f"--log-file={folder / 'munged.log'}",
            f"--seed-file={folder / 'munged.seed'}",
        ]
        self._spawn("munged", args, user="munge")
        try:
            self._wait_for(self._munge_ok, 15, "munged to answer")
            return
        except TimeoutError as err:
            private_error = f"{err}; {self._tail(folder / 'munged.log')}"
            self._terminate("munged")
        # Fallback: the default locations (a munged that is already running, or one we start).
        self.munge_socket = SYSTEM_MUNGE_SOCKET
        self.notes.append(f"private munged failed ({private_error}); using {SYSTEM_MUNGE_SOCKET}")
        if self._munge_ok():
            return
        SYSTEM_MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
        shutil.chown(SYSTEM_MUNGE_SOCKET.parent, "munge", "munge")
        self._spawn("munged", ["munged", "--foreground"], user="munge")
        try:
            self._wait_for(self._munge_ok, 15, "the system munged to answer")
        except TimeoutError as err:
            raise SlurmUnavailable(f"munged does not start: {private_error}; {err}") from None

    def _munge_ok(self) -> bool:
        if not self.munge_socket.exists():
            return False
        sock = f"--socket={self.munge_socket}"
        try:
            cred = subprocess.run(["munge", "-n", sock], capture_output=True, timeout=10)
            check = subprocess.run(
                ["unmunge", sock], input=cred.stdout, capture_output=True, timeout=10
            )
        except subprocess.TimeoutExpired:
            return False
        return cred.returncode == 0 and check.returncode == 0

    def _write_conf(self) -> None:
        cpus, memory = _node_hardware()
        for name in ("etc", "state", "spool", "log", "tmp"):
            (self.root / name).mkdir(exist_ok=True)
        plugstack = self.root / "etc" / "plugstack.conf"  # none of the system's SPANK plugins
        plugstack.write_text("")
        r = self.root
        ctld_port, slurmd_port = _free_ports(2)
        self.conf.write_text(
            f"""\
# Generated by tests/slurm_cluster.py: a single-node cluster for the job-script tests.
ClusterName=bentest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket},cred_expire=10
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
TmpFS={r}/tmp
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
PlugStackConfig={plugstack}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={r}/log/jobcomp.txt
ReturnToService=2
SchedulerParameters=sched_interval=2,bf_interval=2
MinJobAge=86400
KillWait=10
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN
PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""
        )

    def _spawn(self, name: str, args: list[str], user: str | None = None) -> None:
        env = self.env()
        if name == "munged":  # not one of the processes stop() kills by the marker
            env.pop(MARKER)
        out = (self.root / f"{name}.out").open("ab")
        self.procs[name] = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=self.root,
            user=user,
            group=user,
            extra_groups=[] if user else None,
            start_new_session=True,  # a Ctrl-C of the tests reaches stop(), not the daemons
            preexec_fn=_die_with_parent,
        )
        out.close()

    def _wait_for(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} while waiting")
            if ready():
                return
            time.sleep(0.5)
        raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")

    def _ping_ok(self) -> bool:
        result = self.run("scontrol", "ping", check=False, timeout=15)
        return result.returncode == 0 and "UP" in result.stdout

    def node_state(self) -> str:
        result = self.run("sinfo", "-h", "-N", "-o", "%T", check=False, timeout=15)
        return result.stdout.strip().rstrip("*~#")

    @property
    def tmp_fs(self) -> Path:
        """The node's TmpFS (slurm.conf), where the PMIx plugin makes a folder per step."""
        return self.root / "tmp"

    # ------------------------------------------------------------------ jobs

    def sbatch(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> int:
        """``sbatch --parsable ARGS``; returns the job id."""
        result = self.run("sbatch", "--parsable", *args, cwd=cwd, env=env or self.env())
        return int(result.stdout.strip().split(";")[0])

    def submit(self, step: str, *args: str, cwd: Path, env: dict[str, str]) -> int:
        """``jobs/submit.sh STEP --parsable ARGS`` (the documented way); returns the job id."""
        submit = str(REPO / "jobs" / "submit.sh")
        result = self.run("bash", submit, step, "--parsable", *args, cwd=cwd, env=env)
        return int(result.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> Job:
        out = self.run("scontrol", "show", "job", "-o", str(job_id)).stdout
        return Job(job_id, parse_job_record(out))

    def wait(self, job_id: int, timeout: float, poll: float = 1.0) -> Job:
        """Poll ``scontrol show job`` until the job reaches a final state."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job.state in FINAL_STATES:
                return job
            if time.monotonic() > deadline:
                self.run("scancel", str(job_id), check=False)
                raise TimeoutError(f"still {job.state} after {timeout:.0f} s\n{job.describe()}")
            time.sleep(poll)

    def completion_records(self) -> list[dict[str, str]]:
        """jobcomp/filetxt: one record per finished run of a job (requeued runs included)."""
        path = self.root / "log" / "jobcomp.txt"
        if not path.is_file():
            return []
        return [parse_job_record(line) for line in path.read_text().splitlines() if line]

    # ------------------------------------------------------------------ stop

    def stop(self) -> None:
        """Cancel the jobs, stop the daemons, kill leftovers, remove the folder. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
                self.cancel_all_jobs()
        finally:
            for name in ("slurmd", "slurmctld"):
                self._terminate(name)
            self._kill_marked_processes()
            self._terminate("munged")
            if not self.keep:
                shutil.rmtree(self.root, ignore_errors=True)
            atexit.unregister(self.stop)

    def cancel_all_jobs(self, timeout: float = 40) -> None:
        """Cancel every queued or running job and wait until the queue is empty."""
        ids = self.run("squeue", "-h", "-o", "%i", check=False, timeout=15).stdout.split()
        if not ids:
            return
        self.run("scancel", *ids, check=False, timeout=15)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.run("squeue", "-h", "-o", "%i", check=False, timeout=15).stdout.strip():
                return
            time.sleep(1)

    def _terminate(self, name: str, timeout: float = 15) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def marked_processes(self) -> list[int]:
        """PIDs of processes carrying this cluster's marker: slurmstepd, job processes."""
        needle = f"{MARKER}={self.root}\0".encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes() + b"\0"
            except OSError:
                continue
            if needle in environ:
                pids.append(int(entry.name))
        return pids

    def _kill_marked_processes(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while (pids := self.marked_processes()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)

    # ------------------------------------------------------------------ diagnostics

    @staticmethod
    def _tail(path: Path, lines: int = 15) -> str:
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"({path} missing)"

    def daemon_logs(self) -> str:
        parts = []
        for path in [
            *sorted(self.root.glob("*.out")),
            self.root / "munge" / "munged.log",
            self.root / "log" / "slurmctld.log",
            self.root / "log" / "slurmd.log",
        ]:
            if path.exists():
                parts.append(f"--- {path} ---\n{self._tail(path)}")
        return "\n".join(parts)

    def describe(self) -> str:
        return json.dumps({"root": str(self.root), "host": self.host, "notes": self.notes})


@pytest.fixture(scope="session", name="slurm_cluster")
def slurm_cluster_fixture() -> Iterator[SlurmCluster]:
    """A running single-node Slurm for the whole session, stopped at its end (even when a
    test failed). Skips with the reason where the machine cannot run one, unless
    BEN_REQUIRE names slurm (then it fails)."""
    reason = unavailable_reason()
    if reason:
        unavailable("slurm", f"no Slurm test cluster on this machine: {reason}")
    cluster = SlurmCluster(keep=os.environ.get("BEN_KEEP_SLURM", "") not in ("", "0"))
    try:
        cluster.start()
    except SlurmUnavailable as err:
        cluster.stop()
        unavailable("slurm", f"the Slurm test cluster did not start: {err}")
    try:
        yield cluster
    finally:
        cluster.stop()
