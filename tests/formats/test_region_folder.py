"""bigearthnet.formats.region_folder: consistency.json as a typed record, written and read
in one place; the grid's bounds and cell centres from the record alone."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

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
