"""evaluate.py / bigearthnet.evaluation.evaluate: metrics recomputable, rank-count independent,
bad input."""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from helpers import assert_scores_close, horovodrun
from PIL import Image
from sklearn.metrics import average_precision_score, f1_score

import evaluate
from bigearthnet.core import constants, distributed
from bigearthnet.core.errors import EvaluationError
from bigearthnet.evaluation import evaluate as evaluation
from bigearthnet.evaluation import metrics, plots, report
from bigearthnet.evaluation.options import EvalOptions
from bigearthnet.evaluation.summary import read_metrics
from bigearthnet.formats.manifest import Manifest, read_manifest, write_manifest

PLOTS = ("f1_per_class.png", "pr_curves.png", "training_curves.png")


def run_evaluate(run: Path, out: Path, *extra: str) -> int:
    return evaluate.main(["--run-dir", str(run), "--out", str(out), *extra])


def read_predictions(out: Path) -> tuple[list[str], np.ndarray, np.ndarray, list[str]]:
    with h5py.File(out / "predictions.h5", "r") as f:
        names = [n.decode() for n in f["names"][:]]
        classes = [str(c) for c in f.attrs["classes"]]
        return names, f["scores"][:], f["labels"][:], classes


def sklearn_metrics(scores: np.ndarray, labels: np.ndarray, threshold) -> dict[str, float]:
    """F1s at ``threshold`` and micro/macro AP over the classes present, by scikit-learn."""
    pred = scores >= np.asarray(threshold)
    found = {f"{avg}_f1": f1_score(labels, pred, average=avg, zero_division=0)
             for avg in ("micro", "macro", "samples", "weighted")}  # fmt: skip
    present = np.flatnonzero(labels.any(axis=0))
    found["micro_map"] = average_precision_score(labels, scores, average="micro")
    found["macro_map"] = np.mean([average_precision_score(labels[:, c], scores[:, c])
                                  for c in present])  # fmt: skip
    return found


def split_names(data: Path, split: str) -> list[str]:
    """Patch names of a split straight from the shards, in manifest order."""
    names = []
    for entry in read_manifest(data).split_shards(split):
        with h5py.File(entry.path(data), "r") as f:
            names += [n.decode() for n in f["names"][:]]
    return names


# Its module fixtures train or evaluate: all its tests in one xdist worker, built once.
pytestmark = pytest.mark.xdist_group("evaluate")


@pytest.fixture(scope="module")
def test_eval(trained_run: Path, tmp_path_factory) -> Path:
    """One single-process evaluation of the best checkpoint on the test split."""
    out = tmp_path_factory.mktemp("eval") / "test-1rank"
    assert run_evaluate(trained_run, out) == 0
    return out


def test_metrics_equal_sklearn_recomputed_from_predictions(test_eval: Path, shards_v1) -> None:
    written = json.loads((test_eval / "metrics.json").read_text())
    names, scores, labels, classes = read_predictions(test_eval)
    assert scores.dtype == np.float32 and labels.dtype == np.uint8
    assert classes == list(constants.CLASSES_19) == written["classes"]
    assert names == split_names(shards_v1, "test")
    assert written["count"] == len(names) == read_manifest(shards_v1).count("test")
    assert written["split"] == "test" and written["checkpoint"] == "best"
    assert written["world_size"] == 1 and written["epoch"] >= 1
    pred = scores >= written["threshold"]
    for avg in ("micro", "macro", "samples", "weighted"):
        expected = f1_score(labels, pred, average=avg, zero_division=0)
        assert written[f"{avg}_f1"] == pytest.approx(expected, abs=1e-12)
    assert written["micro_map"] == pytest.approx(
        average_precision_score(labels, scores, average="micro"), abs=1e-12
    )
    present = labels.any(axis=0)
    ap = [average_precision_score(labels[:, c], scores[:, c]) for c in np.flatnonzero(present)]
    assert written["macro_map"] == pytest.approx(np.mean(ap), abs=1e-12)
    per_class_ap = [row["ap"] for row in written["per_class"] if row["ap"] is not None]
    assert per_class_ap == pytest.approx(ap, abs=1e-12)


def test_per_class_csv_and_plots(test_eval: Path) -> None:
    written = json.loads((test_eval / "metrics.json").read_text())
    with open(test_eval / "per_class.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["class"] for r in rows] == list(constants.CLASSES_19)
    assert list(rows[0]) == ["class", "index", "support", "precision", "recall", "f1", "ap"]
    for row, expected in zip(rows, written["per_class"]):
        assert int(row["support"]) == expected["support"]
        assert float(row["f1"]) == pytest.approx(expected["f1"])
    for name in PLOTS:
        path = test_eval / name
        assert path.stat().st_size > 1000
        with Image.open(path) as image:
            assert image.format == "PNG" and min(image.size) > 100
            image.verify()
    assert not list(test_eval.glob(".*tmp*"))  # atomic writes leave no temporaries
    # a model without the dense head: no pixel key, file or figure (metrics.json as before)
    assert not any("pixel" in key or "agreement" in key for key in written)
    assert not list(test_eval.glob("pixel_*"))


def test_console_table_and_return_value(trained_run: Path, tmp_path: Path, capsys) -> None:
    opts = EvalOptions(run_dir=trained_run, split="val", out=tmp_path, batch_size=16)
    summary = evaluation.evaluate_run(opts)
    table = capsys.readouterr().out
    # The record returned is what metrics.json holds, and what its one reader gives back.
    result = json.loads((tmp_path / "metrics.json").read_text())
    assert summary.to_json() == result
    assert dataclasses.replace(read_metrics(tmp_path), folder=None) == summary
    assert result["split"] == "val" and f"on val: {result['count']} patches" in table
    assert f"micro_f1 {result['micro_f1']:.4f}" in table
    assert sum(line.startswith("  Urban fabric ") for line in table.splitlines()) == 1
    assert len(table.splitlines()) == 8 + len(constants.CLASSES_19) + 5
    constant = result["constant_micro_f1"]  # the best constant answer: what a model must beat
    assert 0 < constant < 1 and f"for every patch): micro_f1 {constant:.4f}" in table
    classes = result["macro_classes"]  # the classes with positives in val
    assert f"macro averages over the {classes} of 19 classes with positives" in table
    # The four card metrics beside reBEN's published ResNet-50 (S1+S2), with the gap.
    assert "beside reBEN's ResNet-50 S1+S2 card" in table and "this run: bands s2" in table
    gap = result["macro_map"] - 0.70
    assert f"macro_map  {result['macro_map']:8.4f}  card 0.70  gap {gap:+.4f}" in table


def test_tune_thresholds_on_val_applied_to_test(trained_run: Path, tmp_path: Path) -> None:
    assert run_evaluate(trained_run, tmp_path / "val", "--split", "val") == 0
    assert run_evaluate(trained_run, tmp_path / "tuned", "--tune-thresholds") == 0
    saved = json.loads((tmp_path / "tuned" / "thresholds.json").read_text())
    written = json.loads((tmp_path / "tuned" / "metrics.json").read_text())
    _, val_scores, val_labels, _ = read_predictions(tmp_path / "val")
    expected = metrics.tune_thresholds(val_labels, val_scores)
    assert saved["tuned_on"] == "val" and saved["classes"] == list(constants.CLASSES_19)
    assert saved["thresholds"] == pytest.approx(expected.tolist())
    assert written["threshold"] == saved["thresholds"] and written["split"] == "test"
    _, scores, labels, _ = read_predictions(tmp_path / "tuned")
    pred = scores >= np.asarray(saved["thresholds"])
    assert written["micro_f1"] == pytest.approx(f1_score(labels, pred, average="micro"))
    assert written["macro_f1"] == pytest.approx(
        f1_score(labels, pred, average="macro", zero_division=0)
    )


@pytest.mark.horovod
def test_two_ranks_equal_one_rank(trained_run: Path, test_eval: Path, tmp_path: Path) -> None:
    out = tmp_path / "test-2ranks"
    result = horovodrun(2, "evaluate.py", "--run-dir", str(trained_run), "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    one = json.loads((test_eval / "metrics.json").read_text())
    two = json.loads((out / "metrics.json").read_text())
    assert two["world_size"] == 2 and one["count"] == two["count"]
    names1, scores1, labels1, _ = read_predictions(test_eval)
    names2, scores2, labels2, _ = read_predictions(out)
    assert sorted(names1) == sorted(names2) and len(set(names2)) == len(names2)
    np.testing.assert_array_equal(labels1, labels2)
    # The ranks' batches differ from one rank's, so the scores agree to float32 rounding,
    # and a ranking metric (AP) moves wherever rounding reorders two near-equal scores: the
    # metrics are checked against the 2-rank run's own gathered predictions, exactly.
    assert_scores_close(scores2, scores1)
    for key, value in sklearn_metrics(scores2, labels2, two["threshold"]).items():
        assert two[key] == pytest.approx(value, abs=1e-12), key
    assert result.stdout.count("evaluation of ") == 1  # only rank 0 prints the table
    for name in PLOTS:  # drawn and written by rank 0
        with Image.open(out / name) as image:
            assert image.format == "PNG" and min(image.size) > 100
    assert not list(out.glob(".*tmp*"))


def test_a_plot_that_fails_to_draw_is_reported_and_left_out(rank_log) -> None:
    distributed.init(threads=1)  # a world of one (other tests may not have run first)

    def broken() -> bytes:
        raise ValueError("no ticks\nsecond line")

    drawn = plots.draw_plots(
        {
            "pr_curves.png": broken,
            "training_curves.png": lambda: None,
            "f1_per_class.png": lambda: b"png",
        }
    )
    assert drawn == {"f1_per_class.png": b"png"}
    assert "plot pr_curves.png not drawn: ValueError: no ticks" in rank_log.text


def test_coverage_check_fails_loudly() -> None:
    distributed.init(threads=1)  # a world of one, whichever test ran before in this process
    predictions = report.Predictions(
        ["a", "b", "b"], np.zeros((3, 19), np.uint8), np.zeros((3, 19), np.float32)
    )
    with pytest.raises(EvaluationError, match="2 distinct names"):
        evaluation.check_coverage(predictions, Manifest(shards=(), counts={"test": 3}), "test")
    with pytest.raises(EvaluationError, match="manifest counts 4"):
        evaluation.check_coverage(predictions, Manifest(shards=(), counts={"test": 4}), "test")


# --------------------------------------------------------------------------- bad input


def copy_run(run: Path, dest: Path, labels: int | None = None, checkpoints: bool = True) -> Path:
    shutil.copytree(run, dest)
    if not checkpoints:
        shutil.rmtree(dest / "checkpoints")
    if labels is not None:
        config = yaml.safe_load((dest / "config.yaml").read_text())
        (dest / "config.yaml").write_text(yaml.safe_dump({**config, "labels": labels}))
    return dest


def data_without_test(data: Path, dest: Path) -> Path:
    """The shards with an empty test split (train and val files linked, not copied)."""
    dest.mkdir()
    manifest = read_manifest(data)
    kept = tuple(s for s in manifest.shards if s.split != "test")
    manifest = dataclasses.replace(manifest, shards=kept, counts={**manifest.counts, "test": 0})
    for entry in manifest.shards:
        (dest / entry.file).symlink_to(entry.path(data))
    write_manifest(dest, manifest)
    return dest


@pytest.mark.parametrize(
    "case, message",
    [
        ("no checkpoints", "no 'best' checkpoint"),
        ("class count", "has 19 classes but the run's label set is 43"),
        ("empty split", "the test split is empty"),
        ("threshold", "--threshold: must be inside (0, 1)"),
        ("missing data", "data folder does not exist"),
        ("not a run", "not a training run folder"),
        ("bad checkpoint path", "not a checkpoint"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    case: str, message: str, trained_run: Path, shards_v1: Path, tmp_path: Path, reported_errors
) -> None:
    run, extra = trained_run, []
    if case == "no checkpoints":
        run = copy_run(trained_run, tmp_path / "run", checkpoints=False)
    elif case == "class count":
        run = copy_run(trained_run, tmp_path / "run", labels=43)
    elif case == "empty split":
        extra = ["--data", str(data_without_test(shards_v1, tmp_path / "data"))]
    elif case == "threshold":
        extra = ["--threshold", "1.5"]
    elif case == "missing data":
        extra = ["--data", str(tmp_path / "nowhere")]
    elif case == "not a run":
        run = tmp_path
    elif case == "bad checkpoint path":
        extra = ["--checkpoint", str(tmp_path)]
    assert run_evaluate(run, tmp_path / "out", *extra) == 2
    err = reported_errors()
    assert len(err) == 1 and "evaluate.py: error: " in err[0] and message in err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.bad_input
def test_an_out_of_other_files_is_refused_before_the_work(
    trained_run: Path, tmp_path: Path, reported_errors, bad_input_row
) -> None:
    """--out was written into whatever it named: the report's files replaced the user's
    of the same name (metrics.json) among the rest (issue #48: every command that writes a
    folder goes through core/folders)."""
    mine = tmp_path / "notes"
    mine.mkdir()
    for name in ("metrics.json", "notes.txt"):
        (mine / name).write_text("mine\n")
    code = run_evaluate(trained_run, mine)
    assert code == 2 and sorted(p.name for p in mine.iterdir()) == ["metrics.json", "notes.txt"]
    assert (mine / "metrics.json").read_text() == "mine\n"
    assert "--out holds other files (notes.txt) and is no folder of evaluate.py" in (
        reported_errors()[-1])  # fmt: skip
    bad_input_row("--out a folder of other files", "evaluate.py --out DIR", code,
                  "refused before the model loads, naming what it holds; nothing "
                  "touched")  # fmt: skip


@pytest.mark.horovod
@pytest.mark.slow  # a third horovodrun world; the fast tier keeps test_two_ranks_equal_one_rank
def test_error_on_one_rank_stops_both(trained_run: Path, shards_v1: Path, tmp_path: Path) -> None:
    """A corrupt shard only rank 1 reads: both ranks exit 2 instead of hanging."""
    data = tmp_path / "data"
    shutil.copytree(shards_v1, data)
    last = read_manifest(data).split_shards("test")[-1]
    with open(last.path(data), "r+b") as f:
        f.seek(-100, 2)
        f.write(b"\0" * 100)
    argv = ["evaluate.py", "--run-dir", str(trained_run), "--data", str(data)]
    result = horovodrun(2, *argv, "--out", str(tmp_path / "out"), timeout=120)
    assert result.returncode != 0
    assert "differs from the manifest" in result.stderr + result.stdout
    assert "other rank(s) failed" in result.stderr + result.stdout
    assert not (tmp_path / "out").exists()
