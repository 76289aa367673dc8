"""evaluate.py on a model with the dense head: its pixel figures against the reference maps
and the synthetic truth equal a recount of the split with scikit-learn, the pixels scored are
every labelled pixel of the split, 2 ranks count what 1 rank counts, and the two heads'
agreement is recomputable from predictions.h5."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from helpers import horovodrun
from PIL import Image
from sklearn.metrics import confusion_matrix, f1_score

from bigearthnet.core import constants
from bigearthnet.data.rank_data import RankData
from bigearthnet.evaluation.pixel_metrics import MIN_CLASS_PIXELS, pixel_scores
from bigearthnet.formats.manifest import read_manifest
from bigearthnet.formats.pixel_eval import read_confusions, read_pixel_classes
from bigearthnet.formats.truth_maps import read_truth_maps
from bigearthnet.inference.trained_run import load_model
from bigearthnet.pages.run_page import write_run_page

# One evaluation of the shared dense-head run (~15 s with its recount): slow, as make test
# has no room; the fast tier keeps pixel_metrics' and the files' unit tests.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("trained-head")]
CLASSES = len(constants.CLASSES_19)


@pytest.fixture(scope="module")
def recount(trained_head_run: Path, shards_v2: Path, synth_v2: Path) -> dict:
    """The test split predicted again in one batch and counted with scikit-learn."""
    part = RankData(shards_v2, read_manifest(shards_v2), "test", labels=19, maps=True)
    batch = part.take(np.arange(len(part)))
    names = part.names()
    predicted = load_model(trained_head_run).predict_pixels(batch.images).argmax(-1)
    truth = read_truth_maps(synth_v2, names)
    counts = {}
    for against, maps in (("reference", batch.maps), ("truth", [truth[n] for n in names])):
        maps = np.asarray(maps)
        labelled = maps < CLASSES
        counts[against] = confusion_matrix(maps[labelled], predicted[labelled],
                                           labels=range(CLASSES))  # fmt: skip
    return counts


def test_the_pixel_figures_are_a_recount_of_the_split(head_eval, recount, shards_v2) -> None:
    written = json.loads((head_eval / "metrics.json").read_text())
    classes, confusions = read_confusions(head_eval)
    assert classes == list(constants.CLASSES_19) and list(confusions) == ["reference", "truth"]
    maps = read_manifest(shards_v2).reference_maps
    assert written["pixel_count"] == sum(maps.class_pixels["test"][:CLASSES])  # every one
    assert written["pixel_truth_count"] == 11 * 120 * 120  # the truth labels every pixel
    rows = read_pixel_classes(head_eval)
    for against, prefix in (("reference", "pixel"), ("truth", "pixel_truth")):
        mine, theirs = confusions[against], recount[against]
        assert mine.sum() == theirs.sum() == written[f"{prefix}_count"]
        # One batch here, near-equal batches there: float32 rounding may move a pixel's
        # argmax where two classes tie; never more than a few pixels in a thousand.
        assert np.abs(mine - theirs).sum() <= 2e-3 * theirs.sum(), against
        scores = pixel_scores(mine)  # the file's counts give metrics.json's figures exactly
        assert written[f"{prefix}_overall_accuracy"] == scores.overall_accuracy
        assert written[f"{prefix}_miou"] == scores.miou
        assert written[f"{prefix}_miou_classes"] == scores.miou_classes
        recounted = pixel_scores(theirs)
        assert scores.overall_accuracy == pytest.approx(recounted.overall_accuracy, abs=2e-3)
        assert scores.miou == pytest.approx(recounted.miou, abs=2e-2)  # a few IoUs of rare
        iou = [row.iou for row in rows if row.against == against]  # classes move most
        np.testing.assert_allclose(iou, scores.iou)
    assert written["pixel_truth_maps"].endswith("truth_maps.h5")


def test_the_two_heads_agreement_is_recomputable(head_eval) -> None:
    written = json.loads((head_eval / "metrics.json").read_text())
    with h5py.File(head_eval / "predictions.h5", "r") as f:
        counts, scores, labels = f["pixel_class_counts"][:], f["scores"][:], f["labels"][:]
    assert counts.shape == (11, CLASSES) and (counts.sum(axis=1) == 120 * 120).all()
    found, predicted = counts >= MIN_CLASS_PIXELS, scores >= written["threshold"]
    assert written["head_agreement_micro_f1"] == pytest.approx(
        f1_score(found, predicted, average="micro", zero_division=0), abs=1e-12
    )
    assert written["head_agreement_exact"] == np.mean((found == predicted).all(axis=1))
    assert written["pixel_classes_micro_f1"] == pytest.approx(
        f1_score(labels, found, average="micro", zero_division=0), abs=1e-12
    )


def test_the_confusion_figure_is_on_the_run_page(head_eval, trained_head_run, tmp_path):
    with Image.open(head_eval / "pixel_confusion.png") as image:
        assert image.format == "PNG" and min(image.size) > 300
    run = tmp_path / "run"  # the run with this evaluation as its own eval-test
    shutil.copytree(trained_head_run, run, ignore=shutil.ignore_patterns("eval-*", ".lock"))
    shutil.copytree(head_eval, run / "eval-test")
    page = write_run_page(run).read_text()
    written = json.loads((head_eval / "metrics.json").read_text())
    assert re.search(r'id="pixel-confusion-test"><img src="data:image/png;base64,', page)
    table = page[page.index('id="pixel-test"') :]
    for key in ("pixel_overall_accuracy", "pixel_miou", "pixel_truth_miou"):
        assert f"{written[key]:.4f}" in table[: table.index("</table>")], key
    assert page.count("<tr><td>truth</td>") == CLASSES  # the per-class rows of both


@pytest.mark.horovod
def test_two_ranks_count_what_one_rank_counts(trained_head_run, head_eval, tmp_path) -> None:
    out = tmp_path / "head-2ranks"
    result = horovodrun(2, "evaluate.py", "--run-dir", str(trained_head_run), "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    one = json.loads((head_eval / "metrics.json").read_text())
    two = json.loads((out / "metrics.json").read_text())
    assert two["world_size"] == 2
    for key in ("pixel_count", "pixel_truth_count"):
        assert two[key] == one[key]
    _, confusions_1 = read_confusions(head_eval)
    _, confusions_2 = read_confusions(out)
    for against, counts in confusions_1.items():
        np.testing.assert_array_equal(counts.sum(axis=1), confusions_2[against].sum(axis=1))
        assert np.abs(counts - confusions_2[against]).sum() <= 2e-3 * counts.sum()
