"""``python3 train.py`` under a Python without the project's dependencies: one line naming the
venv and ``make setup``, exit 2 - its ``--help`` too, which printed and then died with a
raw ``No module named 'numpy'``. Run for real, by an interpreter without them: a venv made
here with nothing installed (the base Python's site-packages are not in it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    assert subprocess.run([python, "-c", "import numpy"], capture_output=True).returncode == 1
    return python


@pytest.mark.parametrize(
    "argv",
    [["train.py", "--help"], ["train.py", "--data", "d", "--run-dir", "r"],
     ["evaluate.py", "--help"], ["evaluate.py", "--run-dir", "r"]],
    ids=" ".join,
)  # fmt: skip
def test_outside_the_venv_the_scripts_say_which_python_to_use(bare_python, argv) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run([bare_python, *argv], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and not done.stdout, done.stdout
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"{argv[0]}: error: this Python ({bare_python}) lacks "), line
    assert "numpy" in line and ".venv/bin/python" in line and "make setup" in line, line
