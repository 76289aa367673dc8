"""Numbers and paths as pages and cards show them: the issue's cases (an LR of 0.0004952,
areas of 0.36 km² cells, a wall of 0.03 h, "1 warm-up epochs") and paths of the building
machine kept out of shared text."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bigearthnet.core import display


@pytest.mark.parametrize(
    "value, shown",
    [(0.0004951556604879049, "0.000495"), (0.005, "0.005"), (0.01, "0.01"), (0.0, "0"),
     (0.009875, "0.00988"), (2.5e-6, "2.5e-6"), (3.2, "3.2"), (1234.5, "1.23e3")],
)  # fmt: skip
def test_three_significant_figures(value: float, shown: str) -> None:
    assert display.significant(value) == shown


@pytest.mark.parametrize(
    "value, shown", [(35.14, "35.1"), (449.94, "450"), (3402.76, "3,403"), (1.0, "1")]
)
def test_rounded_measures_never_use_exponents(value: float, shown: str) -> None:
    assert display.rounded(value) == shown


def test_counts_agree_with_their_nouns() -> None:
    assert display.count(1, "warm-up epoch") == "1 warm-up epoch"
    assert display.count(15, "epoch") == "15 epochs"
    assert display.count(0, "scene") == "0 scenes"
    assert display.count(2_000, "patch", "patches") == "2,000 patches"
    assert display.count(2.0, "warm-up epoch") == "2 warm-up epochs"  # a float option
    assert display.count(1.0, "warm-up epoch") == "1 warm-up epoch"
    assert display.count(0.5, "warm-up epoch") == "0.5 warm-up epochs"


@pytest.mark.parametrize(
    "seconds, shown",
    [(5, "5.0 s"), (42, "42 s"), (108, "1.8 min"), (0.03 * 3600, "1.8 min"), (1200, "20 min"),
     (3 * 3600, "3.0 h")],
)  # fmt: skip
def test_durations_read_as_small_numbers(seconds: float, shown: str) -> None:
    assert display.duration(seconds) == shown


@pytest.mark.parametrize(
    "cell_km2, decimals", [(0.36, 2), (1.44, 2), (1e-4, 4), (0.0144, 4), (100.0, 0), (0.5625, 2)]
)
def test_area_decimals_show_one_cell_to_a_percent(cell_km2: float, decimals: int) -> None:
    assert display.area_decimals(cell_km2) == decimals
    shown = float(display.km2(cell_km2, decimals))
    assert abs(shown - cell_km2) <= 0.01 * cell_km2
    assert display.km2(1234 * cell_km2, decimals).count(",") == (1234 * cell_km2 >= 1000)


@pytest.mark.parametrize("bad", [0.0, -0.36, math.inf, math.nan])
def test_area_decimals_refuse_a_cell_without_area(bad: float) -> None:
    with pytest.raises(ValueError, match="is not a positive number"):
        display.area_decimals(bad)


def test_paths_are_shown_relative_to_the_shared_folder_or_by_name(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    assert display.shown_path(run / "eval-test" / "metrics.json", run) == "eval-test/metrics.json"
    assert display.shown_path(tmp_path / "data" / "shards", run) == "shards"
    assert display.shown_path(run, run) == "r1"
    assert display.shown_path("demo/shards", run) == "demo/shards"  # relative: as given
    argv = ["train.py", "--data", str(tmp_path / "shards"), f"--run-dir={run}", "--lr", "0.1"]
    assert display.shown_command(argv, run) == "train.py --data shards --run-dir=r1 --lr 0.1"
    message = f"the training data's manifest ({tmp_path}/shards: data folder does not exist)."
    assert display.shown_text(message, run) == (
        "the training data's manifest (shards: data folder does not exist)."
    )
    assert str(tmp_path) not in display.shown_text(f"{run}/efficiency.json: unreadable", run)


def test_linked_paths_are_relative_unless_only_the_root_is_shared(
    tmp_path: Path, monkeypatch
) -> None:
    """A path an output follows (a map's run) is kept relative to it, ``..`` included; a
    relative path is read from the working folder; where the two share nothing but the
    root, the name alone (a relative path would spell the absolute one out)."""
    run, maps = tmp_path / "runs" / "r1", tmp_path / "work" / "maps"
    assert display.linked_path(run, maps) == "../../runs/r1"
    assert display.linked_path(maps / "a.tif", maps) == "a.tif"
    monkeypatch.chdir(tmp_path)
    assert display.linked_path("runs/r1", maps) == "../../runs/r1"
    assert display.linked_path(run, "/") == "r1"  # only the root in common
    assert display.linked_path("https://x.org/item.json", maps) == "https://x.org/item.json"
    reason = f"{run}/B01.tif: CRS EPSG:32632 differs from B02's"
    assert (
        display.linked_text(reason, maps)
        == "../../runs/r1/B01.tif: CRS EPSG:32632 differs from B02's"
    )
