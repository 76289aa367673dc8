"""What a run folder may be (:mod:`bigearthnet.formats.run_folder`): train.py writes its run
only into a folder of its own - not into a file, an export, shards or a published
classifier's folder (that one in tests/weights/test_published_run.py)."""

from __future__ import annotations

import pytest

import train


@pytest.mark.bad_input
@pytest.mark.parametrize("folder", ["an export", "shards", "a file"])
def test_train_writes_no_run_into_another_commands_folder(
    folder, shards_v1, tmp_path, reported_errors, bad_input_row
) -> None:
    """Before, train.py trained into an export folder: config.yaml, checkpoints/, history.csv
    beside its export.json and model files."""
    made = {"an export": "export.json", "shards": "manifest.json", "a file": ""}[folder]
    target = tmp_path / "target"
    if made:
        target.mkdir()
        (target / made).write_text("{}")
    else:
        target.write_text("a file")
    before = sorted(tmp_path.rglob("*"))
    code = train.main(["--data", str(shards_v1), "--run-dir", str(target), "--epochs", "1"])
    assert code == 2 and sorted(tmp_path.rglob("*")) == before
    (line,) = reported_errors()
    assert str(target) in line and ("not a training run" in line or "not a folder" in line)
    bad_input_row(f"--run-dir = {folder}", "train.py --run-dir X", code,
                  "refused in one line; nothing written into it")  # fmt: skip
