"""One writer per run folder (bigearthnet.core.runlock), and a resume that survives a damaged
latest checkpoint."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest
from helpers import hold_run_folder, train_argv

import train
from bigearthnet.core import runlock
from bigearthnet.formats.history import read_history


def _train(data: Path, run: Path, *extra: str) -> int:
    return train.main(train_argv(data, run, 1, *extra))


@pytest.mark.fault
@pytest.mark.parametrize("mechanism", ["flock", "lease"])
def test_second_run_stops_naming_the_holder_until_it_dies(
    mechanism, tmp_path, shards_v1, monkeypatch, reported_errors, fault_row
):
    monkeypatch.setenv(runlock.MECHANISM_ENV, mechanism)
    run = tmp_path / "run"
    holder = hold_run_folder(run, **{runlock.MECHANISM_ENV: mechanism})
    try:
        started = time.monotonic()
        assert _train(shards_v1, run) == 2
        seconds = time.monotonic() - started
        (line,) = reported_errors()
        assert f"PID {holder.pid}" in line and socket.gethostname() in line
        assert str(run) in line and "in use" in line
        assert not (run / "history.csv").exists()
    finally:
        holder.send_signal(signal.SIGKILL)  # no chance to clean up
        holder.wait()
    # flock: the kernel dropped the lock; lease: the file stays, its holder is dead here.
    assert _train(shards_v1, run) == 0
    assert len(read_history(run)) == 1
    fault_row(
        f"second run on a folder in use ({mechanism}); holder then SIGKILLed",
        runs=2,
        data_lost="none (refused at start; runs once the holder is gone)",
        detect_s=seconds,
    )


def test_a_live_lease_elsewhere_waits_for_staleness_or_force_unlock(
    tmp_path, shards_v1, monkeypatch
):
    monkeypatch.setenv(runlock.MECHANISM_ENV, "lease")
    run = tmp_path / "run"
    run.mkdir()
    lease = {
        "host": "node-elsewhere",
        "pid": 1,
        "started": "2026-11-24T00:00:00",
        "job_id": "4242",
        "mechanism": "lease",
    }
    (run / runlock.LEASE_FILE).write_text(json.dumps({**lease, "heartbeat": time.time()}))
    assert _train(shards_v1, run) == 2  # alive for all we know: its heartbeat is fresh
    # One step shows the takeover: the lock is taken before any training.
    assert _train(shards_v1, run, "--force-unlock", "--max-steps-per-epoch", "1") == 0
    stale = time.time() - runlock.STALE_AFTER_S - 1
    (run / runlock.LEASE_FILE).write_text(json.dumps({**lease, "heartbeat": stale}))
    # A stale lease is taken over: train.py takes the folder through this same acquire (the
    # refusal above went through it), so its API shows the takeover without a third training.
    lock = runlock.acquire(run)
    try:
        taken = json.loads((run / runlock.LEASE_FILE).read_text())
        assert lock.holder.mechanism == "lease"
        assert (taken["host"], taken["pid"]) == (socket.gethostname(), os.getpid())
    finally:
        lock.release()
    assert not (run / runlock.LEASE_FILE).exists()


def test_force_unlock_refuses_while_the_holder_runs_here(tmp_path, shards_v1, monkeypatch):
    monkeypatch.setenv(runlock.MECHANISM_ENV, "lease")
    run = tmp_path / "run"
    holder = hold_run_folder(run, **{runlock.MECHANISM_ENV: "lease"})
    try:
        assert _train(shards_v1, run, "--force-unlock") == 2
        assert (run / runlock.LEASE_FILE).is_file()
    finally:
        holder.kill()
        holder.wait()


def test_no_flock_falls_back_to_a_lease(tmp_path, monkeypatch, rank_log):
    def no_flock(fd, operation):
        raise OSError(38, "Function not implemented")  # ENOSYS, as on some Lustre mounts

    monkeypatch.setattr(runlock.fcntl, "flock", no_flock)
    lock = runlock.acquire(tmp_path / "run")
    try:
        assert lock.holder.mechanism == "lease"
        assert (tmp_path / "run" / runlock.LEASE_FILE).is_file()
        assert "using a lease" in rank_log.text
    finally:
        lock.release()
    assert not (tmp_path / "run" / runlock.LEASE_FILE).exists()


# ----------------------------------------------------------------- damaged checkpoints


@pytest.mark.fault
def test_resume_falls_back_past_a_truncated_latest_checkpoint(
    tmp_path, shards_v1, rank_log, fault_row
):
    """Power loss after the rename: the newest checkpoint's data file is cut short. The
    rerun warns, resumes from the previous epoch's checkpoint and ends at the epoch count."""
    run = tmp_path / "run"
    assert _train(shards_v1, run, "--epochs", "2") == 0
    latest = json.loads((run / "checkpoints" / "latest.json").read_text())["folder"]
    assert latest == "latest-e0002" and (run / "checkpoints" / "latest-e0001").is_dir()
    data = next((run / "checkpoints" / latest).glob("ckpt.data-*"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 3])
    assert _train(shards_v1, run, "--epochs", "3") == 0
    assert "falling back to latest-e0001" in rank_log.text
    assert [r.epoch for r in read_history(run)] == [1, 2, 3]  # epoch 2 trained again
    fault_row(
        "latest checkpoint truncated after its rename (power loss)",
        data_lost="1 epoch (retrained from the previous checkpoint)",
        detect_s=None,
    )


@pytest.mark.fault
def test_no_readable_checkpoint_is_an_error_not_a_fresh_start(
    tmp_path, shards_v1, reported_errors, fault_row
):
    run = tmp_path / "run"
    assert _train(shards_v1, run, "--epochs", "1") == 0
    for data in (run / "checkpoints").glob("latest-e*/ckpt.data-*"):
        data.write_bytes(b"")
    (run / "checkpoints" / "latest.json").write_text('{"epoch": 1, "mod')  # torn pointer
    assert _train(shards_v1, run, "--epochs", "2") == 2
    (line,) = reported_errors()
    assert "no readable checkpoint" in line and "--no-resume" in line
    assert len(read_history(run)) == 1
    fault_row(
        "every checkpoint and the pointer damaged",
        data_lost="none overwritten (exit 2, --no-resume to start over)",
        detect_s=None,
    )


@pytest.mark.fault
def test_disk_full_keeps_the_previous_checkpoint(shards_v1, small_disk, reported_errors, fault_row):
    """A run folder on a small tmpfs that fills up during epoch 2's checkpoint: a one-line
    error, epoch 1's checkpoint and history intact; with space back the rerun resumes."""
    run = small_disk.path / "run"
    assert _train(shards_v1, run, "--epochs", "1") == 0
    filler = small_disk.fill()
    code = _train(shards_v1, run, "--epochs", "2")
    assert code in (1, 2)
    (line,) = reported_errors()
    assert "cannot write" in line and "No space left on device" in line, line
    assert json.loads((run / "checkpoints" / "latest.json").read_text())["epoch"] == 1
    assert [r.epoch for r in read_history(run)] in ([1], [1, 2])
    filler.unlink()
    assert _train(shards_v1, run, "--epochs", "2") == 0
    assert [r.epoch for r in read_history(run)] == [1, 2]
    fault_row(
        "disk full while a checkpoint is written (4 MB tmpfs)",
        runs=3,
        data_lost="the epoch in progress (rerun once space is back)",
        detect_s=None,
    )
