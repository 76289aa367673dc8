"""bigearthnet.formats.checkpoints: a checkpoint saved again under its folder's name (a rerun
of the same epoch) replaces it the one way folders are replaced (core.swap): a kill at any
step leaves the old folder or the new one whole, and the next training run recovers."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest
from helpers import Killed, kill_swap_at

from bigearthnet.formats import checkpoints
from bigearthnet.formats.checkpoints import CheckpointError, CheckpointRecord
from bigearthnet.formats.position import Position


def _save(run: Path, value: float) -> None:
    import tensorflow as tf

    record = CheckpointRecord(model="tiny", num_classes=1, position=Position(epoch=3))
    checkpoints.save(run, "best", {"w": tf.Variable([value])}, record)


def _restored(run: Path) -> float:
    import tensorflow as tf

    weight = tf.Variable([0.0])
    checkpoints.restore(run, "best", {"w": weight})
    return float(weight.numpy()[0])


# the step killed -> the value "best" restores after the kill (None: the pointer names no
# folder, the old one whole aside), then after the next training run's recovery
STEPS = {
    "rename 1": (1.0, 1.0),  # before the old folder is set aside
    "rename 2": (None, 1.0),  # after the aside move, before the new one's rename
    "remove the old": (2.0, 2.0),
    "none": (2.0, 2.0),
}


@pytest.mark.fault
@pytest.mark.parametrize("step", list(STEPS))
def test_a_kill_while_a_checkpoint_is_replaced_loses_neither(
    tmp_path, monkeypatch, step, fault_row
):
    """Issue 48: save removed the old folder before renaming the new one in, so a kill in
    between left the 'best' pointer naming no folder, and no fallback for best."""
    run = tmp_path / "run"
    _save(run, 1.0)
    kill_swap_at(monkeypatch, step, old=lambda path: path.name.endswith(".replaced"))
    with contextlib.suppress(Killed):
        _save(run, 2.0)
    monkeypatch.undo()
    after_kill, after_rerun = STEPS[step]
    if after_kill is None:
        with pytest.raises(CheckpointError, match=r"missing folder best-e0003 \(aside as "):
            _restored(run)
    else:
        assert _restored(run) == after_kill
    checkpoints.restore_latest(run, {})  # what a training rerun does first: recovers
    assert _restored(run) == after_rerun
    names = sorted(p.name for p in checkpoints.checkpoint_dir(run).iterdir())
    assert names == ["best-e0003", "best.json"]
    _save(run, 3.0)  # and saves again
    assert np.isclose(_restored(run), 3.0)
    fault_row(f"checkpoint replaced, killed: {step}", runs=2, detect_s=None,
              data_lost=f"none: 'best' is the {'old' if after_rerun == 1.0 else 'new'} "
              "checkpoint, whole")  # fmt: skip
