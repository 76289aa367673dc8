"""Output folders a command owns: made by it, or refused before anything is written.

A command that writes many files into ``--out`` (a region series, a batch study, the seed
table) and resumes or replaces them on a rerun must not do so in a folder that holds
something else: a typo'd path into a results folder would mix or overwrite unrelated files.
:func:`claim_folder` accepts a folder that is absent, empty, marked by an earlier run of the
same command, or (older runs, made before marks) holding only names that command writes,
and marks it; anything else is one line naming the folder and what is in it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Collection
from pathlib import Path

from bigearthnet.core.errors import InputError


def mark_text(made_by: str) -> str:
    return json.dumps({"made_by": made_by, "layout": 1}) + "\n"


def claim_folder(
    out: Path,
    *,
    mark: str,
    made_by: str,
    option: str = "--out",
    own_names: Collection[str] = (),
    error: type[InputError] = InputError,
) -> None:
    """Make ``out`` a folder of ``made_by`` (its ``mark`` file inside), or check that it is one.

    Safe when ranks or Slurm array tasks claim one folder at once: a new folder appears with
    its mark inside (a rename), an empty one gets the mark by exclusive creation."""
    if out.exists() and not out.is_dir():
        raise error(f"{out}: {option} is a file, not a folder for {made_by}")
    if not out.exists():
        made = out.parent / f".{out.name}.claim-{os.getpid()}-{os.urandom(4).hex()}"
        made.mkdir(parents=True)
        (made / mark).write_text(mark_text(made_by))
        try:
            made.rename(out)
        except OSError:  # another task made it first
            shutil.rmtree(made, ignore_errors=True)
    if (out / mark).is_file():
        return
    foreign = sorted(p.name for p in out.iterdir() if p.name not in own_names)
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise error(
            f"{out}: {option} holds other files ({shown}) and is no folder of {made_by}: "
            "choose an empty or a new folder"
        )
    try:
        with open(out / mark, "x", encoding="utf-8") as handle:
            handle.write(mark_text(made_by))
    except FileExistsError:
        pass
