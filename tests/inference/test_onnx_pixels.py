"""The pixel model in onnxruntime (bigearthnet/inference/onnx_pixels.py): its agreement with
TensorFlow's, and its cache of converted graphs (reused only for the same model, window and
code; pruned to its size, the least recently used first; a truncated file converted again;
a cache that cannot be written, or another runtime asked for, leaves TensorFlow)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest

from bigearthnet.core.errors import InputError
from bigearthnet.inference import onnx_pixels
from bigearthnet.inference.onnx_pixels import OnnxPixelModel, fastest
from bigearthnet.inference.pixel_model import PixelModel, rebuilt
from bigearthnet.inference.trained_run import load_model

# Tolerances from the computation's conditioning: both runtimes compute the same float32
# graph, summing in other orders (~6e-8 relative a term); the tiny CNN's logits are sums of
# ~10^3 terms of order 1-10, so they differ by ~1e-5 and the probabilities by less (a
# softmax moves by at most half a logit's change). A class may differ only where the top
# two probabilities are closer than twice the probabilities' tolerance.
PROBABILITY_TOLERANCE = 1e-4
CLASS_MARGIN = 2 * PROBABILITY_TOLERANCE
IDENTITY = {"model": "tiny", "weights_digest": "a"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(onnx_pixels.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(onnx_pixels.RUNTIME_ENV, raising=False)
    return tmp_path / "cache" / "onnx-pixels"


def _images(model, seed: int = 0) -> np.ndarray:
    """Two windows of plausible reflectances: fields 16 px coarse around the model's band
    means (parcels, not noise), with a little per-pixel noise."""
    rng = np.random.default_rng(seed)
    rows, cols = (side // 16 + 1 for side in model.shape)
    coarse = model.mean + model.std * rng.standard_normal((2, rows, cols, model.channels))
    fine = np.repeat(np.repeat(coarse, 16, axis=1), 16, axis=2)[
        :, : model.shape[0], : model.shape[1]
    ]
    fine = fine + 0.05 * model.std * rng.standard_normal(fine.shape)
    return np.clip(fine, 0, 65535).astype(np.uint16)


def _tiny(window=(192, 240)) -> PixelModel:
    """The tiny CNN with the dense head at ``window``, its initial weights (conversion and
    caching do not depend on training)."""
    model = rebuilt("tiny", window, 12, 19, lambda m: None)
    return PixelModel(model, np.full(12, 1200.0), np.full(12, 800.0), window)


def test_onnxruntime_gives_tensorflows_probabilities(trained_head_run, cache) -> None:
    """The trained model's 10 m map in onnxruntime: the probabilities of TensorFlow's within
    the conditioning's tolerance, and its class wherever the top two are not a tie."""
    loaded = load_model(trained_head_run, "best")
    converted = loaded.pixel_model((192, 288))
    assert isinstance(converted, OnnxPixelModel)
    weights = loaded.model.get_weights()
    keras = rebuilt(loaded.record.model, (192, 288), len(loaded.bands), loaded.num_classes,
                    lambda m: m.set_weights(weights))  # fmt: skip
    reference = PixelModel(keras, loaded.mean, loaded.std, (192, 288))
    images = _images(reference)
    ours, theirs = converted(images), reference(images)
    assert ours.shape == theirs.shape == (2, 192, 288, 19)
    assert np.abs(ours - theirs).max() <= PROBABILITY_TOLERANCE
    top2 = np.sort(theirs, axis=-1)[..., -2:]
    decided = top2[..., 1] - top2[..., 0] > CLASS_MARGIN
    assert decided.mean() > 0.9  # the comparison covers most pixels
    assert (ours.argmax(-1) == theirs.argmax(-1))[decided].all()


def test_a_conversion_is_reused_only_for_the_same_model(cache, monkeypatch) -> None:
    """The same model, window and identity: the cached file, not written again (a hit marks
    it used); other weights (their digest) or another window: a file of their own, after
    which the cache is pruned to its size, the least recently used file first."""
    model = _tiny()
    first = fastest(model, IDENTITY)
    assert isinstance(first, OnnxPixelModel)
    made = first.path.stat().st_ino, first.path.read_bytes()
    retrained = fastest(model, {**IDENTITY, "weights_digest": "b"})
    assert isinstance(retrained, OnnxPixelModel) and retrained.path != first.path
    now = time.time()
    os.utime(first.path, (now - 200, now - 200))  # converted first, then used again:
    os.utime(retrained.path, (now - 100, now - 100))
    again = fastest(model, IDENTITY)
    assert isinstance(again, OnnxPixelModel) and again.path == first.path
    assert (again.path.stat().st_ino, again.path.read_bytes()) == made
    assert again.path.stat().st_mtime > now - 100  # ... the retrained one is the least used
    size_gb = first.path.stat().st_size / 1e9
    monkeypatch.setenv(onnx_pixels.CACHE_SIZE_ENV, f"{2.5 * size_gb:.12f}")  # 2 files fit
    other_window = fastest(_tiny((192, 192)), IDENTITY)
    assert isinstance(other_window, OnnxPixelModel)
    assert sorted(cache.iterdir()) == sorted([first.path, other_window.path])  # no .part left


def test_pruning_spares_the_new_file_live_conversions_and_other_files(tmp_path) -> None:
    def entry(name: str, size: int, age_s: float) -> Path:
        path = tmp_path / name
        path.write_bytes(b"0" * size)
        os.utime(path, (time.time() - age_s,) * 2)
        return path

    new = entry(f"tiny-8x8-{'a' * 32}.onnx", 500, 10_000)  # oldest, but just converted
    old = entry(f"tiny-9x9-{'b' * 32}.onnx", 500, 2_000)
    recent = entry(f"resnet50-9x9-{'c' * 32}.onnx", 500, 1_000)
    killed = entry("tmpabc.onnx.part", 500, 2 * onnx_pixels.STALE_PART_S)
    live = entry("tmpdef.onnx.part", 500, 5)
    foreign = entry("notes.onnx", 5_000, 50_000)
    assert onnx_pixels.prune_cache(tmp_path, new, limit=1_000) == [killed, old]
    assert sorted(tmp_path.iterdir()) == sorted([new, recent, live, foreign])
    assert onnx_pixels.prune_cache(tmp_path, new, limit=1) == [recent]


@pytest.mark.bad_input
def test_a_truncated_cached_conversion_is_made_again(cache, caplog, bad_input_row) -> None:
    model = _tiny()
    path = fastest(model, IDENTITY).path  # type: ignore[union-attr]
    path.write_bytes(path.read_bytes()[:1000])
    with caplog.at_level(logging.WARNING):
        again = fastest(model, IDENTITY)
    assert isinstance(again, OnnxPixelModel) and again.path == path
    assert any("unreadable" in r.getMessage() and str(path) in r.getMessage()
               for r in caplog.records)  # fmt: skip
    images = _images(model)
    assert np.abs(again(images) - model(images)).max() <= PROBABILITY_TOLERANCE
    bad_input_row("a truncated ONNX pixel model in the cache", "bigearthnet-map scene", 0,
                  "named in a warning, converted again")  # fmt: skip


@pytest.mark.bad_input
def test_a_cache_that_cannot_be_written_leaves_tensorflow(
    tmp_path, monkeypatch, caplog, bad_input_row
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(onnx_pixels.CACHE_ENV, str(blocker))
    model = _tiny()
    with caplog.at_level(logging.WARNING):
        assert fastest(model, IDENTITY) is model
    lines = [r.getMessage() for r in caplog.records]
    assert any("runs TensorFlow, not onnxruntime" in line for line in lines), lines
    assert blocker.read_text() == "not a folder"
    bad_input_row("`$BIGEARTHNET_CACHE` a file, not a folder", "bigearthnet-map scene", 0,
                  "one warning line; the map runs TensorFlow")  # fmt: skip


@pytest.mark.bad_input
@pytest.mark.parametrize("value", ["onnx", "TensorFlow", "nan"])
def test_an_unknown_runtime_is_refused(value, monkeypatch, bad_input_row) -> None:
    monkeypatch.setenv(onnx_pixels.RUNTIME_ENV, value)
    model = _tiny()
    with pytest.raises(InputError, match=f"BIGEARTHNET_PIXEL_RUNTIME='{value}': give"):
        fastest(model, IDENTITY)
    bad_input_row(f"`BIGEARTHNET_PIXEL_RUNTIME={value}`", "bigearthnet-map scene", 2,
                  "refused naming the variable and its values")  # fmt: skip


@pytest.mark.bad_input
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "two"])
def test_a_cache_size_that_is_not_a_positive_number_is_refused(
    value, cache, monkeypatch, bad_input_row
) -> None:
    monkeypatch.setenv(onnx_pixels.CACHE_SIZE_ENV, value)
    with pytest.raises(InputError, match=f"BIGEARTHNET_CACHE_GB='{value}': give"):
        fastest(_tiny(), IDENTITY)
    assert not cache.exists()  # refused before converting anything
    bad_input_row(f"`BIGEARTHNET_CACHE_GB={value}`", "bigearthnet-map scene", 2,
                  "refused naming the variable, before any conversion")  # fmt: skip


def test_tensorflow_when_asked(monkeypatch) -> None:
    monkeypatch.setenv(onnx_pixels.RUNTIME_ENV, "tensorflow")
    model = _tiny()
    assert fastest(model, IDENTITY) is model
