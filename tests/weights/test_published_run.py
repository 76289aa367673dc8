"""bigearthnet-weights run: a published classifier becomes a run folder that evaluate.py,
the maps and the export take unchanged, normalising as the source did; train.py
--init-weights starts from imported weights or another run, --freeze-backbone trains the
head only."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_scores_close, torch_state_dict, train_argv
from safetensors.numpy import save_file

import evaluate
import train
from bigearthnet import models
from bigearthnet.cli.export import main as export_main
from bigearthnet.cli.map import main as map_main
from bigearthnet.cli.weights import main as weights_main
from bigearthnet.core import constants
from bigearthnet.core.config import load_run_config
from bigearthnet.formats import checkpoints, weights_record
from bigearthnet.formats.history import read_history
from bigearthnet.formats.manifest import read_manifest
from bigearthnet.formats.shards import read_rows
from bigearthnet.inference.trained_run import load_model
from bigearthnet.weights.sources import published_stats


def _published(path: Path, *, head: bool, seed: int = 0, prefix: str = "") -> tf.keras.Model:
    """A ResNet-18 written as a timm state dict; returns the Keras model it came from."""
    tf.keras.utils.set_random_seed(seed)
    model = models.get_model("resnet18", (120, 120, 12), 19)
    rng = np.random.default_rng(seed)
    for layer in model.layers:  # BatchNorm statistics that are not the identity
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            gamma, beta, mean, var = layer.get_weights()
            layer.set_weights([gamma, beta, rng.normal(0, 0.1, mean.shape).astype(np.float32),
                               rng.uniform(0.5, 1.5, var.shape).astype(np.float32)])  # fmt: skip
    tensors = torch_state_dict(model, prefix=prefix)
    if not head:
        tensors = {k: v for k, v in tensors.items() if ".fc." not in f".{k}"}
    save_file(tensors, str(path))
    return model


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("published")
    with_head = _published(root / "classifier.safetensors", head=True, prefix="model.")
    _published(root / "backbone.safetensors", head=False, seed=1)
    return {"root": root, "model": with_head}


@pytest.mark.slow  # 48 s of make test: evaluation, maps and export of the published run
def test_a_published_classifier_is_a_run(published, shards_v1, tmp_path):
    run = tmp_path / "run"
    src = published["root"] / "classifier.safetensors"  # type: ignore[operator]
    assert weights_main(["run", str(src), "--out", str(run), "--source", "timm"]) == 0
    loaded = load_model(run)
    assert loaded.bands == constants.BANDS and loaded.class_names == list(constants.CLASSES_19)
    mean, std = published_stats(constants.BANDS)
    assert loaded.inputs.mean == tuple(mean.values()) and "timm" in loaded.inputs.stats
    # The run predicts what the source model predicts on inputs normalised the source's way.
    shard = next(e for e in read_manifest(shards_v1).shards if e.split == "test")
    images = read_rows(shard.path(shards_v1), "images", 0, 8)
    x = (images.astype(np.float32) - np.array(list(mean.values()), np.float32)) / np.array(
        list(std.values()), np.float32
    )
    source_scores = tf.sigmoid(published["model"](x, training=False)).numpy()  # type: ignore[operator]
    assert_scores_close(loaded.predict(images), source_scores)
    assert load_run_config(run).init_weights == str(src)
    assert weights_record.read_record(run).sha256  # the import's record beside the checkpoint
    # Unchanged commands take it.
    assert evaluate.main(["--run-dir", str(run), "--data", str(shards_v1)]) == 0
    assert (run / "eval-test" / "metrics.json").is_file()
    out = tmp_path / "map"
    argv = ["--shards", str(shards_v1), "--run-dir", str(run), "--out", str(out), "--no-progress"]
    assert map_main(argv) == 0 and list(out.glob("*.tif"))
    assert export_main([str(run), "--out", str(tmp_path / "export"), "--format", "savedmodel"]) == 0
    card = (tmp_path / "export" / "model_card.md").read_text()
    assert "classifier.safetensors" in card
    item = json.loads((tmp_path / "export" / "item.json").read_text())["properties"]
    assert (
        item["mlm:pretrained"] is True and "classifier.safetensors" in item["mlm:pretrained_source"]
    )


def _counted(monkeypatch, module, name: str) -> list:
    """Calls of ``module.name`` from now on (the function still runs)."""
    calls: list = []
    real = getattr(module, name)

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def test_init_weights_with_a_frozen_backbone(published, shards_v1, tmp_path, monkeypatch):
    from bigearthnet.training import initial

    weights = tmp_path / "weights"
    src = published["root"] / "backbone.safetensors"  # type: ignore[operator]
    assert weights_main(["import", str(src), "--out", str(weights)]) == 0
    run = tmp_path / "run"
    flags = ("--model", "resnet18", "--init-weights", str(weights), "--freeze-backbone",
             "--max-steps-per-epoch", "2")  # fmt: skip
    records = _counted(monkeypatch, weights_record, "read_record")
    loads = _counted(monkeypatch, initial, "load_folder")
    assert train.main(train_argv(shards_v1, run, 1, *flags)) == 0
    # resolved once: weights.json read once, the network loaded once (this one rank)
    assert len(loads) == 1 and len([r for r in records if Path(r[0]) == weights]) == 1
    start = models.get_model("resnet18", (120, 120, 12), 19)
    start.load_weights(str(weights / weights_record.WEIGHTS_FILE), by_name=True, skip_mismatch=True)
    trained = load_model(run).model
    for layer in start.layers:
        after = trained.get_layer(layer.name).get_weights()
        if layer.name == "logits":
            continue  # the head trained from its random start
        for before_w, after_w in zip(layer.get_weights(), after):
            np.testing.assert_array_equal(before_w, after_w, err_msg=layer.name)
    record = checkpoints.read_pointer(run, "best")
    assert record is not None and record.inputs is not None
    assert "published with the timm weights" in record.inputs.stats
    assert record.inputs.mean != tuple(read_manifest(shards_v1).band_mean or ())


def test_init_from_another_run(trained_run, shards_v1, tmp_path, monkeypatch):
    """A run folder as --init-weights: its best checkpoint, its normalisation; its model
    restored once (it was twice per rank)."""
    from bigearthnet.training import initial

    run = tmp_path / "run"
    flags = ("--init-weights", str(trained_run), "--freeze-backbone", "--max-steps-per-epoch", "2")
    loads = _counted(monkeypatch, initial, "load_model")
    assert train.main(train_argv(shards_v1, run, 1, *flags)) == 0
    assert len(loads) == 1
    before, after = load_model(trained_run), load_model(run)
    for layer in before.model.layers:
        if layer.weights and layer.name != "logits":
            for a, b in zip(layer.get_weights(), after.model.get_layer(layer.name).get_weights()):
                np.testing.assert_array_equal(a, b, err_msg=layer.name)
    head_before = before.model.get_layer("logits").get_weights()[0]
    assert not np.array_equal(head_before, after.model.get_layer("logits").get_weights()[0])
    assert after.inputs.mean == before.inputs.mean and "initial weights" in after.inputs.stats


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("freeze_alone", "--freeze-backbone needs --init-weights"),
        ("other_model", "weights of a resnet18, not --model tiny"),
        ("missing", "nothing: neither a folder of bigearthnet-weights import"),
    ],
)
def test_init_weights_refusals(published, shards_v1, tmp_path, reported_errors, case, message):
    weights = tmp_path / "weights"
    src = published["root"] / "backbone.safetensors"  # type: ignore[operator]
    assert weights_main(["import", str(src), "--out", str(weights)]) == 0
    flags = {
        "freeze_alone": ("--freeze-backbone",),
        "other_model": ("--init-weights", str(weights)),
        "missing": ("--init-weights", str(tmp_path / "nothing")),
    }[case]
    assert train.main(train_argv(shards_v1, tmp_path / "run", 1, *flags)) == 2
    lines = reported_errors()
    assert len(lines) == 1 and message in lines[0], lines


@pytest.mark.bad_input
def test_train_refuses_a_published_classifier_as_its_run(
    published, shards_v1, tmp_path, reported_errors, bad_input_row
):
    """T14: training in it used to start from random weights and prune the imported
    checkpoint, and config.yaml then said init_weights: ''."""
    run = tmp_path / "run"
    src = published["root"] / "classifier.safetensors"  # type: ignore[operator]
    assert weights_main(["run", str(src), "--out", str(run), "--source", "timm"]) == 0
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    code = train.main(train_argv(shards_v1, run, 1, "--model", "resnet18"))
    assert code == 2
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    line = reported_errors()[-1]
    assert str(run) in line and f"--init-weights {run}" in line, line
    bad_input_row("a `bigearthnet-weights run` folder as --run-dir", "train.py", code,
                  "refused before anything is written; says how to fine-tune from it")  # fmt: skip


def _import_backbone(published, folder: Path) -> Path:
    src = published["root"] / "backbone.safetensors"
    assert weights_main(["import", str(src), "--out", str(folder)]) == 0
    return folder


@pytest.mark.bad_input
def test_a_resume_keeps_its_start_without_the_weights_folder(
    published, shards_v1, tmp_path, reported_errors, bad_input_row
):
    """T11, T12: a resume read the initial weights again (and needed their folder), and
    without --init-weights rewrote config.yaml's init_weights to ''."""
    weights = _import_backbone(published, tmp_path / "weights")
    run = tmp_path / "run"
    flags = ("--model", "resnet18", "--max-steps-per-epoch", "2")
    assert train.main(train_argv(shards_v1, run, 1, *flags, "--init-weights", str(weights))) == 0
    moved = weights.rename(tmp_path / "moved")
    code = train.main(train_argv(shards_v1, run, 2, *flags))
    assert code == 0 and len(read_history(run)) == 2
    assert load_run_config(run).init_weights == str(weights)
    assert load_model(run).initial_weights is not None
    other = train.main(train_argv(shards_v1, run, 3, *flags, "--init-weights", str(moved)))
    assert other == 2
    line = reported_errors()[-1]
    assert f"--init-weights {moved}" in line and f"started from {weights}" in line, line
    assert len(read_history(run)) == 2
    bad_input_row("a resume without --init-weights, its folder moved away", "train.py", code,
                  "resumes from the checkpoint; config.yaml keeps init_weights")  # fmt: skip
    bad_input_row("a resume with another --init-weights", "train.py", other,
                  "refused naming the run's start; nothing trained")  # fmt: skip


@pytest.mark.bad_input
@pytest.mark.parametrize("damage", ["truncated", "another network"])
def test_damaged_imported_weights_are_one_line_naming_the_file(
    published, shards_v1, tmp_path, reported_errors, bad_input_row, damage
):
    """T08, T10: a truncated weights.h5 exited 1 naming nothing; one of another network
    loaded with skip_mismatch, leaving the stem random."""
    weights = _import_backbone(published, tmp_path / "weights")
    h5 = weights / weights_record.WEIGHTS_FILE
    if damage == "truncated":
        h5.write_bytes(h5.read_bytes()[: h5.stat().st_size // 2])
    else:
        models.get_model("resnet18", (120, 120, 10), 19).save_weights(str(h5))
    run = tmp_path / "run"
    argv = train_argv(shards_v1, run, 1, "--model", "resnet18", "--init-weights", str(weights))
    code = train.main(argv)
    assert code == 2
    line = reported_errors()[-1]
    assert str(h5) in line and "not the resnet18 its weights.json describes" in line, line
    assert not (run / "checkpoints").exists()
    bad_input_row(f"--init-weights whose weights.h5 is {damage}", "train.py", code,
                  "one line naming weights.h5; nothing trained")  # fmt: skip


@pytest.mark.bad_input
def test_a_published_run_needs_data_to_evaluate_and_a_readable_record_to_export(
    published, tmp_path, reported_errors, bad_input_row
):
    """E01: without --data, the weights file was called a missing data folder. E02: a
    damaged weights.json was skipped, and every export said mlm:pretrained false."""
    run = tmp_path / "run"
    src = published["root"] / "classifier.safetensors"
    assert weights_main(["run", str(src), "--out", str(run), "--source", "timm"]) == 0
    code = evaluate.main(["--run-dir", str(run)])
    assert code == 2
    line = reported_errors()[-1]
    assert "a published classifier" in line and "give --data SHARDS" in line, line
    record = run / weights_record.RECORD_FILE
    record.write_text(record.read_text()[:40])
    out = tmp_path / "export"
    damaged = export_main([str(run), "--out", str(out), "--format", "savedmodel"])
    assert damaged == 2
    line = reported_errors()[-1]
    assert str(record) in line and "unreadable weights record" in line, line
    assert not out.exists()
    bad_input_row("a published run, evaluated without --data", "evaluate.py", code,
                  "one line: a published classifier needs --data")  # fmt: skip
    bad_input_row("a published run whose weights.json is damaged", "bigearthnet-export",
                  damaged, "one line naming weights.json; no export")  # fmt: skip


def _decoder(model: tf.keras.Model) -> dict[str, list[np.ndarray]]:
    """The dense head's weights, by layer."""
    heads = (layer for layer in model.layers if models.is_head_layer(layer.name))
    return {layer.name: layer.get_weights() for layer in heads
            if layer.weights and layer.name != models.PATCH_HEAD}  # fmt: skip


def test_published_weights_start_the_encoder_of_a_model_with_the_dense_head(published, tmp_path):
    """--init-weights of a published ResNet (no decoder there): every encoder layer takes
    it, the decoder keeps its random start; --freeze-backbone leaves the heads trainable."""
    from bigearthnet.core.config import TrainConfig
    from bigearthnet.training.initial import InitialWeights, start_from

    weights = tmp_path / "weights"
    src = published["root"] / "backbone.safetensors"  # type: ignore[operator]
    assert weights_main(["import", str(src), "--out", str(weights)]) == 0
    source = models.get_model("resnet18", (120, 120, 12), 19)
    source.load_weights(str(weights / weights_record.WEIGHTS_FILE), by_name=True,
                        skip_mismatch=True)  # fmt: skip
    model = models.get_model("resnet18", (120, 120, 12), 19, dense_head=True)
    random_start = _decoder(model)
    cfg = TrainConfig(data="d", run_dir=str(tmp_path / "run"), model="resnet18",
                      init_weights=str(weights), freeze_backbone=True)  # fmt: skip
    record = weights_record.read(weights)
    start_from(model, InitialWeights(weights, record, record.model_inputs()), cfg)
    for layer in source.layers:
        if layer.weights and layer.name != "logits":
            for a, b in zip(layer.get_weights(), model.get_layer(layer.name).get_weights()):
                np.testing.assert_array_equal(a, b, err_msg=layer.name)
    for name, start in _decoder(model).items():
        for a, b in zip(start, random_start[name]):
            np.testing.assert_array_equal(a, b, err_msg=name)
    trainable = {layer.name for layer in model.layers if layer.trainable and layer.weights}
    assert trainable == {"logits", *random_start}


@pytest.mark.parametrize("source", ["trained_head_run", "trained_run"])
def test_a_run_folder_starts_the_dense_head_where_it_has_one(source, request, tmp_path):
    """--init-weights RUN into a model with the dense head: the run's decoder when it has one
    (a run with the head), a random one when not."""
    from bigearthnet.core.config import TrainConfig
    from bigearthnet.training.initial import InitialWeights, start_from

    run = request.getfixturevalue(source)
    model = models.get_model("tiny", (120, 120, 12), 19, dense_head=True)
    random_start = _decoder(model)
    cfg = TrainConfig(data="d", run_dir=str(tmp_path / "new"), model="tiny",
                      init_weights=str(run))  # fmt: skip
    start_from(model, InitialWeights(run, None, load_model(run).inputs), cfg)
    started = _decoder(model)
    expected = _decoder(load_model(run).model) if source == "trained_head_run" else random_start
    for name, weights in expected.items():
        for a, b in zip(weights, started[name]):
            np.testing.assert_array_equal(a, b, err_msg=name)
