"""Helpers the tests share (fixtures live in conftest.py): the repository root, the tiny
training recipe, in-process preprocessing, and 2-rank runs through horovodrun."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from bigearthnet.history import HistoryRow

REPO = Path(__file__).resolve().parents[1]


def preprocess(archive: Path, out: Path, *extra: str) -> int:
    from bigearthnet.preprocess import main

    return main([str(archive), str(out), "--no-progress", *extra])


TINY_RECIPE = [
    "--model",
    "tiny",
    "--optimizer",
    "adam",
    "--lr",
    "0.01",
    "--batch-size",
    "8",
    "--warmup-epochs",
    "0",
    "--threads",
    "1",
    "--no-progress",
]


def horovodrun(np_: int, *argv: str, timeout: int = 600, env: dict | None = None):
    """Run ``python argv...`` on ``np_`` local ranks through horovodrun (Gloo)."""
    launcher = Path(sys.executable).with_name("horovodrun")  # installed by `make setup`
    cmd = [
        str(launcher),
        "-np",
        str(np_),
        "-H",
        f"localhost:{np_}",
        "--gloo",
        sys.executable,
        *argv,
    ]
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1", **(env or {})}
    return subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=full_env
    )


# TensorFlow's own C++ log lines ("2026-01-01 10:00:00.000000: E external/...", absl's
# "E0000 00:00:..."): TF 2.18's CPU wheel logs failed CUDA probes at import, at E level.
TF_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d [\d:.]+: [EWIF] |[EWIF]\d{4} \d\d:\d\d:)")


def error_lines(stderr: str) -> list[str]:
    """The lines of ``stderr`` that report an error, TensorFlow's start-up log left out."""
    lines = stderr.splitlines()
    return [line for line in lines if "error" in line.lower() and not TF_LOG_LINE.match(line)]


def history_row(epoch: int, **fields) -> HistoryRow:
    """A ``history.csv`` row for tests of what reads histories: plausible defaults,
    ``fields`` overriding them (val_micro_f1, world_size, gns_b_simple, ...)."""
    values = dict(
        lr=0.1,
        loss=0.5,
        val_loss=0.4,
        val_micro_f1=0.5,
        val_macro_f1=0.5,
        samples_per_s=1.0,
        data_wait_fraction=0.0,
        seconds=1.0,
        world_size=1,
    )
    return HistoryRow(epoch=epoch, **{**values, **fields})
