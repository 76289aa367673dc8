"""bigearthnet-export on a trained run: the SavedModel and the ONNX model give evaluate.py's
probabilities on raw patches, the card carries the run's metrics, maps made from the export
equal maps made from the run, and bad input or an interrupted export leaves nothing that
looks complete."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest
import rasterio
from helpers import assert_scores_close

import evaluate
from bigearthnet.cli.export import main as export_main
from bigearthnet.cli.map import main as map_main
from bigearthnet.export import bundle
from bigearthnet.export.onnx_model import run_onnx
from bigearthnet.formats import exported
from bigearthnet.formats.exported import read_export_info
from bigearthnet.formats.manifest import read_manifest
from bigearthnet.inference.exported_model import ExportedModel
from bigearthnet.synthetic.scene import SceneTruth, write_scene

REPO = Path(__file__).resolve().parents[2]


def split_images(data: Path, split: str) -> tuple[list[str], np.ndarray]:
    """A split's names and raw uint16 patches, in manifest order (evaluate.py's order)."""
    names, images = [], []
    for entry in read_manifest(data).split_shards(split):
        with h5py.File(entry.path(data), "r") as f:
            names += [n.decode() for n in f["names"][:]]
            images.append(f["images"][:])
    return names, np.concatenate(images)


def evaluated_scores(eval_dir: Path) -> tuple[list[str], np.ndarray]:
    with h5py.File(eval_dir / "predictions.h5", "r") as f:
        return [n.decode() for n in f["names"][:]], f["scores"][:]


def onnx_probabilities(path: Path, images: np.ndarray) -> np.ndarray:
    return run_onnx(path, images, [exported.OUTPUT_NAME])[exported.OUTPUT_NAME]


def export_of(run: Path, out: Path, *extra: str) -> Path:
    assert export_main([str(run), "--out", str(out), *extra]) == 0
    return out


# Its module fixtures train or evaluate: all its tests in one xdist worker, built once.
pytestmark = pytest.mark.xdist_group("export")


@pytest.fixture(scope="module")
def evaluated_run(trained_run: Path, tmp_path_factory) -> Path:
    """A copy of the tiny run, evaluated on test with thresholds tuned on val."""
    run = tmp_path_factory.mktemp("export") / "run"
    shutil.copytree(trained_run, run)
    assert evaluate.main(["--run-dir", str(run), "--tune-thresholds"]) == 0
    return run


@pytest.fixture(scope="module")
def export_dir(evaluated_run: Path) -> Path:
    return export_of(evaluated_run, evaluated_run.parent / "export")


def test_savedmodel_and_onnx_give_evaluate_probabilities(export_dir, evaluated_run, shards_v1):
    names, images = split_images(shards_v1, "test")
    eval_names, expected = evaluated_scores(evaluated_run / "eval-test")
    assert names == eval_names
    from_savedmodel = ExportedModel(export_dir).predict(images)
    from_onnx = onnx_probabilities(export_dir / exported.ONNX_FILE, images)
    assert from_savedmodel.shape == from_onnx.shape == expected.shape == (len(names), 19)
    assert_scores_close(from_savedmodel, expected)
    assert_scores_close(from_onnx, expected)


def test_a_model_with_the_dense_head_exports_both_outputs(trained_head_run, shards_v2, tmp_path):
    """SavedModel and ONNX carry the patch's probabilities and each pixel's, each named; the
    export record, the card and the STAC item say there are two tasks."""
    from bigearthnet.inference.trained_run import load_model

    out = export_of(trained_head_run, tmp_path / "export")
    _, images = split_images(shards_v2, "val")
    loaded, served = load_model(trained_head_run), ExportedModel(out)
    assert served.has_dense_head and served.pixel_class_names == loaded.pixel_class_names
    pixels = served.predict_pixels(images)
    assert pixels.shape == (len(images), 120, 120, 19)
    assert_scores_close(pixels, loaded.predict_pixels(images))
    assert_scores_close(served.predict(images), loaded.predict(images))
    names = [exported.OUTPUT_NAME, exported.PIXEL_OUTPUT_NAME]
    from_onnx = run_onnx(out / exported.ONNX_FILE, images, names)
    assert_scores_close(from_onnx[exported.PIXEL_OUTPUT_NAME], pixels)
    assert_scores_close(from_onnx[exported.OUTPUT_NAME], served.predict(images))
    card = (out / exported.CARD_FILE).read_text()
    assert "**semantic\nsegmentation**" in card and "`pixel_probabilities` float32 (N, 120" in card
    # Not evaluated: the card and the item say the pixel figures are missing, and why.
    absent = "Not measured: the run has no evaluation of this checkpoint"
    assert absent in card.replace("\n", " ")
    properties = json.loads((out / exported.STAC_FILE).read_text())["properties"]
    assert sorted(properties["mlm:tasks"]) == ["classification", "semantic-segmentation"]
    outputs = properties["mlm:output"]
    assert [o["tasks"] for o in outputs] == [["classification"], ["semantic-segmentation"]]
    assert outputs[1]["result"]["shape"] == [-1, 120, 120, 19]
    assert "Not measured per pixel: the run has no evaluation" in outputs[1]["description"]


def test_savedmodel_loads_in_plain_tensorflow(export_dir, shards_v1):
    """The docs' five lines: no project code between the file and the probabilities."""
    import tensorflow as tf

    _, images = split_images(shards_v1, "val")
    serve = tf.saved_model.load(str(export_dir / "savedmodel")).signatures["serving_default"]
    probabilities = serve(images=tf.constant(images[:5]))["probabilities"].numpy()
    assert probabilities.dtype == np.float32 and probabilities.shape == (5, 19)
    assert ((probabilities >= 0) & (probabilities <= 1)).all()


def test_export_record_names_its_source(export_dir, evaluated_run, shards_v1):
    info = read_export_info(export_dir)
    pointer = json.loads((evaluated_run / "checkpoints" / "best.json").read_text())
    assert info.source.epoch == pointer["epoch"]
    assert info.source.checkpoint == str(evaluated_run / "checkpoints" / pointer["folder"] / "ckpt")
    assert info.source.data_id == read_manifest(shards_v1).data_id
    assert info.formats == ("savedmodel", "onnx") and info.onnx_opset == 17
    assert info.onnx_max_abs_diff is not None and info.onnx_max_abs_diff < 1e-4
    assert info.bands == tuple(read_manifest(shards_v1).bands)
    assert info.tuned_thresholds is not None and len(info.tuned_thresholds) == 19
    assert info.pixel_class_names is None and not ExportedModel(export_dir).has_dense_head
    card = (export_dir / exported.CARD_FILE).read_text()
    assert "pixel_probabilities" not in card and "semantic" not in card  # one task, as before


def card_cell(card: str, row: str, column: int, section: str = "") -> str:
    """A cell of the first table row starting ``| row |`` after the heading ``section``."""
    lines = card[card.index(section) :].splitlines()
    line = next(line for line in lines if line.startswith(f"| {row} |"))
    return [cell.strip() for cell in line.strip("|").split("|")][column]


def test_card_numbers_are_the_runs_metrics(export_dir, evaluated_run):
    card = (export_dir / exported.CARD_FILE).read_text()
    metrics = json.loads((evaluated_run / "eval-test" / "metrics.json").read_text())
    assert card_cell(card, "F1", 1) == f"{metrics['micro_f1']:.4f}"
    assert card_cell(card, "F1", 2) == f"{metrics['macro_f1']:.4f}"
    assert card_cell(card, "AP (mAP)", 1) == f"{metrics['micro_map']:.4f}"
    assert card_cell(card, "AP (mAP)", 2) == f"{metrics['macro_map']:.4f}"
    tuned = json.loads((evaluated_run / "eval-test" / "thresholds.json").read_text())
    for row in metrics["per_class"]:
        index = str(row["index"])
        assert card_cell(card, index, 1, "## Output") == row["class"]
        assert card_cell(card, index, 3, "## Output") == f"{tuned['thresholds'][row['index']]:.2f}"
        assert card_cell(card, index, 4, "## Output") == f"{row['f1']:.4f}"
        ap = "n/a" if row["ap"] is None else f"{row['ap']:.4f}"
        assert card_cell(card, index, 5, "## Output") == ap
        assert card_cell(card, index, 6, "## Output") == str(row["support"])
    assert re.search(r"\| 0 \| B01 \| 60 \|", card) and "## Intended use and known limits" in card


def test_a_card_of_synthetic_data_offers_no_use_on_imagery(export_dir, evaluated_run, shards_v1):
    """The tiny run trained on the project's synthetic archive: the card says so where a
    reader decides on use, and carries no path of this machine (it travels with the model)."""
    card = (export_dir / exported.CARD_FILE).read_text()
    intended = card[card.index("## Intended use") :]
    assert "**Not for real imagery.**" in intended and "research and operational" not in card
    assert "bigearthnet-synth: 240 simple v1 patches, seed 7" in intended
    assert "trained on **synthetic data**" in card[: card.index("## Files")]
    for folder in (evaluated_run.parent, shards_v1.parent):
        assert str(folder) not in card
    assert f"Source run: `{evaluated_run.name}`, checkpoint `checkpoints/best-e" in card
    assert f"Training data: `{shards_v1.name}`" in card
    assert "`eval-test/metrics.json` in the run" in card
    assert "0 warm-up epochs" in card and "x 1 rank =" in card and "rank(s)" not in card
    item = json.loads((export_dir / exported.STAC_FILE).read_text())
    assert "Trained on synthetic data" in item["properties"]["description"]


def test_the_card_follows_the_origin_of_the_data(export_dir, evaluated_run, shards_v1):
    """Real data: offered for imagery; origin not known (an old manifest, or none): the
    reader is asked to check before any use."""
    import dataclasses

    from bigearthnet.core.config import load_run_config
    from bigearthnet.export.card import RunFacts, render_card

    info = read_export_info(export_dir)
    manifest = read_manifest(shards_v1)

    def card(data) -> str:
        facts = RunFacts(load_run_config(evaluated_run), 1, 8, 6, data, None)
        text = render_card(info, facts)
        return text[text.index("## Intended use") :]

    real = card(dataclasses.replace(manifest, origin="real", origin_detail=""))
    assert "- Intended: land-cover maps and patch labels of Sentinel-2 L2A imagery" in real
    old = card(dataclasses.replace(manifest, origin="unknown", origin_detail=""))
    assert "not recorded (its manifest was written\n  before origins were recorded)" in old
    assert "its manifest is no longer there" in card(None)


def test_map_from_export_equals_map_from_run(export_dir, evaluated_run, shards_v1, tmp_path):
    common = ["--shards", str(shards_v1), "--split", "test", "--no-progress"]
    assert map_main(["--run-dir", str(evaluated_run), "--out", str(tmp_path / "a"), *common]) == 0
    assert map_main(["--model", str(export_dir), "--out", str(tmp_path / "b"), *common]) == 0
    tifs = sorted(p.name for p in (tmp_path / "a").glob("*.tif"))
    assert tifs and tifs == sorted(p.name for p in (tmp_path / "b").glob("*.tif"))
    for name in tifs:
        with rasterio.open(tmp_path / "a" / name) as a, rasterio.open(tmp_path / "b" / name) as b:
            np.testing.assert_array_equal(a.read(), b.read())
    csv = [(tmp_path / d / "patches.csv").read_text() for d in ("a", "b")]
    assert csv[0] == csv[1]


def test_scene_map_from_export_equals_scene_map_from_run(export_dir, evaluated_run, tmp_path):
    scene = tmp_path / "bands"
    write_scene(
        scene,
        SceneTruth(size=240, block=120, border=0, classes=((0, 8), (9, 17))),
        difficulty="simple",
    )
    maps = []
    for flag, source, name in (("--run-dir", evaluated_run, "a"), ("--model", export_dir, "b")):
        out = tmp_path / f"{name}.tif"
        argv = ["scene", str(scene), flag, str(source), "--out", str(out), "--no-progress"]
        assert map_main([*argv, "--stride", "60"]) == 0
        with rasterio.open(out) as src:
            maps.append(src.read())
            tags = src.tags()
    np.testing.assert_array_equal(maps[0], maps[1])
    assert (tmp_path / tags["export"]).resolve() == export_dir.resolve()  # relative: issue 47
    assert tags["epoch"] == str(read_export_info(export_dir).source.epoch)


@pytest.mark.parametrize(
    "case, message",
    [
        ("no checkpoint", "no 'best' checkpoint"),
        ("unknown format", "--format: unknown format tflite"),
        (
            "out not empty",
            "--out holds other files (notes.txt) and is no folder of "
            "bigearthnet-export (--overwrite replaces only a folder it made)",
        ),
        ("eval of another checkpoint", "not the exported"),
    ],
)
def test_bad_input_one_line_exit_2(case, message, evaluated_run, tmp_path, reported_errors):
    run, out, extra = evaluated_run, tmp_path / "out", []
    if case == "no checkpoint":
        run = tmp_path / "run"
        shutil.copytree(evaluated_run, run, ignore=shutil.ignore_patterns("checkpoints"))
    elif case == "unknown format":
        extra = ["--format", "savedmodel,tflite"]
    elif case == "out not empty":
        out.mkdir()
        (out / "notes.txt").write_text("mine\n")
    elif case == "eval of another checkpoint":
        extra = ["--checkpoint", "latest", "--eval-dir", str(evaluated_run / "eval-test")]
        pointer = json.loads((evaluated_run / "checkpoints" / "latest.json").read_text())
        best = json.loads((evaluated_run / "checkpoints" / "best.json").read_text())
        if pointer["folder"] == best["folder"]:
            pytest.skip("the tiny run's best epoch is its last")
    assert export_main([str(run), "--out", str(out), *extra]) == 2
    (line,) = reported_errors()
    assert message in line
    assert not out.exists() or (out / "notes.txt").read_text() == "mine\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_export_of_another_band_configuration_is_refused(
    export_dir, shards_v1, tmp_path, reported_errors
):
    """An export whose record says it takes Sentinel-1 + Sentinel-2 ('all') refuses 12-band
    shards (both configurations named) and any scene (an S1 scene map is out of scope):
    before any prediction, one line, exit 2."""
    from bigearthnet.core import constants

    other = tmp_path / "all"
    shutil.copytree(export_dir, other)
    record = json.loads((other / exported.INFO_FILE).read_text())
    record["bands"] = list(constants.BAND_CONFIGS["all"])
    (other / exported.INFO_FILE).write_text(json.dumps(record))
    argv = ["patches", "--shards", str(shards_v1), "--model", str(other)]
    assert map_main([*argv, "--out", str(tmp_path / "maps")]) == 2
    line = reported_errors()[-1]
    assert "gives bands s2 (B01,B02," in line and "takes all (VV,VH,B02," in line
    assert not (tmp_path / "maps").exists()
    scene = tmp_path / "bands"
    write_scene(
        scene, SceneTruth(size=240, block=240, border=0, classes=((3,),)), difficulty="simple"
    )
    argv = ["scene", str(scene), "--model", str(other), "--out", str(tmp_path / "m.tif")]
    assert map_main(argv) == 2
    line = reported_errors()[-1]
    assert "a Sentinel-1 scene map is out of scope" in line and "takes all (VV,VH," in line
    assert not (tmp_path / "m.tif").exists()


@pytest.mark.bad_input
def test_a_classifier_only_export_is_refused_for_a_10m_region(
    export_dir, fine_region, tmp_path, reported_errors, bad_input_row
):
    """Issue 50: a region at --cell 10 from the export of a model without the dense head
    (its finest map: 60 m cells): one line saying what to do, before any scene is mapped."""
    scenes = sorted(str(p) for p in (fine_region / "scenes").iterdir())
    out = tmp_path / "series"
    argv = ["region", *scenes, "--model", str(export_dir), "--out", str(out), "--cell", "10",
            "--no-progress"]  # fmt: skip
    code = map_main(argv)
    assert code == 2 and not list(out.glob("scenes/*.tif"))
    line = reported_errors()[-1]
    assert "--cell 10" in line and "dense head" in line and "--cell 60 or more" in line, line
    bad_input_row("`--cell 10` with a classifier-only export", "bigearthnet-map region --model",
                  code, "refused before mapping: the dense head, or --cell 60")  # fmt: skip


def _killed_export(run: Path, out: Path) -> Path:
    """Export ``run`` to ``out`` in a process SIGKILLed at the worst moment, just before
    export.json is written; returns the partial folder it left."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        from bigearthnet.export import bundle
        def die(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)
        bundle.write_export_info = die
        from bigearthnet.cli.export import main
        sys.exit(main([{str(run)!r}, "--out", {str(out)!r}, "--format", "savedmodel"]))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True)
    assert done.returncode == -signal.SIGKILL
    assert not out.exists()
    (partial,) = [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.partial-")]
    return partial


def test_killed_export_leaves_nothing_that_looks_complete(evaluated_run, shards_v1, tmp_path):
    """SIGKILL at the worst moment, just before export.json is written: OUT does not exist,
    the partial folder is hidden and is not an export, and --model refuses it."""
    partial = _killed_export(evaluated_run, tmp_path / "export")
    assert (partial / "savedmodel" / "saved_model.pb").is_file()  # it got that far
    assert not (partial / exported.INFO_FILE).exists()
    argv = ["--model", str(partial), "--shards", str(shards_v1), "--out", str(tmp_path / "m")]
    assert map_main(argv) == 2


@pytest.mark.fault
def test_the_next_export_removes_a_killed_export_s_partial_folder(
    evaluated_run, tmp_path, caplog, fault_row
):
    """D23's root for the export: the partial folder of a killed export stayed for good;
    the next export into the same --out removes it and says so in one line."""
    out = tmp_path / "export"
    partial = _killed_export(evaluated_run, out)
    export_of(evaluated_run, out, "--format", "savedmodel")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]
    (line,) = [r.getMessage() for r in caplog.records if "killed runs" in r.getMessage()]
    assert f"removed what killed runs of bigearthnet-export left beside it: {partial.name}" in line
    lost = "none: the rerun removed the partial folder, saying so"
    fault_row("bigearthnet-export SIGKILLed before export.json, then rerun", runs=2,
              detect_s=None, data_lost=lost)  # fmt: skip


@pytest.mark.bad_input
@pytest.mark.parametrize("out", ["", ".", "user files", "a shards folder"])
def test_an_out_the_export_did_not_make_is_refused_even_with_overwrite(
    evaluated_run, shards_v1, tmp_path, monkeypatch, reported_errors, bad_input_row, out
):
    """D20: --out "" from outside the run was a ValueError traceback; --overwrite (then
    --force) replaced any non-empty folder (issue #46: it may replace only an export folder)."""
    folder = tmp_path / "mine"
    if out == "a shards folder":
        shutil.copytree(shards_v1, folder)
    else:
        folder.mkdir()
        (folder / "notes.txt").write_text("mine\n")
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    monkeypatch.chdir(folder if out in ("", ".") else tmp_path)  # D20: outside the run
    target = out if out in ("", ".") else str(folder)
    code = export_main([str(evaluated_run), "--out", target, "--overwrite"])
    assert code == 2 and {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    line = reported_errors()[-1]
    needle = {"": "argument --out: an empty path names the working directory",
              ".": "argument --out: '.' is the working directory"}.get(
        out, "--out holds other files (")  # fmt: skip
    assert needle in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    given = f"--out {out!r}" if out in ("", ".") else f"--out holding {out}"
    bad_input_row(f"{given}, --overwrite", "bigearthnet-export RUN --out DIR --overwrite", code,
                  "refused before the model is loaded; nothing touched")  # fmt: skip


def test_overwrite_replaces_an_export_and_savedmodel_only(evaluated_run, export_dir, tmp_path):
    out = export_of(evaluated_run, tmp_path / "again")
    export_of(evaluated_run, out, "--overwrite", "--format", "savedmodel", "--name", "mine")
    info = read_export_info(out)
    assert info.formats == ("savedmodel",) and info.onnx_opset is None and info.name == "mine"
    assert not (out / exported.ONNX_FILE).exists()
    item = json.loads((out / exported.STAC_FILE).read_text())
    assert set(item["assets"]) == {"savedmodel", "model_card", "export_record"}
    assert "model.onnx" not in (out / exported.CARD_FILE).read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".again")]


@pytest.mark.slow
def test_resnet50_export_matches_evaluate(resnet50_run, shards_v1, tmp_path):
    """The same proof on ResNet-50 (53 conv layers, batch norm): SavedModel and ONNX equal
    evaluate.py's probabilities on the test patches."""
    run = tmp_path / "run"
    # The precise-BN test's run (conftest.py; that test is in this module's xdist group).
    shutil.copytree(resnet50_run(4096), run)  # evaluate writes into it
    assert evaluate.main(["--run-dir", str(run), "--batch-size", "16"]) == 0
    out = export_of(run, tmp_path / "export")
    names, images = split_images(shards_v1, "test")
    eval_names, expected = evaluated_scores(run / "eval-test")
    assert names == eval_names
    assert_scores_close(ExportedModel(out).predict(images), expected)
    assert_scores_close(onnx_probabilities(out / exported.ONNX_FILE, images), expected)
    assert read_export_info(out).model == "resnet50"


def test_a_stack_that_cannot_convert_still_gets_the_rest(
    evaluated_run, tmp_path, monkeypatch, capsys
):
    """tf2onnx failing (as on a stack it does not support): one line on stderr, exit 0, and
    the SavedModel, card and STAC item without any mention of an ONNX model."""
    import tf2onnx

    def unsupported(*args, **kwargs):
        raise NotImplementedError("Unsupported ops: Foo\nmore detail")

    monkeypatch.setattr(tf2onnx.convert, "from_function", unsupported)
    out = export_of(evaluated_run, tmp_path / "export")
    notes = [line for line in capsys.readouterr().err.splitlines() if "ONNX" in line]
    assert notes == [
        "bigearthnet-export: no ONNX model: tf2onnx could not convert the model: Unsupported "
        f"ops: Foo (TensorFlow {read_export_info(out).tensorflow})"
    ]
    info = read_export_info(out)
    assert info.formats == ("savedmodel",) and info.onnx_opset is None
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [exported.SAVEDMODEL_DIR, exported.CARD_FILE, exported.STAC_FILE, exported.INFO_FILE,
         bundle.OWNER.mark]
    )  # fmt: skip
    assert "onnx" not in json.loads((out / exported.STAC_FILE).read_text())["assets"]
