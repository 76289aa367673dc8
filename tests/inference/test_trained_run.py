"""A trained run is self-contained: its checkpoints record what inference needs (channels,
normalisation, resampling, classes), so moving or deleting its shards after training
changes no prediction; an older checkpoint without that record is refused when its data is
gone, never normalised with a silent substitute."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import preprocess, train_argv

import evaluate
import train
from bigearthnet.cli.export import main as export_main
from bigearthnet.cli.map import main as map_main
from bigearthnet.core import constants
from bigearthnet.formats import checkpoints
from bigearthnet.formats.exported import read_export_info
from bigearthnet.formats.manifest import read_manifest
from bigearthnet.formats.model_inputs import ModelInputs
from bigearthnet.inference.exported_model import ExportedModel
from bigearthnet.inference.trained_run import load_model
from bigearthnet.synthetic.scene import SceneTruth, write_scene

TRUTH = SceneTruth(size=480, block=240, border=36, classes=((0, 8), (11, 18)))


# Its module fixtures train or evaluate: all its tests in one xdist worker, built once.
pytestmark = pytest.mark.xdist_group("trained-run")


@pytest.fixture(scope="module")
def moved_world(shards_v1: Path, synth_v2: Path, tmp_path_factory) -> dict[str, Path]:
    """A run trained on its own copy of the shards, other shards (v2, other statistics) to
    score, and a scene to map."""
    root = tmp_path_factory.mktemp("selfcontained")
    shards = root / "shards"
    shutil.copytree(shards_v1, shards)
    run = root / "run"
    # Its outputs are compared, not scored: two steps make a run as one epoch does.
    assert train.main(train_argv(shards, run, 1, "--max-steps-per-epoch", "2")) == 0
    other = root / "other"
    assert preprocess(synth_v2, other, "--shard-size", "16") == 0
    scene = root / "bands"
    write_scene(scene, TRUTH, seed=2, layout="tif", difficulty="simple")
    return {"root": root, "shards": shards, "run": run, "other": other, "scene": scene}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _outputs(world: dict[str, Path], tag: str, *extra: str) -> dict[str, object]:
    """What the run predicts, by every route: a scene map, a patch map, an evaluation on
    other shards and an export (its normalisation and its SavedModel's scores)."""
    run, out = world["run"], world["root"] / tag
    out.mkdir()
    scene_map = out / "scene.tif"
    argv = ["scene", str(world["scene"]), "--run-dir", str(run), "--out", str(scene_map)]
    assert map_main([*argv, "--no-progress", *extra]) == 0
    patch_map = out / "patches"
    argv = ["--shards", str(world["other"]), "--run-dir", str(run), "--out", str(patch_map)]
    assert map_main([*argv, "--no-progress", *extra]) == 0
    scored = out / "eval"
    argv = ["--run-dir", str(run), "--data", str(world["other"]), "--out", str(scored)]
    assert evaluate.main([*argv, *extra]) == 0
    export = out / "export"
    assert export_main([str(run), "--out", str(export), "--format", "savedmodel", *extra]) == 0
    info = read_export_info(export)
    probe = np.random.default_rng(3).integers(0, 4000, (8, 120, 120, 12), dtype=np.uint16)
    exported_scores = ExportedModel(export).predict(probe)
    metrics = json.loads((scored / "metrics.json").read_text())
    return {
        "scene": _digest(scene_map),
        "scene probabilities": _digest(Path(f"{scene_map}.probabilities.tif")),
        "patches": sorted(_digest(p) for p in patch_map.glob("*.tif")),
        "metrics": {k: metrics[k] for k in ("micro_f1", "macro_f1", "micro_map", "macro_map")},
        "scores": _digest(scored / "predictions.h5"),
        "export": (info.bands, info.band_mean, info.band_std, info.resampling),
        "savedmodel variables": _digest(export / "savedmodel" / "variables" / "variables.index"),
        "savedmodel scores": hashlib.sha256(exported_scores.tobytes()).hexdigest(),
    }


def test_moving_the_shards_changes_no_prediction(moved_world) -> None:
    before = _outputs(moved_world, "before")
    record = checkpoints.read_pointer(moved_world["run"], "best")
    assert record is not None and record.inputs is not None
    manifest = read_manifest(moved_world["shards"])
    assert record.inputs.mean == pytest.approx(manifest.band_mean)
    assert record.inputs.classes == constants.CLASSES_19 and record.inputs.resampling == "bilinear"
    shutil.move(moved_world["shards"], moved_world["root"] / "moved-elsewhere")
    after = _outputs(moved_world, "after")
    assert after == before


def _as_old_checkpoint(run: Path) -> None:
    """Strip the recorded inputs from the pointers and folder records, as checkpoints of
    older versions were written."""
    ckpt = checkpoints.checkpoint_dir(run)
    for path in [*ckpt.glob("*.json"), *ckpt.glob("*/record.json")]:
        body = json.loads(path.read_text())
        body.pop("inputs", None)
        path.write_text(json.dumps(body))


def test_an_old_checkpoint_without_its_data_is_refused(shards_v1, tmp_path, reported_errors):
    shards = tmp_path / "shards"
    shutil.copytree(shards_v1, shards)
    run = tmp_path / "run"
    assert train.main(train_argv(shards, run, 1, "--max-steps-per-epoch", "2")) == 0
    images = np.random.default_rng(0).integers(0, 3000, (4, 120, 120, 12), dtype=np.uint16)
    want = load_model(run).predict(images)
    _as_old_checkpoint(run)
    assert checkpoints.read_pointer(run, "best").inputs is None  # type: ignore[union-attr]
    # Its training data unchanged and still there: read with that data's statistics.
    np.testing.assert_array_equal(load_model(run).predict(images), want)
    shutil.move(shards, tmp_path / "elsewhere")
    out = tmp_path / "map"
    argv = ["--shards", str(tmp_path / "elsewhere"), "--run-dir", str(run), "--out", str(out)]
    assert map_main([*argv, "--no-progress"]) == 2
    line = reported_errors()[-1]
    assert str(shards) in line and "--stats-from SHARDS" in line and "\n" not in line
    assert not out.exists()
    assert evaluate.main(["--run-dir", str(run), "--data", str(tmp_path / "elsewhere")]) == 2
    # The way out it names: the statistics of shards made the same way.
    loaded = load_model(run, stats_from=tmp_path / "elsewhere")
    np.testing.assert_array_equal(loaded.predict(images), want)
    assert map_main([*argv, "--no-progress", "--stats-from", str(tmp_path / "elsewhere")]) == 0


def test_model_inputs_refuse_what_does_not_fit() -> None:
    good = {
        "bands": list(constants.BANDS),
        "mean": [1.0] * 12,
        "std": [2.0] * 12,
        "channel_scale": [1.0] * 12,
        "channel_offset": [0.0] * 12,
        "resampling": "bilinear",
        "classes": list(constants.CLASSES_19),
    }
    assert ModelInputs.from_json(good).num_classes == 19
    for key, value in [
        ("bands", ["B02", "B03"]),
        ("mean", [1.0] * 11),
        ("std", [0.0] * 12),
        ("mean", [float("nan")] * 12),
        ("resampling", "lanczos"),
        ("classes", ["a", "b"]),
    ]:
        with pytest.raises(ValueError, match=key):
            ModelInputs.from_json({**good, key: value})


@pytest.mark.bad_input
def test_class_names_of_another_set_than_the_head_are_refused(
    trained_run, shards_v1, tmp_path, reported_errors, bad_input_row
):
    """S06: 43 class names recorded for a 19-class head were a traceback mid-map."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    pointer = checkpoints.checkpoint_dir(run) / "best.json"
    body = json.loads(pointer.read_text())
    body["inputs"]["classes"] = list(constants.CLASSES_43)
    pointer.write_text(json.dumps(body))
    out = tmp_path / "map"
    argv = ["--shards", str(shards_v1), "--run-dir", str(run), "--out", str(out), "--no-progress"]
    code = map_main(argv)
    assert code == 2
    line = reported_errors()[-1]
    assert "records 43 class names that are not the 19 classes of its head" in line, line
    assert not out.exists()
    bad_input_row("a checkpoint recording 43 class names for a 19-class head",
                  "bigearthnet-map", code, "one line naming the checkpoint; no map")  # fmt: skip


def test_a_model_loads_in_float32_after_a_bf16_training_in_the_process(trained_run: Path) -> None:
    """A training with --amp bf16 leaves Keras's global policy at mixed_bfloat16; a model
    loaded afterwards in the same process still computes in float32 (its scores moved by
    ~1e-3 before: CI's 2.18 stack, an in-process evaluation after the bf16 test), and the
    process's policy is left as it was."""
    import tensorflow as tf

    images = np.random.default_rng(0).integers(1, 3000, (4, 120, 120, 12)).astype(np.float32)
    expected = load_model(trained_run).predict(images)
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        loaded = load_model(trained_run)
        assert {layer.compute_dtype for layer in loaded.model.layers} == {"float32"}
        np.testing.assert_array_equal(loaded.predict(images), expected)
        assert tf.keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")


def test_a_run_with_the_dense_head_predicts_each_pixel(
    trained_head_run: Path, trained_run: Path, shards_v2: Path
) -> None:
    """The predictor a map command opens says whether it maps pixels and does: per pixel
    the 19 classes' probabilities, beside the patch's scores; a model without the head
    says so and refuses."""
    from bigearthnet.formats.shard_maps import MAP_KEY
    from bigearthnet.formats.shards import read_rows
    from bigearthnet.inference.predictor import ModelChoice
    from bigearthnet.inference.trained_run import NoDenseHead

    (entry,) = read_manifest(shards_v2).split_shards("val")
    images = read_rows(entry.path(shards_v2), "images", 0, 6)
    maps = read_rows(entry.path(shards_v2), MAP_KEY, 0, 6)
    loaded = ModelChoice(run_dir=trained_head_run).open()
    assert loaded.has_dense_head and loaded.pixel_class_names == list(constants.CLASSES_19)
    pixels = loaded.predict_pixels(images)
    assert pixels.shape == (6, 120, 120, 19) and pixels.dtype == np.float32
    np.testing.assert_allclose(pixels.sum(axis=-1), 1.0, rtol=1e-5)
    assert loaded.predict(images).shape == (6, 19)
    labelled = maps != constants.NO_LABEL
    accuracy = np.mean(pixels.argmax(-1)[labelled] == maps[labelled])
    assert accuracy > 0.3, accuracy  # learned where the classes are (chance ~0.05)
    assert loaded.predict_pixels(images[:0]).shape == (0, 120, 120, 19)
    plain = load_model(trained_run)
    assert not plain.has_dense_head
    with pytest.raises(NoDenseHead, match="has no dense head"):
        plain.predict_pixels(images)
