"""Bad --pixel-loss-weight values and resumes that would mix runs with and without the dense
head (rows of `make bad-input`): one line naming the option, exit 2, nothing trained, the run
folder as it was."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import one_line, train_argv

import train

pytestmark = pytest.mark.bad_input


def _record_of(run: Path) -> dict[str, bytes]:
    """What a refused resume must leave as it was (the lock of the refused process aside)."""
    return {str(p): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_weight_out_of_range_is_refused(
    value, shards_v2, tmp_path, reported_errors, bad_input_row
) -> None:
    run = tmp_path / "run"
    code = train.main([*train_argv(shards_v2, run, 1), "--pixel-loss-weight", value])
    assert code == 2 and not run.exists()
    one_line(reported_errors(), "--pixel-loss-weight: must be a finite number >= 0", value)
    bad_input_row(f"`--pixel-loss-weight {value}`", "train.py", code,
                  "refused before any rank starts")  # fmt: skip


@pytest.mark.parametrize("value", [".nan", "-0.5", "true"])
def test_a_weight_out_of_range_in_a_config_file_is_refused(
    value, shards_v2, tmp_path, reported_errors, bad_input_row
) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"pixel_loss_weight: {value}\n")
    run = tmp_path / "run"
    code = train.main([*train_argv(shards_v2, run, 1), "--config", str(recipe)])
    assert code == 2 and not run.exists()
    one_line(reported_errors(), f"{recipe}: pixel_loss_weight must be")
    bad_input_row(f"`pixel_loss_weight: {value}` in a --config file", "train.py", code,
                  "refused naming the file and the key, before any rank starts")  # fmt: skip


def test_a_weight_on_shards_without_maps_is_refused(
    shards_v1, tmp_path, reported_errors, bad_input_row
) -> None:
    run = tmp_path / "run"
    code = train.main([*train_argv(shards_v1, run, 1), "--pixel-loss-weight", "1"])
    assert code == 2 and not run.exists()
    one_line(reported_errors(), "--pixel-loss-weight 1", str(shards_v1), "no reference maps")
    bad_input_row("`--pixel-loss-weight 1` on shards without reference maps", "train.py",
                  code, "refused before any rank starts: no maps to learn from")  # fmt: skip


def test_a_run_without_the_head_does_not_resume_on_shards_with_maps(
    trained_run, shards_v2, tmp_path, reported_errors, bad_input_row
) -> None:
    """Resumed on shards with maps, the default would turn the head on in the middle of a
    run trained without it: refused by the recipe check, naming the way on."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    before = _record_of(run)
    code = train.main(train_argv(shards_v2, run, 8, "--allow-new-data"))
    assert code == 2 and _record_of(run) == before
    one_line(reported_errors(), str(run), "--pixel-loss-weight 0.0 -> 0.1",
             "--pixel-loss-weight 0 resumes it")  # fmt: skip
    bad_input_row("a resume of a run without the dense head on shards with maps",
                  "train.py (resume)", code, "refused naming --pixel-loss-weight and the way "
                  "on (0 resumes it without the head); nothing trained")  # fmt: skip


@pytest.mark.parametrize("how", ["shards without maps", "--pixel-loss-weight 0"])
def test_a_run_with_the_head_does_not_resume_without_it(
    how, trained_head_run, shards_v1, shards_v2, tmp_path, reported_errors, bad_input_row
) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained_head_run, run)
    before = _record_of(run)
    if how == "shards without maps":
        argv = train_argv(shards_v1, run, 8, "--allow-new-data")
    else:
        argv = train_argv(shards_v2, run, 8, "--pixel-loss-weight", "0")
    code = train.main(argv)
    assert code == 2 and _record_of(run) == before
    one_line(reported_errors(), str(run), "--pixel-loss-weight 0.1 -> 0.0",
             "trained the dense head (--pixel-loss-weight 0.1)")  # fmt: skip
    bad_input_row(f"a resume of a run with the dense head on {how}", "train.py (resume)",
                  code, "refused naming --pixel-loss-weight; nothing trained")  # fmt: skip
