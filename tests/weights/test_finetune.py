"""Fine-tuning pays: a run started from weights learned on one synthetic archive reaches a
validation target on another archive in fewer epochs than one started from scratch (the
measurement in docs/weights.md)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from helpers import preprocess, train_argv

import train
from bigearthnet.synthetic.archive import ArchiveSpec, generate_archive

TARGET = 0.6  # validation macro-F1


def _epochs_to_target(run: Path) -> int | None:
    with open(run / "history.csv", newline="") as f:
        for row in csv.DictReader(f):
            if float(row["val_macro_f1"]) >= TARGET:
                return int(row["epoch"])
    return None


@pytest.mark.slow
def test_fine_tuning_reaches_the_target_sooner(trained_run, tmp_path):
    """trained_run: the tiny model, 6 epochs on shards of archive seed 7; here seed 21."""
    generate_archive(
        tmp_path / "archive", ArchiveSpec(240, layout="v1", seed=21, difficulty="simple")
    )
    assert preprocess(tmp_path / "archive", tmp_path / "shards", "--shard-size", "32") == 0
    epochs = {}
    for tag, extra in (("scratch", ()), ("fine-tuned", ("--init-weights", str(trained_run)))):
        argv = train_argv(tmp_path / "shards", tmp_path / tag, 12, "--target-f1", "0.95", *extra)
        assert train.main(argv) == 0
        epochs[tag] = _epochs_to_target(tmp_path / tag)
    assert epochs["fine-tuned"] is not None, epochs
    assert epochs["scratch"] is None or epochs["fine-tuned"] < epochs["scratch"], epochs
