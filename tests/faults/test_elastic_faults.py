"""Faults injected into real elastic runs (horovodrun --host-discovery-script on this
machine, Gloo over loopback): a run folder held by another run, and a discovery script that
prints garbage or nothing."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import (
    DISCOVER,
    REPO,
    elastic_command,
    hold_run_folder,
    run_elastic,
    wait_for_text,
    worker_on,
)

from bigearthnet.core import runlock
from bigearthnet.formats.history import read_history

# The project's discovery until the test writes a fault into $FAULT_MODE: then what a
# broken discovery prints (an error on stdout, a stray line), nothing at all, or a hang.
FAULTY_DISCOVERY = """#!/bin/bash
case "$(cat "$FAULT_MODE" 2>/dev/null)" in
  garbage) printf 'squeue: error: timed out\\nnot a host line\\nlocalhost:1\\n' ;;
  nothing) ;;
  hang) sleep 3600 ;;
  *) exec bash "$REAL_DISCOVERY" ;;
esac
"""
ELASTIC_TIMEOUT_S = 15  # horovodrun --elastic-timeout: how long the driver waits for slots
DISCOVERY_TIMEOUT_S = 3  # discover_hosts.sh: how long another discovery may take to answer


def _hosts(tmp_path: Path, text: str) -> dict[str, str]:
    """The environment of a run whose discovery script reads ``text`` from one holder."""
    hosts = tmp_path / "hosts"
    hosts.mkdir(exist_ok=True)
    (hosts / "driver.hosts").write_text(text)
    return {**os.environ, "ELASTIC_HOSTS_DIR": str(hosts), "TF_CPP_MIN_LOG_LEVEL": "1"}


def _worker_lines(output: str, rank: int) -> list[str]:
    """What worker ``rank`` printed (horovodrun prefixes its lines with ``[rank]<stream>:``)."""
    prefix = f"[{rank}]<"
    return [line.split(">:", 1)[1] for line in output.splitlines() if line.startswith(prefix)]


@pytest.mark.fault
@pytest.mark.horovod
@pytest.mark.slow
def test_elastic_run_on_a_held_folder_stops_every_worker_naming_the_holder(
    tmp_path: Path, shards_v1: Path, fault_row
) -> None:
    """2 elastic workers on a run folder another process holds: rank 0 cannot lock it, and
    every worker learns so at the first synchronisation - each exits 2 with the one line
    naming the holder, no traceback, nothing written into the folder."""
    run = tmp_path / "run"
    holder = hold_run_folder(run)
    try:
        started = time.monotonic()
        result = subprocess.run(
            elastic_command(shards_v1, run, 2, 3),
            cwd=REPO,
            env=_hosts(tmp_path, "localhost:2\n"),
            capture_output=True,
            text=True,
            timeout=300,
        )
        seconds = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-4000:]
    assert "Traceback" not in "\n".join(_worker_lines(output, 0) + _worker_lines(output, 1))
    for rank in (0, 1):
        said = [line for line in _worker_lines(output, rank) if "in use by" in line]
        assert len(said) == 1, output[-4000:]
        assert f"PID {holder.pid}" in said[0] and "(exit 2)" not in said[0]
    assert "Exit code: 2" in output, output[-4000:]
    assert not (run / "checkpoints").exists() and not (run / "history.csv").exists()
    assert runlock.LOCK_FILE in os.listdir(run)
    fault_row(
        "elastic run (2 workers) on a folder in use",
        data_lost="none (every worker exits 2 naming the holder)",
        detect_s=seconds,
    )


def _events(run: Path) -> list[dict[str, str]]:
    with open(run / "elastic_events.csv", newline="") as f:
        return list(csv.DictReader(f))


def _run_with_faulty_discovery(
    tmp_path: Path,
    shards: Path,
    mode: str,
    epochs: int,
    *,
    outlast_s: float = 0,
    then: Callable[[Path], None] | None = None,
    after_epoch: int = 2,
):
    """2 elastic workers; once epoch ``after_epoch`` is done, discovery prints ``mode`` for
    good, through discover_hosts.sh's check (how jobs/elastic/train_elastic.sbatch runs any
    discovery).
    ``outlast_s``: the run must still be going that long after the fault; ``then(run)``
    runs after that (it may end the run). Returns the run folder, horovodrun's exit code
    and log, and the seconds from the fault to the end."""
    script = tmp_path / "discover.sh"
    script.write_text(FAULTY_DISCOVERY)
    script.chmod(0o755)
    env = {
        **_hosts(tmp_path, "localhost:2\n"),
        "FAULT_MODE": str(tmp_path / "fault"),
        "REAL_DISCOVERY": str(DISCOVER),
        "HOROVOD_ELASTIC_TIMEOUT": str(ELASTIC_TIMEOUT_S),
        "DISCOVERY_TIMEOUT_S": str(DISCOVERY_TIMEOUT_S),
    }
    run, log_path = tmp_path / "run", tmp_path / "horovodrun.log"
    cmd = elastic_command(shards, run, 2, epochs, discover=f"{DISCOVER} {script}")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_text(log_path, f"[rank 0/2] epoch {after_epoch}/", proc, 240)
            (tmp_path / "fault").write_text(mode)
            faulted = time.monotonic()
            time.sleep(outlast_s)
            assert proc.poll() is None, log_path.read_text(errors="replace")[-4000:]
            if then is not None:
                then(run)
            proc.wait(timeout=ELASTIC_TIMEOUT_S + 240)
        finally:
            if proc.poll() is None:
                proc.kill()
    return run, proc.returncode, log_path.read_text(errors="replace"), time.monotonic() - faulted


@pytest.mark.fault
@pytest.mark.horovod
@pytest.mark.slow
def test_discovery_printing_nothing_ends_the_run_with_its_position_checkpointed(
    tmp_path: Path, shards_v1: Path, fault_row
) -> None:
    """Discovery lists no host any more: the driver tells the workers at their next commit;
    before the reset rank 0 checkpoints that committed position and records the event; the
    driver gives up after its timeout and ends them. The rerun resumes at that sample."""
    # The driver hears of the fault within a few steps (commits every 4 of 36), but on a
    # loaded machine its discovery calls lag: 3 epochs left after the fault once ran out
    # before the workers heard of it (CI beside a demo, load ~9). 5 are left now.
    epochs = 6
    run, _, output, seconds = _run_with_faulty_discovery(
        tmp_path, shards_v1, "nothing", epochs, after_epoch=1
    )
    assert "Timed out waiting for" in output, output[-4000:]  # the driver gave up
    assert len(read_history(run)) < epochs
    (event,) = [e for e in _events(run) if e["event"] != "resize"]
    assert event["event"] == "hosts removed" and event["old_size"] == "2", event
    record = json.loads((run / "checkpoints" / "latest.json").read_text())
    if int(event["consumed"]):  # mid-epoch: that position, not the epoch before it
        assert record["consumed"] == int(event["consumed"]), (record, event)
        assert record["epoch"] == int(event["epoch"]) - 1
    else:  # at an epoch's start: the epoch's checkpoint is that position
        assert record["epoch"] == int(event["epoch"]) - 1 and record["consumed"] == 0
    (tmp_path / "fault").unlink()
    rerun = run_elastic(shards_v1, run, 1, epochs, _hosts(tmp_path, "localhost:1\n"))
    out = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, out[-4000:]
    assert f"epoch {event['epoch']} of {epochs}, {event['consumed']} samples of it done" in out
    assert [r.epoch for r in read_history(run)] == list(range(1, epochs + 1))
    fault_row(
        "elastic: host discovery lists no host for longer than the timeout (15 s)",
        runs=2,
        data_lost="none (position checkpointed before the reset; the rerun resumes there)",
        detect_s=seconds,
    )


@pytest.mark.fault
@pytest.mark.horovod
@pytest.mark.slow
def test_discovery_printing_garbage_keeps_the_run_on_the_hosts_still_listed(
    tmp_path: Path, shards_v1: Path, fault_row
) -> None:
    """Discovery prints an error message and a stray line, with one host line left, for
    longer than the elastic timeout: the stray lines are dropped (Horovod alone would take
    one for a host and ignore the whole answer for the other), the world shrinks to the
    host still listed - recorded, position checkpointed - and the run goes on there until
    the test stops it (SIGUSR1: checkpoint, exit 3), however fast the epochs are."""

    def stop_once_an_epoch_ran_on_one_worker(run: Path) -> None:
        deadline = time.monotonic() + 240
        while not any(r.world_size == 1 for r in read_history(run)):
            assert time.monotonic() < deadline, "no epoch on the host still listed"
            time.sleep(0.5)
        os.kill(worker_on("localhost", run), signal.SIGUSR1)

    run, code, output, _ = _run_with_faulty_discovery(
        tmp_path,
        shards_v1,
        "garbage",
        epochs=1000,  # more than any machine trains before the test stops it
        outlast_s=ELASTIC_TIMEOUT_S + 3,
        then=stop_once_an_epoch_ran_on_one_worker,
    )
    assert code != 0 and "Exit code: 3" in output, output[-4000:]  # our stop, not a failure
    assert "ignoring 'not a host line'" in output and "ignoring 'squeue: error" in output
    events = _events(run)
    assert [e["event"] for e in events] == ["hosts removed", "resize"], events
    assert (events[1]["old_size"], events[1]["new_size"]) == ("2", "1")
    rows = read_history(run)
    assert [r.epoch for r in rows] == list(range(1, len(rows) + 1))
    sizes = [r.world_size for r in rows]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] == 1, sizes  # 2s, then 1s
    fault_row(
        "elastic: host discovery prints garbage beside 1 of 2 hosts, longer than the timeout",
        data_lost="none (the run goes on with the host still listed)",
        detect_s=None,
    )


@pytest.mark.fault
@pytest.mark.horovod
@pytest.mark.slow
def test_discovery_that_hangs_keeps_the_run_on_its_hosts_and_lets_it_end(
    tmp_path: Path, shards_v1: Path, fault_row
) -> None:
    """Discovery stops answering for good. Horovod runs it holding the lock its driver
    needs for every change of hosts and joins it at the end, so a hang would stall the run
    at its last epoch for ever; discover_hosts.sh gives it DISCOVERY_TIMEOUT_S, then fails
    (Horovod warns and keeps its hosts), and the run finishes on the workers it has."""
    epochs = 8
    run, code, output, _ = _run_with_faulty_discovery(
        tmp_path, shards_v1, "hang", epochs, outlast_s=2 * DISCOVERY_TIMEOUT_S
    )
    assert code == 0, output[-4000:]
    assert f"gave no answer within {DISCOVERY_TIMEOUT_S} s" in output, output[-4000:]
    rows = read_history(run)
    assert [r.epoch for r in rows] == list(range(1, epochs + 1))
    assert {r.world_size for r in rows} == {2}
    fault_row(
        "elastic: host discovery hangs (stops answering) for good",
        data_lost="none (each call given up after 3 s; the run finishes on its hosts)",
        detect_s=None,
    )
