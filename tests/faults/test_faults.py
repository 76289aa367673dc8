"""Faults injected into real runs: a rank killed in a 2-rank run (no hang in a collective,
the checkpoint intact, the rerun resumes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, TINY_RECIPE

import train
from bigearthnet.formats.history import read_history

DETECT_LIMIT_S = 120  # every rank must be gone this long after one is killed


@pytest.mark.parametrize(
    "text, lost",
    [
        # the collective in flight when the peer died (what the survivor of a kill saw here)
        (
            "Graph execution error: [third_party/compatible17_gloo/gloo/transport/tcp/pair.cc:"
            "589] Read error [127.0.0.1]:64174: Connection reset by peer [[{{node grad_6}}]]",
            True,
        ),
        ("Horovod has been shut down. This was caused by an exception on one of the ranks", True),
        ("OOM when allocating tensor with shape[512,64,60,60]", False),
    ],
)
def test_a_dead_peer_is_told_apart_from_other_op_errors(text: str, lost: bool) -> None:
    """Whichever of Horovod's two texts the survivor's op fails with, it stops with the one
    line naming itself; any other op error stays what it is."""
    import tensorflow as tf

    from bigearthnet.core import distributed

    distributed.init()  # the line names this rank
    found = distributed.peer_lost(tf.errors.UnknownError(None, None, text))
    assert (found is not None) == lost
    if found is not None:
        assert "another rank ended during a collective" in str(found)


def rank_pids(run: Path) -> dict[int, int]:
    """Horovod rank -> PID of the training processes working on ``run``."""
    ranks = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = dict(
                line.split(b"=", 1)
                for line in (entry / "environ").read_bytes().split(b"\0")
                if b"=" in line
            )
        except OSError:
            continue
        if str(run).encode() in cmdline and b"HOROVOD_RANK" in environ and b"python" in cmdline[0]:
            ranks[int(environ[b"HOROVOD_RANK"])] = int(entry.name)
    return ranks


def start_two_ranks(data: Path, run: Path, epochs: int) -> subprocess.Popen:
    launcher = Path(sys.executable).with_name("horovodrun")
    argv = ["train.py", "--data", str(data), "--run-dir", str(run), "--epochs", str(epochs)]
    return subprocess.Popen(
        [
            str(launcher),
            "-np",
            "2",
            "-H",
            "localhost:2",
            "--gloo",
            sys.executable,
            *argv,
            *TINY_RECIPE,
            "--no-eval-test",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1"},
    )


def wait_for(predicate, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def kill_a_rank(
    data: Path, run: Path, *, epochs: int, rank: int
) -> tuple[subprocess.Popen, float, str]:
    """Start a 2-rank run, SIGKILL ``rank`` once an epoch is checkpointed; returns the
    launcher (ended), the seconds until every rank was gone, and the output."""
    proc = start_two_ranks(data, run, epochs)
    assert wait_for(lambda: (run / "checkpoints" / "latest.json").is_file(), 300), "no checkpoint"
    pids = rank_pids(run)
    assert set(pids) == {0, 1}, pids
    os.kill(pids[rank], signal.SIGKILL)
    killed = time.monotonic()
    output, _ = proc.communicate(timeout=DETECT_LIMIT_S + 60)
    gone = wait_for(
        lambda: not any(Path(f"/proc/{p}").exists() for p in pids.values()), DETECT_LIMIT_S
    )
    assert gone, "a rank outlived the launcher"
    return proc, time.monotonic() - killed, output


@pytest.mark.fault
@pytest.mark.horovod
@pytest.mark.slow
@pytest.mark.parametrize("victim", [1, 0])
def test_killed_rank_ends_the_run_and_the_rerun_resumes(
    victim, tmp_path, shards_v1, fault_row, rank_log
):
    """Either rank killed: the run ends within DETECT_LIMIT_S. The rerun after rank 0's kill
    (the rank that writes checkpoints) resumes; after rank 1's, the checkpoint is there."""
    run = tmp_path / "run"
    proc, seconds, output = kill_a_rank(shards_v1, run, epochs=40, rank=victim)
    assert proc.returncode != 0
    assert seconds < DETECT_LIMIT_S
    assert f"Process {victim} exit with status code 137" in output  # the launcher's line
    if victim == 1:  # the survivor says why it stopped, in one line
        assert "rank 0/2: another rank ended during a collective" in output
        assert "Traceback" not in output.split("Process 1 exit")[0]
    done = len(read_history(run))
    assert 1 <= done < 40
    if victim == 1:  # the rerun's resume is checked once: after rank 0, the checkpoints' writer
        assert (run / "checkpoints" / "latest.json").is_file()
        fault_row(
            "rank 1 of 2 SIGKILLed mid-run (horovodrun, Gloo)",
            data_lost="the epoch in progress (its epochs checkpointed: a rerun resumes)",
            detect_s=seconds,
        )
        return
    argv = ["--data", str(shards_v1), "--run-dir", str(run), "--epochs", str(done + 1)]
    rerun = train.main([*argv, *TINY_RECIPE, "--no-eval-test"])  # in process: no TF import
    assert rerun == 0, rank_log.text[-2000:]
    assert "resumed from" in rank_log.text
    assert [r.epoch for r in read_history(run)] == list(range(1, done + 2))
    fault_row(
        "rank 0 of 2 SIGKILLed mid-run (horovodrun, Gloo)",
        runs=2,
        data_lost="the epoch in progress (rerun from the epoch checkpoint)",
        detect_s=seconds,
    )


@pytest.mark.fault
@pytest.mark.parametrize("damage", ["changed", "missing", "foreign manifest"])
def test_damaged_data_is_refused_at_start(damage, tmp_path, shards_v1, synth_v1, fault_row):
    """A shard changed or removed after preprocessing, or a manifest from another run over
    these shards: refused before any training, one line, exit 2, the run folder untouched."""
    import shutil

    from helpers import preprocess

    import train

    data = tmp_path / "data"
    shutil.copytree(shards_v1, data)
    victim = sorted(data.glob("train-*.h5"))[0]
    if damage == "changed":
        blob = bytearray(victim.read_bytes())
        blob[len(blob) // 2] ^= 0x01
        victim.write_bytes(bytes(blob))
    elif damage == "missing":
        victim.unlink()
    else:  # the same archive cut into other shards: names match, contents do not
        other = tmp_path / "other"
        assert preprocess(synth_v1, other, "--shard-size", "32", "--seed", "5") == 0
        shutil.copy(other / "manifest.json", data / "manifest.json")
    run = tmp_path / "run"
    argv = ["--data", str(data), "--run-dir", str(run), "--epochs", "1", *TINY_RECIPE]
    started = time.monotonic()
    assert train.main(argv) == 2
    seconds = time.monotonic() - started
    assert not (run / "history.csv").exists() and not (run / "checkpoints").exists()
    what = {
        "changed": "a shard changed after preprocessing (1 bit)",
        "missing": "a shard deleted after preprocessing",
        "foreign manifest": "the manifest of another preprocessing run",
    }[damage]
    fault_row(what, data_lost="none (refused at start, exit 2)", detect_s=seconds)


@pytest.mark.fault
@pytest.mark.horovod
@pytest.mark.slow
def test_disk_full_stops_every_rank_with_one_line(shards_v1, small_disk, fault_row):
    """2 ranks, the run folder on a small tmpfs filled after epoch 1: rank 0 cannot write
    epoch 2's checkpoint, both ranks stop at that epoch's end (no hang), rank 1 saying why;
    epoch 1's checkpoint stays the latest."""
    import json

    run = small_disk.path / "run"
    proc = start_two_ranks(shards_v1, run, epochs=4)
    assert wait_for(lambda: (run / "checkpoints" / "latest.json").is_file(), 300)
    small_disk.fill()
    filled = time.monotonic()
    output, _ = proc.communicate(timeout=300)
    seconds = time.monotonic() - filled
    assert proc.returncode != 0
    assert "cannot write checkpoint" in output and "No space left on device" in output
    assert "[rank 1/2]" in output and "other rank(s) failed while saving the epoch" in output
    assert json.loads((run / "checkpoints" / "latest.json").read_text())["epoch"] >= 1
    fault_row(
        "disk full while rank 0 checkpoints, 2 ranks (4 MB tmpfs)",
        data_lost="the epoch in progress; every rank stops with one line",
        detect_s=seconds,
    )


@pytest.mark.fault
def test_resume_on_another_preprocessing_is_refused_unless_allowed(
    tmp_path, shards_v1, synth_v1, reported_errors, fault_row
):
    """Checkpoints name the shards they were trained on. A copy of those shards elsewhere
    resumes; the same archive preprocessed again with another split is refused at start
    (exit 2, one line naming both, nothing in RUN/ changed) unless --allow-new-data."""
    import shutil

    from helpers import preprocess

    import train
    from bigearthnet.formats.checkpoints import read_pointer
    from bigearthnet.formats.manifest import read_manifest

    run = tmp_path / "run"

    def train_on(data, epochs, *extra):
        argv = ["--data", str(data), "--run-dir", str(run), "--epochs", str(epochs)]
        return train.main([*argv, "--no-eval-test", *TINY_RECIPE, *extra])

    assert train_on(shards_v1, 1) == 0
    trained_on = read_manifest(shards_v1).data_id
    assert read_pointer(run, "latest").data_id == trained_on
    copy = tmp_path / "copy"
    shutil.copytree(shards_v1, copy)
    assert train_on(copy, 2) == 0  # the same shards, moved: the same data
    other = tmp_path / "other"
    assert preprocess(synth_v1, other, "--shard-size", "32", "--seed", "5") == 0
    new_id = read_manifest(other).data_id
    assert new_id != trained_on
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    reported_errors()  # forget the lines of the runs above
    started = time.monotonic()
    assert train_on(other, 3) == 2
    seconds = time.monotonic() - started
    (line,) = reported_errors()
    assert f"trained on {copy} (shards {trained_on})" in line
    assert f"--data {other} holds other shards ({new_id})" in line and "--allow-new-data" in line
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before  # not a byte of the run folder changed
    assert train_on(other, 3, "--allow-new-data") == 0
    assert [r.epoch for r in read_history(run)] == [1, 2, 3]
    assert read_pointer(run, "latest").data_id == new_id
    fault_row(
        "resume with --data of another preprocessing run",
        runs=4,
        data_lost="none (refused at start, exit 2; --allow-new-data resumes)",
        detect_s=seconds,
    )
