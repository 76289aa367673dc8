"""The bad-input rows of the command lines themselves: a long option abbreviated or mistyped, a
sub-command that does not exist. Each is refused while parsing - one line naming what was
meant, exit 2, nothing made - in-process and without TensorFlow."""

from __future__ import annotations

from pathlib import Path

import pytest

import train

pytestmark = pytest.mark.bad_input


def test_an_abbreviated_option_is_not_taken_for_the_option(
    tmp_path: Path, reported_errors, bad_input_row
) -> None:
    run = tmp_path / "run"
    code = train.main(["--data", str(tmp_path), "--run-dir", str(run), "--epoch", "3"])
    assert code == 2 and not run.exists()
    (line,) = reported_errors()
    assert "unrecognized arguments: --epoch 3; did you mean '--epochs'?" in line, line
    bad_input_row("`--epoch 3` (an abbreviation of --epochs)", "train.py --epoch 3", code,
                  "refused naming --epochs; never silently --epochs 3")  # fmt: skip


def test_a_mistyped_sub_command_is_named_not_taken_for_an_argument(
    tmp_path: Path, reported_errors, bad_input_row
) -> None:
    from bigearthnet.cli import map as map_command

    out = tmp_path / "map.tif"
    code = map_command.main(["scenes", str(tmp_path / "S2.SAFE"), "--out", str(out)])
    assert code == 2 and not out.exists()
    (line,) = reported_errors()
    assert "'scenes' is not a command of bigearthnet-map; did you mean 'scene'?" in line, line
    bad_input_row("sub-command `scenes` (for scene)", "bigearthnet-map scenes S2.SAFE", code,
                  "one line: did you mean 'scene'; not 'unrecognized arguments'")  # fmt: skip


@pytest.mark.parametrize(
    "environment, line",
    [({"ELASTIC_SLOTS": "four"},
      "$ELASTIC_SLOTS='four' (the default of --slots): invalid int value: 'four'"),
     ({"ELASTIC_SLOTS": "0"}, "$ELASTIC_SLOTS='0' (the default of --slots): must be a positive"),
     ({"ELASTIC_HOSTS_DIR": ""}, "--hosts-dir is required (or set $ELASTIC_HOSTS_DIR)")],
    ids=["not-a-number", "zero", "unset"],
)  # fmt: skip
def test_an_environment_default_is_checked_as_its_flag(
    tmp_path: Path, monkeypatch, environment, line, reported_errors, bad_input_row
) -> None:
    """A job script's setting (bigearthnet-elastic's ELASTIC_*) is parsed and checked as the
    flag it stands for: ELASTIC_SLOTS=four was a traceback."""
    from bigearthnet.cli import elastic

    hosts = [] if "ELASTIC_HOSTS_DIR" in environment else ["--hosts-dir", str(tmp_path)]
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    code = elastic.main([*hosts, "grow", "1"])
    assert code == 2 and list(tmp_path.iterdir()) == []
    (reported,) = reported_errors()
    assert line in reported, reported
    setting = " ".join(f"{name}={value}" for name, value in environment.items())
    bad_input_row(f"`{setting}`", "bigearthnet-elastic grow 1", code,
                  "one line naming the variable and the flag")  # fmt: skip
