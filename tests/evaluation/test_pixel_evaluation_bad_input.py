"""evaluate.py's pixel figures, bad input: a truth that is not the shards' (another
generation of the archive, a truncated file) is not scored, one warning says why; a model
with the dense head on shards without maps is scored by the heads' agreement alone; a
pixel file cut short stops the run page in one line naming it."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from helpers import one_line

import evaluate
from bigearthnet.cli.report import main as report_main
from bigearthnet.formats.archive_origin import MARK
from bigearthnet.formats.manifest import read_manifest, write_manifest
from bigearthnet.formats.pixel_eval import PIXEL_PER_CLASS, read_confusions
from bigearthnet.formats.truth_maps import TRUTH_MAPS

pytestmark = [pytest.mark.bad_input, pytest.mark.xdist_group("trained-head")]


def _evaluate(run: Path, data: Path, out: Path) -> tuple[int, dict]:
    code = evaluate.main(["--run-dir", str(run), "--data", str(data), "--out", str(out)])
    written = json.loads((out / "metrics.json").read_text()) if code == 0 else {}
    return code, written


def _shards_of(archive: Path, shards: Path, tmp_path: Path) -> Path:
    """A copy of ``shards`` whose manifest says it was made of ``archive``."""
    copy = tmp_path / "shards"
    shutil.copytree(shards, copy)
    write_manifest(copy, dataclasses.replace(read_manifest(copy), archive=str(archive)))
    return copy


@pytest.mark.parametrize("case", ["of another generation", "truncated"])
def test_a_truth_that_is_not_the_shards_is_not_scored(
    case, trained_head_run, shards_v2, synth_v2, tmp_path, rank_log, bad_input_row
) -> None:
    archive = tmp_path / "archive"
    shutil.copytree(synth_v2, archive)
    if case == "truncated":
        truth = archive / TRUTH_MAPS
        truth.write_bytes(truth.read_bytes()[:2000])
        why = f"{truth}: unreadable truth maps"
    else:
        mark = json.loads((archive / MARK).read_text())
        (archive / MARK).write_text(json.dumps({**mark, "seed": mark["seed"] + 1}))
        why = f"{archive} is now"
    code, written = _evaluate(trained_head_run, _shards_of(archive, shards_v2, tmp_path),
                              tmp_path / "eval")  # fmt: skip
    assert code == 0 and written["pixel_count"] > 0 and "pixel_truth_count" not in written
    assert list(read_confusions(tmp_path / "eval")[1]) == ["reference"]
    lines = [record.getMessage() for record in rank_log.records]
    warned = [line for line in lines if "not scored against the truth" in line]
    assert warned and why in warned[0] and "\n" not in warned[0], warned
    bad_input_row(f"truth_maps.h5 beside the shards' archive, {case}", "evaluate.py", code,
                  "scored against the reference maps only; one warning says why")  # fmt: skip


def test_a_dense_head_on_shards_without_maps_is_scored_by_agreement(
    trained_head_run, shards_v1, tmp_path, rank_log, bad_input_row
) -> None:
    code, written = _evaluate(trained_head_run, shards_v1, tmp_path / "eval")
    assert code == 0 and 0.0 <= written["head_agreement_micro_f1"] <= 1.0
    assert "pixel_count" not in written and not (tmp_path / "eval" / PIXEL_PER_CLASS).exists()
    assert "the shards hold no reference maps" in rank_log.text
    bad_input_row("a model with the dense head evaluated on shards without maps",
                  "evaluate.py", code, "label metrics as ever, the two heads' agreement; "
                  "no pixel figures (nothing to score against), one warning")  # fmt: skip


def test_a_pixel_file_cut_short_stops_the_page(
    trained_head_run, shards_v2, tmp_path, reported_errors, bad_input_row
) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained_head_run, run, ignore=shutil.ignore_patterns("eval-*", ".lock"))
    assert _evaluate(run, shards_v2, run / "eval-test")[0] == 0
    path = run / "eval-test" / PIXEL_PER_CLASS
    text = path.read_text()
    path.write_text(text[: len(text) // 3])
    code = report_main([str(run)])
    assert code == 2
    one_line(reported_errors(), str(path), "cut short")
    bad_input_row("pixel_per_class.csv cut short", "bigearthnet-report RUN", code,
                  "one line naming the file, no page")  # fmt: skip
