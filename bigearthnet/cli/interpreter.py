"""Whether this Python can run the commands: ``python3 train.py ...`` under a Python without
the project's dependencies (the system's, not the venv's) ends with one line naming the venv
and ``make setup``, exit 2 - not a help that prints and a traceback after it. Standard library
only (and the exit codes): it runs before the command imports anything."""

from __future__ import annotations

import importlib.util
import sys

from bigearthnet.core.errors import EXIT_BAD_INPUT

# What train.py and evaluate.py import on their way: options (yaml), shards (numpy, h5py),
# the model (tensorflow) and the ranks (horovod, built by `make setup`).
NEEDED = ("yaml", "numpy", "h5py", "tensorflow", "horovod")


def missing(names: tuple[str, ...] = NEEDED) -> list[str]:
    """The modules of ``names`` this Python cannot import (looked up, not imported)."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def require_dependencies(prog: str) -> None:
    """Exit 2 with one line on stderr when this Python lacks a module the command needs."""
    absent = missing()
    if absent:
        print(
            f"{prog}: error: this Python ({sys.executable}) lacks {', '.join(absent)}: run "
            f"the project's venv, .venv/bin/python {prog} ... (or `source .venv/bin/activate` "
            "first); `make setup` builds it",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_BAD_INPUT)
