"""bigearthnet.formats.region_folder: consistency.json as a typed record, written and read
in one place; the grid's bounds and cell centres from the record alone; the products
swapped in so that a kill loses neither the old set nor the new one."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers import Killed, kill_swap_at

from bigearthnet.core.errors import InputError
from bigearthnet.formats import region_folder
from bigearthnet.formats.region_folder import (
    ConsistencyRecord,
    GridRecord,
    SceneEntry,
    SkippedScene,
    read_consistency,
    write_consistency,
)

GRID = GridRecord("EPSG:3035", 600.0, 3, 2, (600.0, 0.0, 4_000_000.0, 0.0, -600.0, 3_000_000.0))


def _record() -> ConsistencyRecord:
    return ConsistencyRecord(
        periods=("2020-03", "2020-04"),
        period="month",
        grid=GRID,
        persistence=0.99,
        scenes=(SceneEntry("/data/a", "T32UQU", "2020-03-15"),),
        skipped=(SkippedScene("/data/b", "a second scene of tile T32UQU on 2020-03-15"),),
        cells_observed={"2020-03": 6, "2020-04": 5},
        flicker_rate={"raw": 0.1, "consistent": 0.0},
        lasting_changes=1,
        cells_ever_observed=6,
        observed_km2=2.16,
    )


def test_the_record_reads_back_as_written(tmp_path: Path) -> None:
    write_consistency(tmp_path, _record())
    assert read_consistency(tmp_path) == _record()
    assert region_folder.is_complete(tmp_path)


def test_bounds_and_centres_come_from_the_record() -> None:
    assert GRID.bounds == (4_000_000.0, 2_998_800.0, 4_001_800.0, 3_000_000.0)
    xs, ys = GRID.centres()
    np.testing.assert_array_equal(xs[0], [4_000_300.0, 4_000_900.0, 4_001_500.0])
    np.testing.assert_array_equal(ys[:, 0], [2_999_700.0, 2_999_100.0])


@pytest.mark.parametrize("damage", ["missing", "truncated", "a field short"])
def test_a_missing_or_damaged_record_is_one_line_naming_it(tmp_path: Path, damage: str) -> None:
    path = tmp_path / region_folder.CONSISTENCY
    if damage != "missing":
        write_consistency(tmp_path, _record())
        text = path.read_text()
        short = {k: v for k, v in json.loads(text).items() if k != "period"}
        path.write_text(text[: len(text) // 2] if damage == "truncated" else json.dumps(short))
    with pytest.raises(InputError, match=str(path)) as err:
        read_consistency(tmp_path)
    assert "\n" not in str(err.value)


def test_staging_removes_only_the_products_of_a_builder_that_is_gone(tmp_path: Path) -> None:
    """A killed build's staging folder is removed by the next build (its builder gone, or
    this very process after a failure); one a live process may be building stays."""
    child = subprocess.Popen(["true"])
    child.wait()
    host = socket.gethostname()
    builders = {"dead": child.pid, "this": os.getpid(), "elsewhere": child.pid}
    left = {}
    for who, pid in builders.items():
        where = host if who != "elsewhere" else "node-elsewhere"
        left[who] = tmp_path / f"{region_folder.STAGING_PREFIX}{pid}@{where}-0123abcd"
        (left[who] / region_folder.PERIODS).mkdir(parents=True)
    staged = region_folder.staging(tmp_path)
    assert staged.name.startswith(f"{region_folder.STAGING_PREFIX}{os.getpid()}@")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [staged.name, left["elsewhere"].name]
    )


def _products(folder: Path, which: str, names: tuple[str, ...]) -> None:
    for name in names:
        if name == region_folder.PERIODS:
            (folder / name).mkdir()
            (folder / name / "2020-03.tif").write_text(which)
        else:
            (folder / name).write_text(which)


def _seen(out: Path) -> dict[str, str]:
    """Each product in ``out`` -> "old" or "new"; consistency.json's too."""
    seen = {}
    for name in (*region_folder.PRODUCTS, region_folder.CONSISTENCY):
        path = out / name
        if path.is_dir():
            seen[name] = (path / "2020-03.tif").read_text()
        elif path.is_file():
            seen[name] = "new" if name == region_folder.CONSISTENCY and _new_record(out) else (
                path.read_text())  # fmt: skip
    return seen


def _new_record(out: Path) -> bool:
    try:
        return read_consistency(out) == _record()
    except InputError:
        return False


OLD = (region_folder.PERIODS, "changes.tif", "areas.csv", "transitions.csv",
       region_folder.CONSISTENCY)  # fmt: skip
NEW = (region_folder.PERIODS, "changes.tif", "areas.csv")  # no transitions.csv: removed
# The renames: the 5 old entries aside (consistency.json first), then the 4 new ones in
# (consistency.json last); the step killed -> what it interrupts.
STEPS = {
    "rename 1": "before the old set is moved aside",
    "rename 3": "moving the old set aside",
    "rename 6": "after the aside moves, before the new set's renames",
    "rename 8": "moving the new set in",
    "rename 9": "before consistency.json's rename",
    "remove the old": "removing the old set",
    "none": "nothing",
}


@pytest.mark.fault
@pytest.mark.parametrize("step", list(STEPS))
def test_a_kill_while_products_are_swapped_loses_neither_set(tmp_path, monkeypatch, step,
                                                            fault_row):  # fmt: skip
    """Issue 48: the products were swapped by delete-then-rename, so a kill in between lost
    the old ones before the new ones were in. Now at every step consistency.json is present
    only over a whole set, old or new; and the next run into the folder finishes the swap:
    the new set, nothing of the old one, the folder's other files untouched."""
    out = tmp_path / "region"
    region_folder.claim(out)
    (out / region_folder.SCENES).mkdir()
    (out / region_folder.PAGE).write_text("page")
    _products(out, "old", OLD)
    staged = region_folder.staging(out)
    _products(staged, "new", NEW)
    kill_swap_at(monkeypatch, step, old=lambda path: path == staged)
    with contextlib.suppress(Killed):
        region_folder.publish(out, staged, _record())
    monkeypatch.undo()
    seen = _seen(out)
    if region_folder.is_complete(out):  # complete: one whole set, never a mix
        (which,) = set(seen.values())
        assert set(seen) == set(OLD if which == "old" else (*NEW, region_folder.CONSISTENCY))
    assert (step in ("rename 1", "remove the old", "none")) == region_folder.is_complete(out)
    region_folder.claim(out)  # the next run
    assert _seen(out) == dict.fromkeys((*NEW, region_folder.CONSISTENCY), "new")
    assert read_consistency(out) == _record()
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            *NEW,
            region_folder.CONSISTENCY,
            region_folder.MARK,
            region_folder.SCENES,
            region_folder.PAGE,
        ]  # fmt: skip
    )
    fault_row(f"region products swapped, killed {STEPS[step]}", runs=2, detect_s=None,
              data_lost="none: the old set or the new one whole; the next run finishes "
              "the swap (the new set, consistency.json last)")  # fmt: skip
