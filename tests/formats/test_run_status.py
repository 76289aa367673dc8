"""bigearthnet.formats.run_status: how a run ended, written atomically and read back."""

from __future__ import annotations

from pathlib import Path

import pytest

from bigearthnet.formats.run_status import RunStatus, clear_status, read_status, write_status


def test_status_round_trip_and_clear(tmp_path: Path) -> None:
    assert read_status(tmp_path) is None  # a run still going (or never started)
    write_status(tmp_path, RunStatus("target", 7, "validation micro-F1 reached 0.9"))
    status = read_status(tmp_path)
    assert status is not None and (status.state, status.epoch) == ("target", 7)
    assert status.time  # stamped when written
    clear_status(tmp_path)
    assert read_status(tmp_path) is None


def test_only_endings_are_written_and_bad_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="expected one of"):
        write_status(tmp_path, RunStatus("running", 1, "-"))
    (tmp_path / "status.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"status.json: not a run status file"):
        read_status(tmp_path)
