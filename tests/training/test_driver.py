"""bigearthnet.training.driver and sources: one epoch loop for fixed-size and elastic runs.

The same cases run through both kinds of run; the position a checkpoint carries resumes
only where the source can map it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers import REPO, elastic_command, train_argv

import train
from bigearthnet.formats.checkpoints import CheckpointRecord
from bigearthnet.formats.history import read_history
from bigearthnet.formats.position import Position
from bigearthnet.formats.run_status import read_status

TARGET = 0.3  # the tiny model passes it within a few epochs on the synthetic archive
EPOCHS = 12


def _train(kind: str, data: Path, run: Path, log, *extra: str) -> subprocess.CompletedProcess:
    """A fixed-size run in process (``log``: rank_log, its lines as the stderr), an elastic
    one through horovodrun: a subprocess would add only a TensorFlow import."""
    if kind == "fixed":
        code = train.main(train_argv(data, run, EPOCHS, *extra))
        return subprocess.CompletedProcess(["train.py"], code, "", log.text)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1"}
    hosts = run.parent / f"{run.name}-hosts"  # the discovery script's folder: one slot
    hosts.mkdir(parents=True)
    (hosts / "driver.hosts").write_text("localhost:1\n")
    env["ELASTIC_HOSTS_DIR"] = str(hosts)
    cmd = elastic_command(data, run, 1, EPOCHS, *extra)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


ELASTIC = pytest.param("elastic", marks=[pytest.mark.slow, pytest.mark.horovod])


@pytest.mark.parametrize("kind", ["fixed", ELASTIC])
def test_target_f1_ends_fixed_and_elastic_runs_alike(
    kind: str, tmp_path: Path, shards_v1: Path, rank_log
) -> None:
    """--target-f1 stops the run after the first epoch whose validation micro-F1 reaches it
    (an elastic run used to train on to --epochs)."""
    run = tmp_path / kind
    done = _train(kind, shards_v1, run, rank_log, "--target-f1", str(TARGET))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_history(run)
    assert rows and len(rows) < EPOCHS, [r.val_micro_f1 for r in rows]
    assert rows[-1].val_micro_f1 >= TARGET
    assert all(r.val_micro_f1 < TARGET for r in rows[:-1])
    assert f"reached --target-f1 {TARGET:g} after epoch {len(rows)}" in done.stderr
    status = read_status(run)  # what a follower of the run reads to stop following
    assert status is not None and (status.state, status.epoch) == ("target", len(rows))


def test_position_advances_and_restarts() -> None:
    position = Position(epoch=2)
    for loss in (1.0, 3.0):
        position = position.after_step(taken=16, loss=loss)
    assert position == Position(epoch=2, step=2, consumed=32, loss_sum=4.0, loss_steps=2)
    assert position.mid_epoch and position.mean_loss == 2.0
    assert position.epoch_start() == Position(epoch=2)
    assert position.next_epoch() == Position(epoch=3)


def test_checkpoint_pointer_is_flat_and_reads_its_older_forms() -> None:
    position = Position(epoch=3, step=5, consumed=40, loss_sum=2.5, loss_steps=5)
    record = CheckpointRecord(model="tiny", num_classes=19, position=position, order="global")
    body = record.to_json()
    assert (body["epoch"], body["step"], body["consumed"]) == (3, 5, 40)
    assert CheckpointRecord.from_json(body) == record
    fixed = {"epoch": 1, "model": "tiny", "num_classes": 19, "step": 2, "loss_sum": 1.0}
    fixed["loss_steps"] = 2
    assert CheckpointRecord.from_json(fixed).position == Position(1, 2, 0, 1.0, 2)
    elastic = {"epoch": 1, "model": "tiny", "num_classes": 19}
    elastic["elastic"] = {"consumed": 24, "batch": 3, "loss_sum": 0.9, "loss_steps": 3}
    old = CheckpointRecord.from_json(elastic)
    assert old.position == Position(1, 3, 24, 0.9, 3) and old.order == "global"


@pytest.mark.parametrize("kind", ["fixed", ELASTIC])
def test_early_stopping_ends_fixed_and_elastic_runs_alike(
    kind: str, tmp_path: Path, shards_v1: Path, rank_log
) -> None:
    """A run that plateaus (an LR too small to move the weights: validation micro-F1 the same
    every epoch) stops after --early-stopping-patience validations without a new best, and
    'best' stays the first epoch (a tie is no improvement)."""
    run = tmp_path / kind
    # A plateau needs no full epoch: 2 steps each where the run can cap them (the elastic
    # source trains whole epochs).
    capped = ["--max-steps-per-epoch", "2"] if kind == "fixed" else []
    stop = ["--lr", "1e-12", "--early-stopping-patience", "2"]
    done = _train(kind, shards_v1, run, rank_log, *stop, *capped)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_history(run)
    assert len(rows) == 3 and len({r.val_micro_f1 for r in rows}) == 1
    status = read_status(run)
    assert status is not None and (status.state, status.epoch) == ("early_stop", 3)
    assert "val_micro_f1 did not improve for 2 validations" in status.reason
    best = CheckpointRecord.from_json(json.loads((run / "checkpoints" / "best.json").read_text()))
    assert best.epoch == 1
