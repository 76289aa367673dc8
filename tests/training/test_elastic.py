"""Elastic training: exact re-slicing across resizes, host discovery, a real
horovodrun --min-np/--max-np run that grows, loses a worker, and finishes, and one that
stops on Slurm's SIGUSR1 warning and resumes at the same sample on another world size."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    DISCOVER,
    REPO,
    TINY_RECIPE,
    elastic_command,
    run_elastic,
    wait_for_text,
    worker_on,
)

from bigearthnet.core.batch import BatchPlan
from bigearthnet.data.batching import step_slices
from bigearthnet.formats.history import read_history
from bigearthnet.training.gns import NoiseEstimate, adascale_gain


@pytest.mark.parametrize("sizes", [[1, 2, 2, 1, 3], [4, 1], [3, 3, 3, 2, 5, 1]])
def test_resizes_within_an_epoch_skip_and_repeat_nothing(sizes: list[int]) -> None:
    total, batch = 103, 4
    order = np.random.default_rng(0).permutation(total)
    consumed, seen, step = 0, [], 0
    while consumed < total:
        size = sizes[min(step // 3, len(sizes) - 1)]  # the world changes every 3 steps
        take, parts = step_slices(order, consumed, batch, size)
        assert len(parts) == size and all(len(p) >= 1 for p in parts)  # never after a merge
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
        seen += [int(x) for p in parts for x in p]
        consumed += take
        step += 1
    assert sorted(seen) == list(range(total)) and len(seen) == total


def test_tail_smaller_than_world_is_merged() -> None:
    assert BatchPlan(4, 2).step_take(10) == 8  # 2 left: a full step
    assert BatchPlan(4, 2).step_take(9) == 9  # 1 left < 2 ranks: merged
    assert BatchPlan(4, 3).step_take(13) == 13
    assert BatchPlan(4, 3).step_take(10) == 10  # less than one step
    # Only a world that grew near the end of an epoch sees fewer samples than ranks.
    take, parts = step_slices(np.arange(5), consumed=3, batch_size=4, size=3)
    assert take == 2 and sorted(map(len, parts)) == [0, 1, 1]


def _discover(tmp_path: Path, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {**os.environ, "ELASTIC_HOSTS_DIR": str(tmp_path)}
    return subprocess.run(["bash", str(DISCOVER)], capture_output=True, text=True, env=env)


def test_discovery_sums_slots_and_skips_bad_lines(tmp_path: Path) -> None:
    me = socket.gethostname().split(".")[0]
    result = _discover(
        tmp_path,
        {
            "job1.hosts": f"localhost:2\n{me}:1\n",
            "job2.hosts": "localhost:1\nnot a host line\n",
            "job3.hosts": "no-such-host.invalid:4\n",
            "notes.txt": "localhost:99\n",
        },
    )
    assert result.returncode == 0
    assert result.stdout.splitlines() == sorted([f"{me}:1", "localhost:3"])
    assert "ignoring 'not a host line' in job2.hosts" in result.stderr
    assert "unknown host 'no-such-host.invalid' in job3.hosts" in result.stderr


def test_discovery_with_no_holders_prints_nothing(tmp_path: Path) -> None:
    result = _discover(tmp_path, {})
    assert result.returncode == 0 and result.stdout == ""
    env = {**os.environ, "ELASTIC_HOSTS_DIR": str(tmp_path / "x")}
    missing = subprocess.run(["bash", str(DISCOVER)], capture_output=True, text=True, env=env)
    assert missing.returncode == 1 and "does not exist" in missing.stderr


@contextlib.contextmanager
def _grown_to_two(tmp_path: Path, shards: Path, epochs: int, *extra: str, eval_test: bool = False):
    """An elastic run on 1 worker that a holder grows to 2 after its second epoch. Yields
    (run folder, horovodrun, the holder's hosts file, the second host) once the world is
    2; the run is killed if it still runs when the block ends. Horovod blacklists the
    host of a failed worker, so the second worker runs on a second name of this machine
    (its short hostname), as a second node would on a cluster."""
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    (hosts / "driver.hosts").write_text("localhost:1\n")
    second = socket.gethostname().split(".")[0]
    assert second != "localhost"
    run, log_path = tmp_path / "run", tmp_path / "horovodrun.log"
    cmd = elastic_command(shards, run, 1, epochs, *extra, eval_test=eval_test)
    env = {**os.environ, "ELASTIC_HOSTS_DIR": str(hosts), "TF_CPP_MIN_LOG_LEVEL": "1"}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_text(log_path, "epoch 2/", proc, 240)
            holder = hosts / "holder-1.hosts"
            holder.write_text(f"{second}:1\n")
            wait_for_text(log_path, "world size 1 -> 2", proc, 240)
            yield run, proc, holder, second
        finally:
            if proc.poll() is None:
                proc.kill()


def _wait_for_epochs_at(
    run: Path, world_size: int, count: int, proc, log: Path, timeout: float
) -> None:
    """Wait until history.csv has ``count`` rows at ``world_size`` ranks."""
    deadline = time.monotonic() + timeout
    while True:
        path = run / "history.csv"
        rows = list(csv.DictReader(path.open(newline=""))) if path.is_file() else []
        if sum(r["world_size"] == str(world_size) for r in rows) >= count:
            return
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"no {count} epochs at {world_size} ranks"
        time.sleep(0.3)


@pytest.mark.slow
@pytest.mark.horovod
def test_grow_then_lose_a_worker_then_finish(tmp_path: Path, shards_v1: Path) -> None:
    """1 worker -> a holder adds a host -> 2 workers -> that worker is SIGKILLed and its
    holder file removed -> 1 worker continues from the last commit -> all epochs done."""
    epochs = 10  # as many as the adascale test's: the grow and the kill come well before
    grown = _grown_to_two(tmp_path, shards_v1, epochs, eval_test=True)
    with grown as (run, proc, holder, second):
        # Two epochs finished at 2 ranks: the first of them is committed, so the rollback
        # after the kill cannot rewrite it at 1 rank (one epoch alone could be).
        _wait_for_epochs_at(run, 2, 2, proc, tmp_path / "horovodrun.log", 240)
        holder.unlink()
        os.kill(worker_on(second, run), 9)
        proc.wait(timeout=600)
    output = (tmp_path / "horovodrun.log").read_text(errors="replace")
    assert proc.returncode == 0, output[-4000:]
    assert "world size 2 -> 1" in output
    with open(run / "elastic_events.csv", newline="") as f:
        resizes = [r for r in csv.DictReader(f) if r["event"] == "resize"]
        events = [(int(r["old_size"]), int(r["new_size"])) for r in resizes]
    assert events[:2] == [(1, 2), (2, 1)]
    with open(run / "history.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == list(range(1, epochs + 1))
    assert {"1", "2"} <= {r["world_size"] for r in rows}
    assert all(np.isfinite(float(r["loss"])) for r in rows)
    assert json.loads((run / "checkpoints" / "latest.json").read_text())["epoch"] == epochs
    # Like a fixed-size run, the elastic run ends with the test evaluation of its best
    # checkpoint, scored by the world that trained last.
    metrics = json.loads((run / "eval-test" / "metrics.json").read_text())
    assert metrics["count"] == 48 and metrics["checkpoint"] == "best"


@pytest.mark.slow
@pytest.mark.horovod
def test_warning_stops_every_worker_and_the_rerun_resumes_at_that_sample(
    tmp_path: Path, shards_v1: Path
) -> None:
    """SIGUSR1 to one of 2 workers: both stop after the same step, rank 0 checkpoints the
    position in the epoch, horovodrun reports exit code 3 (what the job script requeues
    on). The rerun, on 1 worker, continues from that sample and finishes."""
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    run, log_path, epochs = tmp_path / "run", tmp_path / "first.log", 5
    env = {**os.environ, "ELASTIC_HOSTS_DIR": str(hosts), "TF_CPP_MIN_LOG_LEVEL": "1"}
    (hosts / "driver.hosts").write_text("localhost:2\n")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            elastic_command(shards_v1, run, 2, epochs),
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_text(log_path, "[rank 0/2] epoch 2/", proc, 240)
            os.kill(worker_on("localhost", run), signal.SIGUSR1)
            proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    first = log_path.read_text(errors="replace")
    assert proc.returncode != 0 and "Exit code: 3" in first, first[-4000:]
    assert first.count("rerun resumes (exit 3: requeue me)") == 2, first[-4000:]  # both
    record = json.loads((run / "checkpoints" / "latest.json").read_text())
    assert 2 <= record["epoch"] < epochs
    done = len(read_history(run))
    if record.get("consumed"):  # stopped inside an epoch: the position is saved
        consumed = record["consumed"]
        assert record["epoch"] == done and record["order"] == "global" and record["loss_steps"] > 0
        resumed = f"epoch {done + 1} of {epochs}, {consumed} samples of it done"
    else:  # the vote fell on an epoch's last step: that epoch was finished and saved
        resumed = f"epoch {done + 1} of {epochs}, 0 samples of it done"

    (hosts / "driver.hosts").write_text("localhost:1\n")
    second = run_elastic(shards_v1, run, 1, epochs, env)
    output = second.stdout + second.stderr
    assert second.returncode == 0, output[-4000:]
    assert resumed in output, output[-4000:]
    with open(run / "history.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == list(range(1, epochs + 1))
    assert [r["world_size"] for r in rows][done:] == ["1"] * (epochs - done)
    assert all(np.isfinite(float(r["loss"])) for r in rows)


def _wait_for_rows(run: Path, *, world_size: int, count: int, proc: subprocess.Popen) -> None:
    """Wait until ``count`` epochs of the running ``proc`` ended on ``world_size`` workers."""
    deadline = time.monotonic() + 240
    while sum(r.world_size == world_size for r in read_history(run)) < count:
        assert proc.poll() is None and time.monotonic() < deadline, read_history(run)
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.horovod
def test_adascale_gain_follows_real_resizes(tmp_path: Path, shards_v1: Path) -> None:
    """--lr-scaling adascale in an elastic run that grows 1 -> 2 workers and shrinks back:
    on 1 worker the LR is the base LR (one batch size: gain 1), on 2 it is the base LR
    times the gain of the noise estimate recorded in that epoch's row, inside (1, 2] (gain
    1 in an epoch that grew too late in it to have an estimate)."""
    adascale = ["--lr-scaling", "adascale", "--schedule", "constant"]
    with _grown_to_two(tmp_path, shards_v1, 10, *adascale) as (run, proc, holder, _):
        _wait_for_rows(run, world_size=2, count=3, proc=proc)
        holder.unlink()  # a clean shrink: the holder gave its host back
        proc.wait(timeout=600)
    output = (tmp_path / "horovodrun.log").read_text(errors="replace")
    assert proc.returncode == 0, output[-4000:]
    rows = read_history(run)
    assert [r.epoch for r in rows] == list(range(1, 11))
    base_lr = float(TINY_RECIPE[TINY_RECIPE.index("--lr") + 1])
    sizes = [r.world_size for r in rows]
    assert sizes[0] == 1 and 2 in sizes and sizes[-1] == 1, sizes
    gains = []
    for row in rows:
        measured = row.gns_grad_sq is not None and row.gns_trace is not None
        if row.world_size == 1 or not measured:  # one batch size, or no estimate yet
            assert row.lr == pytest.approx(base_lr, rel=1e-6), row
            continue
        estimate = NoiseEstimate(row.gns_grad_sq, row.gns_trace, 1)
        gains.append(adascale_gain(estimate, base_batch=row.global_batch // 2, scale=2))
        assert row.lr == pytest.approx(base_lr * gains[-1], rel=1e-4), row
    assert gains and all(1.0 < g <= 2.0 for g in gains), (gains, rows)
