"""The pixel model in onnxruntime (bigearthnet/inference/onnx_pixels.py): its agreement with
TensorFlow's, and its cache of converted graphs (reused only for the same model, window and
code; a truncated file converted again; a cache that cannot be written, or another runtime
asked for, leaves TensorFlow)."""

from __future__ import annotations

import logging

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


def test_a_conversion_is_reused_only_for_the_same_model(cache) -> None:
    """The same model, window and identity: the cached file, untouched; other weights (their
    digest) or another window: a file of their own."""
    model = _tiny()
    first = fastest(model, IDENTITY)
    assert isinstance(first, OnnxPixelModel)
    made = first.path.stat().st_mtime_ns
    again = fastest(model, IDENTITY)
    assert isinstance(again, OnnxPixelModel)
    assert again.path == first.path and again.path.stat().st_mtime_ns == made
    retrained = fastest(model, {**IDENTITY, "weights_digest": "b"})
    assert isinstance(retrained, OnnxPixelModel) and retrained.path != first.path
    other_window = fastest(_tiny((192, 192)), IDENTITY)
    assert isinstance(other_window, OnnxPixelModel)
    assert len({first.path, retrained.path, other_window.path}) == 3
    assert sorted(p.suffix for p in cache.iterdir()) == [".onnx"] * 3  # no .part left


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


def test_tensorflow_when_asked(monkeypatch) -> None:
    monkeypatch.setenv(onnx_pixels.RUNTIME_ENV, "tensorflow")
    model = _tiny()
    assert fastest(model, IDENTITY) is model
