"""Output folders a command owns: made by it, or refused before anything is written.

A command writes a folder in one of two ways, and both refuse a folder that holds
something else: a typo of the parent folder must never mix into, or empty, a folder of
the user's own files.

* **In place**, resumed by a rerun (a region series, a batch study, the seed table, the
  shards): :func:`claim_folder` accepts a folder that is absent, empty, marked by an
  earlier run of the same command, or (older runs, made before marks) holding only names
  that command writes, and marks it.
* **Whole** (a synthetic archive, scene or region; an export; imported weights, a
  published run): :func:`publishing` builds the folder beside ``OUT``, flushes it to disk,
  renames an earlier ``OUT`` aside, renames the new one in, then removes the old one. A
  kill at any step leaves under ``OUT`` the old folder or the new one, whole (between the
  two renames: none, and the old one aside, which the next run renames back). ``OUT`` must
  be absent, empty, or - with ``--overwrite`` - a folder this same command made
  (:class:`Owner`: its mark inside, or the layout of its folders made before marks).
  Anything else is refused in one line naming the folder and what it holds.

"Replace what is there" has one name in every command, ``--overwrite``: the field of
:class:`Replacing`, which each command's declaration takes (``reuse``); in place it starts
over (the shards), whole it replaces the folder once the new one is complete.

The work folders beside ``OUT`` are named ``.<name>.partial-<pid>@<host>-<token>`` (the
old folder set aside: ``.replaced-``), so the next run into the same ``OUT`` tells a
killed run's leftovers from a run still writing: it removes those of its own command (its
mark inside) whose process is gone from this host, says so in one line, and leaves the
rest (:func:`clean_leftovers`). A folder is never removed on a guess: a writer on another
host, or a process of that PID still running, leaves it where it is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import glob
import json
import logging
import os
import re
import secrets
import shutil
import socket
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bigearthnet.core.declare import flag_name, option
from bigearthnet.core.errors import ConfigError, InputError
from bigearthnet.core.swap import replace_folder, restore_aside
from bigearthnet.core.util import flush_folder

log = logging.getLogger("bigearthnet")  # the ranks' logger where set up, else stderr
PARTIAL, REPLACED = "partial", "replaced"
_WRITER = re.compile(r"(?P<pid>\d+)@(?P<host>[A-Za-z0-9._-]+)-(?P<token>[0-9a-f]{8})")


@dataclass(frozen=True, kw_only=True)
class Replacing:
    """The one option that replaces what a command wrote before: a command's declaration
    takes it with ``reuse(Replacing, "overwrite", ...)`` (its help, or an older flag, may
    differ there; its name and default may not)."""

    overwrite: bool = option(
        False, "replace the output folder if this command made it (the old one is removed "
        "only once the new one is whole); a folder of anything else is never replaced",
    )  # fmt: skip


REPLACE_FLAG = flag_name(next(iter(dataclasses.fields(Replacing))))  # "--overwrite"


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
    ``own_names``: names (or glob patterns) of what the command writes, which a folder made
    before marks may hold.

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
    foreign = sorted(
        p.name for p in out.iterdir() if not any(fnmatch.fnmatchcase(p.name, n) for n in own_names)
    )
    if foreign:
        raise error(
            f"{out}: {option} holds other files ({_shown(foreign)}) and is no folder of "
            f"{made_by}: choose an empty or a new folder"
        )
    try:
        with open(out / mark, "x", encoding="utf-8") as handle:
            handle.write(mark_text(made_by))
    except FileExistsError:
        pass


# --------------------------------------------------------------------------- whole folders


@dataclass(frozen=True)
class Owner:
    """A command that publishes whole folders: how it is named, its mark, and what it may
    replace (with :data:`REPLACE_FLAG`). ``signature`` and ``names``: its folders made
    before marks hold the file ``signature`` and nothing but ``names`` (glob patterns too:
    ``*.tif``) (None: every folder it made is marked)."""

    made_by: str  # the command as users type it, e.g. "bigearthnet-synth"
    mark: str  # the mark file inside every folder it made
    option: str = "OUT"  # the output as the command line names it
    signature: str | None = None
    names: frozenset[str] = field(default_factory=frozenset)

    def made(self, folder: Path) -> bool:
        """Whether ``folder`` is one this command made (its mark, or its older layout)."""
        mark = folder / self.mark
        if mark.is_file():
            return _made_by(mark) == self.made_by
        if self.signature is None or not (folder / self.signature).is_file():
            return False
        own = self.names | {self.signature}
        return all(any(fnmatch.fnmatchcase(p.name, n) for n in own) for p in folder.iterdir())


def folder_path(text: str) -> Path:
    """An output folder as typed: a path, never empty (``""`` would be the working
    directory, the parent of everything the user is working on)."""
    if not text.strip():
        raise ConfigError("an empty path names the working directory; name the folder to write")
    return Path(text)


def require_outside_cwd(flag: str, path: Path) -> Path:
    """``path`` unless it is the working directory or a folder holding it (``.``, ``..``,
    ``""``): a folder that is replaced or renamed whole cannot be one the user stands in."""
    target, here = Path(path).resolve(), Path.cwd().resolve()
    if target == here or here.is_relative_to(target):
        what = (
            "the working directory" if target == here else "a folder holding the working directory"
        )
        raise ConfigError(f"{flag} {str(path)!r} is {what}; name a folder inside it")
    return Path(path)


def check_output(out: Path, owner: Owner, *, replace: bool = False) -> None:
    """InputError (one line naming ``out``) unless ``owner`` may write the folder ``out``:
    absent, empty, or - with ``replace`` - a folder it made."""
    out = Path(out)
    require_outside_cwd(owner.option, out)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: {owner.option} is a file, not a folder of {owner.made_by}")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not owner.made(out):
        held = _shown(sorted(p.name for p in out.iterdir()))
        raise InputError(
            f"{out}: {owner.option} holds other files ({held}) and is no folder of "
            f"{owner.made_by} ({REPLACE_FLAG} replaces only a folder it made): choose an empty "
            "or a new folder"
        )
    if not replace:
        raise InputError(f"{out}: exists and is not empty ({REPLACE_FLAG} replaces it)")


@contextlib.contextmanager
def publishing(out: Path, owner: Owner, *, replace: bool = False) -> Iterator[Path]:
    """Yield a fresh work folder beside ``out`` (``owner``'s mark inside) to write the
    whole folder into; once the block ends without error, publish it as ``out`` (flushed,
    the old one renamed aside, the new one in, the old one removed). An error, or Ctrl-C,
    removes the work folder; a kill leaves it for the next run to clean."""
    out = Path(out)
    require_outside_cwd(owner.option, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_leftovers(out, owner)  # first: it may restore an OUT that a kill left aside
    check_output(out, owner, replace=replace)
    work = work_folder(out.parent, _prefix(out, PARTIAL))
    work.mkdir()
    try:
        (work / owner.mark).write_text(mark_text(owner.made_by), encoding="utf-8")
        yield work
        flush_folder(work)  # the data on disk before the name
        _swap(work, out, owner, replace)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def _swap(work: Path, out: Path, owner: Owner, replace: bool) -> None:
    check_output(out, owner, replace=replace)  # again: another run may have made it since
    aside = out.parent / (_prefix(out, REPLACED) + work.name[len(_prefix(out, PARTIAL)) :])
    replace_folder(work, out, aside)


# --------------------------------------------------------------------------- leftovers


@dataclass(frozen=True)
class WorkFolder:
    """A work folder named by its writer (:func:`work_folder`), found by a later run."""

    path: Path
    pid: int
    host: str

    def writer_gone(self) -> bool:
        """True only when provable: the writer ran on this host and no process of its PID
        runs that started before the folder was last written (a later one reused the PID;
        a killed one not yet reaped is a zombie)."""
        import psutil

        if self.host != _host():
            return False
        try:
            writer = psutil.Process(self.pid)
            if writer.status() == psutil.STATUS_ZOMBIE:
                return True
            started, written = writer.create_time(), self.path.stat().st_mtime
        except psutil.NoSuchProcess:
            return True
        except (psutil.Error, OSError):
            return False
        return started > written + 1.0

    def of_this_process(self) -> bool:
        return self.host == _host() and self.pid == os.getpid()


def work_folder(parent: Path, prefix: str) -> Path:
    """A new name in ``parent``: ``prefix`` then this process's PID, host and a token."""
    return Path(parent) / f"{prefix}{os.getpid()}@{_host()}-{secrets.token_hex(4)}"


def work_folders(parent: Path, prefix: str) -> list[WorkFolder]:
    """The folders :func:`work_folder` named in ``parent`` with ``prefix``."""
    found = []
    for path in sorted(Path(parent).glob(glob.escape(prefix) + "*")):
        writer = _WRITER.fullmatch(path.name[len(prefix) :])
        if writer is not None and path.is_dir():
            found.append(WorkFolder(path, int(writer["pid"]), writer["host"]))
    return found


def remove_folders(folders: list[WorkFolder]) -> str:
    """Remove ``folders``; what was removed, with each one's size, for a log line."""
    removed = []
    for folder in folders:
        size = _bytes(folder.path)
        shutil.rmtree(folder.path, ignore_errors=True)
        removed.append(f"{folder.path.name} ({_megabytes(size)})")
    return ", ".join(removed)


def clean_leftovers(out: Path, owner: Owner) -> None:
    """Remove what killed runs of ``owner`` left beside ``out``: work folders with its mark
    (or empty: killed before the mark) and old folders set aside; an old folder set aside
    with ``out`` gone (killed between the two renames) is renamed back. One log line says
    what was removed or restored, another what was left because its writer may live."""
    out = Path(out)
    partials = [
        w for w in work_folders(out.parent, _prefix(out, PARTIAL)) if _own_work(w.path, owner)
    ]
    asides = [w for w in work_folders(out.parent, _prefix(out, REPLACED)) if owner.made(w.path)]
    gone = [w for w in partials + asides if w.writer_gone()]
    for aside in [w for w in asides if w in gone and not out.exists()]:
        if restore_aside(out, aside.path):
            gone.remove(aside)
            log.warning("%s: restored from %s: a replacement killed between its two "
                        "renames", out, aside.path.name)  # fmt: skip
    if gone:
        log.warning("%s: removed what killed runs of %s left beside it: %s", out,
                    owner.made_by, remove_folders(gone))  # fmt: skip
    alive = [f"{w.path.name} (PID {w.pid} on {w.host})" for w in partials + asides
             if w not in gone and w.path.exists()]  # fmt: skip
    if alive:
        log.warning("%s: left beside it what a run may still be writing: %s", out,
                    ", ".join(alive))  # fmt: skip


def _own_work(path: Path, owner: Owner) -> bool:
    mark = path / owner.mark
    if mark.is_file():
        return _made_by(mark) == owner.made_by
    return not any(path.iterdir())  # killed before its mark: nothing in it to lose


def _made_by(mark: Path) -> str | None:
    try:
        body = json.loads(mark.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return body.get("made_by") if isinstance(body, dict) else None


def _prefix(out: Path, kind: str) -> str:
    return f".{out.name}.{kind}-"


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "localhost"


def _bytes(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _megabytes(size: int) -> str:
    return f"{size / 1e6:,.0f} MB" if size >= 1e6 else f"{size / 1e3:,.0f} kB"


def _shown(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
