"""Both TensorFlow stacks (2.15 and 2.18 + tf-keras, ``make setup TF_STACK=2.18``): Keras 2
everywhere, and a run started on one stack resumes on the other.

The cross-stack test needs both venvs; CI builds the 2.18 one after the 2.15 one and runs it
from there. Where only one exists it is skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import tensorflow as tf
from helpers import REPO, train_argv

import train
from bigearthnet.formats.history import read_history

VENVS = {"2.15": REPO / ".venv", "2.18": REPO / ".venv-tf2.18"}


def _this_stack() -> str:
    return "2.15" if tf.__version__.startswith("2.15") else "2.18"


def _other_python() -> Path | None:
    other = next(stack for stack in VENVS if stack != _this_stack())
    complete = (VENVS[other] / ".setup-stamp").exists()  # `make setup` finished there
    return VENVS[other] / "bin" / "python" if complete else None


def test_tf_keras_is_keras_2_on_this_stack() -> None:
    legacy = os.environ.get("TF_USE_LEGACY_KERAS")
    assert legacy == ("1" if _this_stack() == "2.18" else None)  # 2.15 has no tf-keras
    # Keras 2 builds models in keras/engine (tf_keras/engine on 2.18); Keras 3 has keras.ops.
    assert ".engine." in tf.keras.Model.__module__, tf.keras.Model.__module__
    assert not hasattr(tf.keras, "ops"), "Keras 3 under tf.keras"
    assert tf.__version__.startswith(("2.15.", "2.18.")), tf.__version__


def _argv(data: Path, run: Path, epochs: int) -> list[str]:
    return train_argv(data, run, epochs, "--max-steps-per-epoch", "3")


def _train_on(python: Path, data: Path, run: Path, epochs: int) -> str:
    cmd = [str(python), "train.py", *_argv(data, run, epochs)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def test_a_run_moves_between_the_stacks_in_both_directions(
    tmp_path: Path, shards_v1: Path, rank_log
) -> None:
    other = _other_python()
    if other is None:
        pytest.skip(f"the other stack's venv is not built (have {_this_stack()} only)")
    there_then_here, here_then_there = tmp_path / "a", tmp_path / "b"
    _train_on(other, shards_v1, there_then_here, epochs=1)
    assert train.main(_argv(shards_v1, there_then_here, 2)) == 0
    resumed = [r.getMessage() for r in rank_log.records if "resumed from" in r.getMessage()]
    assert resumed and "at epoch 1 step 0" in resumed[-1], resumed
    assert [row.epoch for row in read_history(there_then_here)] == [1, 2]

    assert train.main(_argv(shards_v1, here_then_there, 1)) == 0
    log = _train_on(other, shards_v1, here_then_there, epochs=2)
    assert "resumed from" in log and "at epoch 1 step 0" in log, log[-2000:]
    assert [row.epoch for row in read_history(here_then_there)] == [1, 2]
