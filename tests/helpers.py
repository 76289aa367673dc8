"""Helpers the tests share (fixtures live in conftest.py): the repository root, the tiny
training recipe, in-process preprocessing, and 2-rank runs through horovodrun."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
