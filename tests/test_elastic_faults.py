"""Faults injected into real elastic runs (horovodrun --host-discovery-script on this
machine, Gloo over loopback): a run folder held by another run, and a discovery script that
prints garbage or nothing."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from helpers import REPO, elastic_command, hold_run_folder

from bigearthnet import runlock


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
