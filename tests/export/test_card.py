"""The model card and the STAC MLM item of a model with the dense head (issue 49): the pixel
figures of the exported checkpoint's evaluation, against which reference, on which split,
over how many pixels, read through the evaluation's own readers and checked to be its own;
an evaluation without them is said to be so, and pixel files of another are refused."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

import evaluate
from bigearthnet.cli.export import main as export_main
from bigearthnet.evaluation.summary import read_metrics, write_metrics
from bigearthnet.formats import exported
from bigearthnet.formats.pixel_eval import PIXEL_FILES, PIXEL_PER_CLASS, read_pixel_classes

# The shared dense-head run and its evaluation: one xdist worker builds them once.
pytestmark = pytest.mark.xdist_group("trained-head")
REFERENCE_TEXT = "the synthetic archive's CORINE-like reference maps (Reference_Maps/, as reBEN's)"
TRUTH_TEXT = "the synthetic archive's true class per 10 m pixel (truth_maps.h5)"


def _export(run: Path, out: Path, eval_dir: Path) -> int:
    return export_main([str(run), "--out", str(out), "--format", "savedmodel",
                        "--eval-dir", str(eval_dir)])  # fmt: skip


def _cells(card: str, row: str, after: str) -> list[str]:
    """The cells of the first table row starting ``| row |`` after the text ``after``."""
    lines = card[card.index(after) :].splitlines()
    line = next(line for line in lines if line.startswith(f"| {row} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def _shown(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


@pytest.mark.slow
def test_the_card_and_the_item_carry_the_pixel_metrics(trained_head_run, head_eval, tmp_path):
    out = tmp_path / "export"
    assert _export(trained_head_run, out, head_eval) == 0
    metrics = json.loads((head_eval / "metrics.json").read_text())
    rows = read_pixel_classes(head_eval)
    card = (out / exported.CARD_FILE).read_text()
    assert "### Per pixel (the dense head)" in card and "on the **test** split" in card
    for text, prefix in ((REFERENCE_TEXT, "pixel"), (TRUTH_TEXT, "pixel_truth")):
        assert _cells(card, text, "### Per pixel") == [
            text, f"{metrics[f'{prefix}_count']:,}", f"{metrics[f'{prefix}_overall_accuracy']:.4f}",
            f"{metrics[f'{prefix}_miou']:.4f} ({metrics[f'{prefix}_miou_classes']} classes)",
        ]  # fmt: skip
    for against, text in (("reference", REFERENCE_TEXT), ("truth", TRUTH_TEXT)):
        for row in (r for r in rows if r.against == against):
            ratios = row.ratios()
            assert _cells(card, str(row.index), f"Per class against {text}") == [
                str(row.index), row.name, str(row.support), str(row.predicted),
                *(_shown(ratios[k]) for k in ("precision", "recall", "f1", "iou")),
            ]  # fmt: skip
    outputs = json.loads((out / exported.STAC_FILE).read_text())["properties"]["mlm:output"]
    assert "bigearthnet:pixel_metrics" not in outputs[0]  # the classification's
    figures = outputs[1]["bigearthnet:pixel_metrics"]
    assert figures["split"] == "test"
    reference, truth = figures["references"]
    assert (reference["against"], reference["description"]) == ("reference", REFERENCE_TEXT)
    assert (truth["against"], truth["description"]) == ("truth", TRUTH_TEXT)
    assert reference["pixels"] == metrics["pixel_count"]
    assert truth["miou"] == metrics["pixel_truth_miou"]
    assert reference["classes"] == [
        {"value": r.index, "name": r.name, "pixels": r.support, "predicted": r.predicted,
         **r.ratios()} for r in rows if r.against == "reference"
    ]  # fmt: skip


def _without_pixel_figures(head_eval: Path, folder: Path) -> Path:
    """``head_eval`` as evaluate.py writes an evaluation with no reference maps to score
    against: no pixel figures in metrics.json, no pixel files."""
    shutil.copytree(head_eval, folder)
    write_metrics(folder, dataclasses.replace(read_metrics(folder), pixel=None))
    for name in PIXEL_FILES:
        (folder / name).unlink()
    return folder


@pytest.mark.slow
def test_an_evaluation_without_pixel_figures_is_said_to_be_so(
    trained_head_run, head_eval, tmp_path
):
    """Nothing invented: the card and the item say the dense head was not measured, why,
    and what to do; the multi-label figures are there as before."""
    out = tmp_path / "export"
    assert _export(trained_head_run, out, _without_pixel_figures(head_eval, tmp_path / "e")) == 0
    card = (out / exported.CARD_FILE).read_text()
    note = ("the test evaluation of this checkpoint has no pixel figures: the shards it "
            "scored carry no reference maps")  # fmt: skip
    assert f"Not measured: {note}" in card.replace("\n", " ")
    assert "| F1 |" in card and "| reference | pixels |" not in card
    outputs = json.loads((out / exported.STAC_FILE).read_text())["properties"]["mlm:output"]
    assert "bigearthnet:pixel_metrics" not in outputs[1]
    assert f"Not measured per pixel: {note}" in outputs[1]["description"]


@pytest.fixture(scope="module")
def val_eval(trained_head_run: Path, tmp_path_factory) -> Path:
    """The same checkpoint evaluated on val: pixel files of another evaluation."""
    out = tmp_path_factory.mktemp("eval") / "head-val"
    argv = ["--run-dir", str(trained_head_run), "--split", "val", "--out", str(out)]
    assert evaluate.main(argv) == 0
    return out


def _damaged(head_eval: Path, val_eval: Path, folder: Path, damage: str) -> Path:
    """A copy of ``head_eval`` whose pixel_per_class.csv is cut short or val's."""
    shutil.copytree(head_eval, folder)
    path = folder / PIXEL_PER_CLASS
    if "cut short" in damage:  # at a row's end: it still parses
        path.write_text("".join(path.read_text().splitlines(keepends=True)[:-3]))
    else:  # the same checkpoint's on val: as many pixels as test's here, other figures
        shutil.copy(val_eval / PIXEL_PER_CLASS, path)
    return path


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "damage",
    [
        "pixel_per_class.csv cut short at a row's end",
        "pixel_per_class.csv of another evaluation (val)",
    ],
)
def test_pixel_figures_not_the_evaluations_own_are_refused(
    damage, trained_head_run, head_eval, val_eval, tmp_path, reported_errors, bad_input_row
):
    """The card would show figures of another split or checkpoint, or a class short: the
    export stops before writing anything, in one line naming the file."""
    path = _damaged(head_eval, val_eval, tmp_path / "eval", damage)
    code = _export(trained_head_run, tmp_path / "export", tmp_path / "eval")
    (line,) = reported_errors()
    assert code == 2 and f"{path}: not the file its evaluation wrote" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval"]
    bad_input_row(damage, "bigearthnet-export --eval-dir", code,
                  "refused before writing, naming the file; nothing exported")  # fmt: skip


@pytest.mark.bad_input
def test_pixel_figures_that_cannot_be_checked_are_not_shown(
    trained_head_run, head_eval, val_eval, tmp_path, bad_input_row
):
    """An evaluation written before metrics.json recorded its pixel files, holding another
    evaluation's: nothing tells the file from its own, so no figure of it is shown; the
    card and the item say why and what to do."""
    _damaged(head_eval, val_eval, tmp_path / "eval", "another evaluation's")
    body = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    del body["pixel_files"]
    (tmp_path / "eval" / "metrics.json").write_text(json.dumps(body))
    code = _export(trained_head_run, tmp_path / "export", tmp_path / "eval")
    card = (tmp_path / "export" / exported.CARD_FILE).read_text().replace("\n", " ")
    assert code == 0 and "| reference | pixels |" not in card
    assert "Not measured: the test evaluation of this checkpoint was made before its " in card
    assert "run evaluate.py again" in card
    bad_input_row("pixel_per_class.csv of another evaluation, metrics.json from before "
                  "digests", "bigearthnet-export --eval-dir", code,
                  "exported; the card and the item say the pixel figures cannot be checked, "
                  "none shown")  # fmt: skip
