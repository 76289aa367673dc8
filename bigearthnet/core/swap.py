"""Replacing what is published by renames, the old set aside first and removed last: the one
home of the steps, for a whole folder (:func:`replace_folder`) and for some entries of a
folder that holds other things too (:func:`swap_entries`).

Nothing published is removed before its replacement has its name. A kill at any step
leaves the old version or the new one, whole, on disk; where a kill between two renames
leaves the name itself empty, the recovery (:func:`restore_aside` for a folder,
:func:`finish_swap` for entries) puts the old one back or finishes the swap.

* **A folder** (:func:`replace_folder`): ``new`` (complete, flushed) becomes ``out``; an
  earlier ``out`` is renamed aside first and removed after. Users:
  :func:`bigearthnet.core.folders.publishing` and the checkpoints
  (:func:`bigearthnet.formats.checkpoints.save`).
* **Entries of a folder** (:func:`swap_entries`): the entries staged in a work folder inside
  it replace theirs (a region series' products among its scene maps and page). The work
  folder is the journal: once complete it gets ``.swap.json`` (what is replaced, what comes
  in, the entry moved last: the one that says the set is complete), the old entries go
  into its ``.replaced/``, then the new ones move in, the last one last. A kill anywhere
  leaves every old entry in the folder or aside and every new one staged or in; the next
  run rolls the swap forward from the journal (:func:`finish_swap`), and a work folder
  without one (killed while still being built) is only removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from bigearthnet.core.util import atomic_write_json, flush_folder, fsync_tree

JOURNAL = ".swap.json"  # in a work folder of entries: it is complete, its swap has begun
ASIDE = ".replaced"  # in that work folder: the entries it replaced, until they are removed


def replace_folder(new: Path, out: Path, aside: Path) -> None:
    """Rename the complete folder ``new`` to ``out``; an earlier ``out`` is renamed to
    ``aside`` first and removed once ``new`` has the name. An error of the second rename
    puts the old one back."""
    moved = False
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()  # empty: nothing to keep
    elif out.exists():
        os.rename(out, aside)
        moved = True
    try:
        os.rename(new, out)
    except OSError:
        if moved and not out.exists():
            os.rename(aside, out)  # what was there stays there
        raise
    fsync_tree(out.parent, recurse=False)
    if moved:
        shutil.rmtree(aside)


def restore_aside(out: Path, aside: Path) -> bool:
    """Recovery of :func:`replace_folder` killed between its renames: ``aside`` back to
    ``out`` when ``out`` is gone (True), else ``aside`` removed (the swap had ended)."""
    if not out.exists():
        with contextlib.suppress(OSError):  # another recovery was first
            os.rename(aside, out)
            return True
        return False
    shutil.rmtree(aside, ignore_errors=True)
    return False


def swap_entries(folder: Path, staged: Path, names: Sequence[str], *, last: str) -> None:
    """Replace the entries ``names`` and ``last`` of ``folder`` by those ``staged`` holds
    (a complete work folder inside ``folder``); an entry absent from ``staged`` is only
    removed. ``last`` goes first and comes back last: its presence says the set is
    complete. ``staged`` is removed at the end."""
    flush_folder(staged)  # the new entries on disk before the journal says they are whole
    everything = [last, *(n for n in names if n != last)]
    incoming = [name for name in everything if os.path.lexists(staged / name)]
    atomic_write_json(staged / JOURNAL, {"replace": everything, "incoming": incoming})
    finish_swap(folder, staged)


def has_journal(staged: Path) -> bool:
    """Whether ``staged`` is a complete work folder whose swap has begun."""
    return (staged / JOURNAL).is_file()


def finish_swap(folder: Path, staged: Path) -> None:
    """Do what is left of the swap :func:`swap_entries` began with ``staged`` (all of it,
    or, after a kill, the rest: each step is taken only if it is still to take)."""
    journal = json.loads((staged / JOURNAL).read_text(encoding="utf-8"))
    everything, incoming = journal["replace"], set(journal["incoming"])
    aside = staged / ASIDE
    aside.mkdir(exist_ok=True)
    for name in everything:  # the old entries aside; ``last`` first
        old, new = folder / name, staged / name
        still_old = name not in incoming or os.path.lexists(new)  # else the new one is in
        if still_old and os.path.lexists(old) and not os.path.lexists(aside / name):
            os.rename(old, aside / name)
    for name in [*everything[1:], everything[0]]:  # the new ones in; ``last`` last
        if os.path.lexists(staged / name):
            os.rename(staged / name, folder / name)
    fsync_tree(folder, recurse=False)
    shutil.rmtree(staged)
