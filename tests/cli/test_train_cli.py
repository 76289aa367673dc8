"""train.py's own process: a Slurm warning that comes after training stopped never kills it."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO


def test_a_warning_after_the_command_ended_is_ignored_by_the_kernel() -> None:
    """The job script passes SIGUSR1 to the ranks one after another; one that reached a rank
    late, while Python shut down (when it puts Python-handled signals back to their default
    action), killed it: exit 138 instead of 3, and the job was not requeued (CI, Gloo
    requeue test). cli() leaves SIGUSR1 ignored at the kernel, which survives the shutdown."""
    code = (
        "import os, signal, sys, train\n"
        "assert train.cli(['--help']) == 0\n"
        "assert signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN\n"
        "os.kill(os.getpid(), signal.SIGUSR1)\n"
        "sys.exit(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 3, done.stderr[-2000:]
