"""Errors tell bugs from bad input: bad input is one line naming the file or option and exit
2 (an unknown model before any rank starts, without TensorFlow); anything unforeseen is a
bug, and keeps its traceback with exit 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import REPO, train_argv

import train

PROBE = """
import sys
import train
code = train.main(["--data", "d", "--run-dir", "r", "--model", "nosuch"])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "horovod", "keras"))
print("exit", code, "heavy", heavy)
"""


def test_an_unknown_model_is_refused_before_tensorflow_loads() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip().splitlines()[-1] == "exit 2 heavy []", done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--model 'nosuch'" in lines[0] and "resnet50" in lines[0]


def test_a_bug_inside_training_is_a_traceback_and_exit_1(
    shards_v1: Path, tmp_path: Path, monkeypatch, capsys, rank_log
) -> None:
    from bigearthnet.training import driver

    def broken(*args, **kwargs):
        raise ValueError("an injected bug")

    monkeypatch.setattr(driver.EpochDriver, "run", broken)
    assert train.main(train_argv(shards_v1, tmp_path / "run", 1)) == 1
    text = capsys.readouterr().err + rank_log.text  # printed, or through the ranks' logger
    assert "Traceback" in text and "an injected bug" in text and "a bug, not your input" in text


def test_bad_input_stays_one_line_and_exit_2(tmp_path: Path, reported_errors) -> None:
    assert train.main(train_argv(tmp_path / "missing", tmp_path / "run", 1)) == 2
    (line,) = reported_errors()
    assert "Traceback" not in line and str(tmp_path / "missing") in line
