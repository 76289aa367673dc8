"""bigearthnet.core.folders: a folder is published whole, replaces only one its command made,
and what a killed run left beside it is removed by the next run when provably dead."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from helpers import REPO

from bigearthnet.core.errors import ConfigError, InputError
from bigearthnet.core.folders import (
    Owner,
    check_output,
    clean_leftovers,
    folder_path,
    publishing,
    require_outside_cwd,
)

OWNER = Owner("bigearthnet-test", ".bigearthnet-test", signature="made.json",
              names=frozenset({"data.txt"}))  # fmt: skip
HOST = socket.gethostname()


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _publish(out: Path, text: str, replace: bool = False) -> None:
    with publishing(out, OWNER, replace=replace) as work:
        (work / "data.txt").write_text(text)


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _user_folder(path: Path) -> dict[str, bytes]:
    (path / "sub").mkdir(parents=True)
    (path / "notes.txt").write_text("mine\n")
    (path / "sub" / "results.csv").write_text("a,b\n1,2\n")
    return _tree(path)


def test_publishing_replaces_only_a_folder_its_command_made(tmp_path):
    """D07's root: a replace flag never empties a folder of the user's files."""
    out = tmp_path / "out"
    _publish(out, "one")
    assert _tree(out) == {"data.txt": b"one", OWNER.mark: _tree(out)[OWNER.mark]}
    with pytest.raises(InputError, match="exists and is not empty \\(--overwrite replaces it\\)"):
        _publish(out, "two")
    _publish(out, "two", replace=True)
    assert (out / "data.txt").read_text() == "two"
    older = tmp_path / "older"  # made before marks: its signature and own names only
    older.mkdir()
    (older / "made.json").write_text("{}")
    _publish(older, "three", replace=True)
    assert (older / "data.txt").read_text() == "three"
    user = tmp_path / "user"
    before = _user_folder(user)
    with pytest.raises(InputError) as refused:
        _publish(user, "four", replace=True)
    assert str(refused.value) == (
        f"{user}: OUT holds other files (notes.txt, sub) and is no folder of bigearthnet-test "
        "(--overwrite replaces only a folder it made): choose an empty or a new folder"
    )
    assert _tree(user) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["older", "out", "user"]


@pytest.mark.bad_input
@pytest.mark.parametrize("command", ["synth scene", "synth region", "map patches"])
def test_each_command_publishing_a_folder_refuses_a_folder_of_user_files(
    tmp_path, command, reported_errors, bad_input_row
):
    """Issue #48: one way to publish a folder and one name for "replace": a command that
    writes its folder whole refuses, even with --overwrite and before any work, a folder it
    did not make; map patches wrote its maps among the user's files."""
    from bigearthnet.cli.map import main as map_main
    from bigearthnet.cli.synth import main as synth_main

    user = tmp_path / "mine"
    before = _user_folder(user)
    main, argv, made_by = {
        "synth scene": (synth_main, ["scene", str(user), "--layout", "tif"],
                        "bigearthnet-synth scene"),
        "synth region": (synth_main, ["region", str(user)], "bigearthnet-synth region"),
        "map patches": (map_main, ["--shards", str(tmp_path / "shards"), "--run-dir",
                                   str(tmp_path / "run"), "--out", str(user)],
                        "bigearthnet-map patches"),
    }[command]  # fmt: skip
    code = main([*argv, "--overwrite"])
    assert code == 2 and _tree(user) == before
    assert (f"holds other files (notes.txt, sub) and is no folder of {made_by} (--overwrite "
            "replaces only a folder it made)") in reported_errors()[-1]  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    bad_input_row(
        "OUT a folder of the user's files, --overwrite",
        f"bigearthnet-{command}",
        code,
        "refused before any work, naming what it holds; nothing touched",
    )


def test_a_folder_made_before_marks_is_known_by_its_names_or_patterns(tmp_path):
    owner = Owner("bigearthnet-test", ".bigearthnet-test", signature="patches.csv",
                  names=frozenset({"*.tif", "*.png"}))  # fmt: skip
    for name in ("patches.csv", "T33UUP.tif", "T33UUP.tif.probabilities.tif", "T33UUP.png"):
        (tmp_path / name).write_text("")
    assert owner.made(tmp_path)
    (tmp_path / "notes.txt").write_text("mine\n")
    assert not owner.made(tmp_path)


def test_an_error_while_writing_leaves_nothing_and_keeps_the_old_folder(tmp_path):
    out = tmp_path / "out"
    _publish(out, "old")
    with pytest.raises(RuntimeError), publishing(out, OWNER, replace=True) as work:
        (work / "data.txt").write_text("half")
        raise RuntimeError("disk gone")
    assert (out / "data.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("path", ["", ".", "..", "/"])
def test_the_working_directory_and_its_parents_are_refused(tmp_path, monkeypatch, path):
    """D19 and D20's root: "" and "." are the working directory, ".." and "/" hold it."""
    monkeypatch.chdir(tmp_path)
    if path == "":
        with pytest.raises(ConfigError, match="an empty path names the working directory"):
            folder_path(path)
    with pytest.raises(ConfigError, match="working directory; name a folder inside it"):
        require_outside_cwd("OUT", Path(path))
    with pytest.raises(ConfigError):
        check_output(Path(path), OWNER, replace=True)
    assert require_outside_cwd("OUT", Path("new")) == Path("new")


def _leftover(out: Path, kind: str, pid: int, host: str = HOST, made_by: str = OWNER.made_by):
    folder = out.parent / f".{out.name}.{kind}-{pid}@{host}-0123abcd"
    folder.mkdir()
    (folder / OWNER.mark).write_text(f'{{"made_by": "{made_by}"}}')
    (folder / "data.txt").write_text(kind * 1000)
    return folder


def test_the_next_run_removes_only_what_a_dead_run_of_its_own_left(tmp_path, caplog):
    """D23's root: a killed run's partial is removed by the next run into the same OUT,
    saying so; a live writer's, another host's and another command's stay."""
    out = tmp_path / "out"
    dead = _leftover(out, "partial", _dead_pid())
    live = _leftover(out, "partial", os.getpid())
    elsewhere = _leftover(out, "partial", _dead_pid(), host="node-elsewhere")
    other = _leftover(out, "partial", _dead_pid(), made_by="bigearthnet-other")
    with caplog.at_level(logging.WARNING, logger="bigearthnet"):
        _publish(out, "new")
    assert not dead.exists() and live.exists() and elsewhere.exists() and other.exists()
    assert (out / "data.txt").read_text() == "new"
    removed, left = (r.getMessage() for r in caplog.records)
    assert removed == (
        f"{out}: removed what killed runs of bigearthnet-test left beside it: {dead.name} (7 kB)"
    )
    assert left.startswith(f"{out}: left beside it what a run may still be writing: ")
    assert live.name in left and elsewhere.name in left and other.name not in left


def test_a_replacement_killed_between_its_renames_is_undone_by_the_next_run(tmp_path, caplog):
    out = tmp_path / "out"
    _publish(out, "old")
    old = _tree(out)
    aside = out.parent / f".out.replaced-{_dead_pid()}@{HOST}-0123abcd"
    out.rename(aside)
    with caplog.at_level(logging.WARNING, logger="bigearthnet"):
        clean_leftovers(out, OWNER)
    assert _tree(out) == old and not aside.exists()
    assert "restored from .out.replaced-" in caplog.records[0].getMessage()


KILLED = textwrap.dedent("""
    import os, shutil, signal, sys
    from pathlib import Path
    from bigearthnet.core import folders, swap
    out, step = Path(sys.argv[1]), sys.argv[2]
    owner = folders.Owner("bigearthnet-test", ".bigearthnet-test")
    real_rename, real_rmtree, renames = os.rename, shutil.rmtree, []
    def rename(src, dst):
        renames.append(dst)
        if step == f"rename {len(renames)}":
            os.kill(os.getpid(), signal.SIGKILL)
        real_rename(src, dst)
    def rmtree(path, *args, **kwargs):
        if step == "remove the old":
            os.kill(os.getpid(), signal.SIGKILL)
        real_rmtree(path, *args, **kwargs)
    swap.os.rename, swap.shutil.rmtree = rename, rmtree
    with folders.publishing(out, owner, replace=True) as work:
        (work / "data.txt").write_text("new" * 100_000)
        if step == "write":
            os.kill(os.getpid(), signal.SIGKILL)
""")
STEPS = {  # the step killed -> what OUT holds after it, then after the next run's clean-up
    "write": ("old", "old"),
    "rename 1": ("old", "old"),  # before the old folder is set aside
    "rename 2": (None, "old"),  # between the renames: the old one aside, renamed back
    "remove the old": ("new", "new"),
    "none": ("new", "new"),
}


@pytest.mark.fault
@pytest.mark.parametrize("step", list(STEPS))
def test_a_kill_at_each_step_leaves_the_old_folder_or_the_new_one_whole(tmp_path, step, fault_row):
    """Issue #48's promise: SIGKILL at any step of a replacement, and OUT is the old folder
    or the new one, whole (between the two renames, once the next run has set it back);
    nothing is left beside it after the next run."""
    out = tmp_path / "out"
    with publishing(out, Owner("bigearthnet-test", ".bigearthnet-test")) as work:
        (work / "data.txt").write_text("old")
    whole = {"old": _tree(out), "new": None}
    argv = [sys.executable, "-c", KILLED, str(out), step]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == (0 if step == "none" else -signal.SIGKILL), done.stderr
    after_kill, after_next = STEPS[step]
    seen = _tree(out) if out.exists() else None
    assert (seen is None) if after_kill is None else _is(seen, after_kill, whole)
    clean_leftovers(out, Owner("bigearthnet-test", ".bigearthnet-test"))
    assert _is(_tree(out), after_next, whole)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    lost = f"none: OUT is the {after_next} folder, whole; nothing left beside it"
    fault_row(f"folder replacement SIGKILLed: {step}", runs=2, detect_s=None, data_lost=lost)


def _is(tree: dict[str, bytes] | None, which: str, whole: dict) -> bool:
    if tree is None:
        return False
    if which == "old":
        return tree == whole["old"]
    return tree.get("data.txt") == b"new" * 100_000


def test_a_killed_writer_not_yet_reaped_is_gone(tmp_path):
    """SIGKILL leaves a zombie until its parent reaps it: its partial is already dead."""
    out = tmp_path / "out"
    child = subprocess.Popen(["sleep", "60"])
    try:
        partial = _leftover(out, "partial", child.pid)
        child.kill()
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
            pass
        _publish(out, "new")
        assert not partial.exists()
    finally:
        child.wait()
