"""Commands that run on a login node (the elastic controller, the batch-size study's
planning and plotting, the run page) import neither TensorFlow nor Horovod: a login node may have
neither, and their ``--help`` and option errors answer at once."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import REPO

PROBE = """
import sys
from bigearthnet.cli import {module} as command
code = command.main({argv!r})
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "horovod", "keras"))
print("exit", code, "heavy", heavy)
"""
COMMANDS = {
    "elastic": [["--help"], ["status", "--run-dir", "/nonexistent/run"]],
    "batch_study": [["--help"], ["--batch-sizes", "0", "--out", "/nonexistent/out"]],
    # A run page is read where the run folder is (a login node after the job).
    "report": [["--help"], ["/nonexistent/run"]],
}


@pytest.mark.parametrize(
    ("module", "argv"), [(m, a) for m, runs in COMMANDS.items() for a in runs], ids=str
)
def test_login_node_commands_load_no_tensorflow(module: str, argv: list[str]) -> None:
    probe = PROBE.format(module=module, argv=argv)
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert line.endswith("heavy []"), line
    code = int(line.split()[1])
    assert code == (0 if argv == ["--help"] else 2), done.stderr  # help, or a one-line error
