"""The dense head's pixel model run by onnxruntime where it can: the TensorFlow pixel model
(:class:`~bigearthnet.inference.pixel_model.PixelModel`: uint16 in, the training
normalisation, softmax) converted with tf2onnx at one window shape, then run in float32.

onnxruntime 1.32 runs ResNet-50 with the dense head 1.3x faster than TensorFlow 2.15 at one
thread (P12-int8, benchmarks/README.md; onnxruntime 1.17 had been slower). The dense head's
resizes are sized when the model is built, so an ONNX graph holds one window shape: each
shape is converted once (tf2onnx: ~20-40 s for ResNet-50) and cached on disk, keyed by
everything that made the file (the model and its weights' digest, the normalisation, the
shape, the bands, the opset and the converters' versions): a changed model never reuses it.
A conversion is checked against TensorFlow on one window before it is kept, and the cache
is then pruned to ``$BIGEARTHNET_CACHE_GB`` (the least recently used files first: each is
the model's weights again, 95 MB for ResNet-50 with the head). Where tf2onnx or
onnxruntime cannot (not installed, a graph it cannot convert, a cache it cannot write), the
map runs TensorFlow, with one warning line.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf

from bigearthnet.core.errors import InputError
from bigearthnet.core.util import files_digest
from bigearthnet.inference.pixel_model import PixelModel

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)

OPSET = 17  # as the export's ONNX model (export/onnx_model.py)
CACHE_ENV = "BIGEARTHNET_CACHE"  # the cache's folder; else $XDG_CACHE_HOME/bigearthnet
RUNTIME_ENV = "BIGEARTHNET_PIXEL_RUNTIME"  # onnxruntime (the default) or tensorflow
RUNTIMES = ("onnxruntime", "tensorflow")
CACHE_SIZE_ENV = "BIGEARTHNET_CACHE_GB"  # the cache's size at most, GB
DEFAULT_CACHE_GB = 2.0  # ~20 window shapes of ResNet-50 with the head
STALE_PART_S = 86_400  # a .part this old is a killed conversion's (one takes ~30 s)
CACHED_NAME = re.compile(r".+-\d+x\d+-[0-9a-f]{32}\.onnx")  # what _onnx_model names
TOLERANCE = 1e-3
"""Largest |onnxruntime - TensorFlow| probability accepted when a conversion is checked. A
ResNet-50's logits at a 1,728 px window come from sums of ~10^4 float32 terms a layer,
summed in another order by each runtime (~1e-6 relative each): measured differences are
~1e-5; 1e-3 is a wrong graph's signal, far above rounding."""


class OnnxPixelModel:
    """The same call as :class:`PixelModel` ((N, height, width, bands) uint16 -> (N,
    height, width, 19) float32), by an onnxruntime session of ``path``."""

    def __init__(self, path: Path, like: PixelModel) -> None:
        import onnxruntime

        self.name, self.shape, self.classes = like.name, like.shape, like.classes
        self.path = path
        options = onnxruntime.SessionOptions()
        threads = tf.config.threading.get_intra_op_parallelism_threads()
        if threads:  # the process's setting (distributed.set_threads), as TensorFlow's
            options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Waiting threads spin by default: CPU seconds that compute nothing.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        self._input = self._session.get_inputs()[0].name

    def __call__(self, images: np.ndarray) -> np.ndarray:
        return self._session.run(None, {self._input: np.asarray(images, dtype=np.uint16)})[0]


def fastest(model: PixelModel, identity: Mapping[str, str]) -> PixelModel | OnnxPixelModel:
    """``model`` in onnxruntime (converted once per ``identity``, the model's provenance,
    and window shape; cached), or ``model`` itself where onnxruntime cannot run it or
    ``$BIGEARTHNET_PIXEL_RUNTIME`` is ``tensorflow``; InputError naming the variable for
    another value."""
    if chosen_runtime() == "tensorflow":
        return model
    limit = cache_limit_bytes()
    try:
        return _onnx_model(model, identity, limit)
    except Exception as err:  # tf2onnx and onnxruntime raise anything: TensorFlow maps
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        log.warning("the 10 m map runs TensorFlow, not onnxruntime: %s", reason)
        return model


def chosen_runtime() -> str:
    """``$BIGEARTHNET_PIXEL_RUNTIME``: onnxruntime unless set; InputError for what is
    neither."""
    runtime = os.environ.get(RUNTIME_ENV) or RUNTIMES[0]
    if runtime not in RUNTIMES:
        raise InputError(f"{RUNTIME_ENV}={runtime!r}: give {' or '.join(RUNTIMES)}")
    return runtime


def cache_limit_bytes() -> int:
    """``$BIGEARTHNET_CACHE_GB`` in bytes (:data:`DEFAULT_CACHE_GB` unless set); InputError
    for what is not a finite number of GB above 0."""
    raw = os.environ.get(CACHE_SIZE_ENV) or str(DEFAULT_CACHE_GB)
    try:
        gigabytes = float(raw)
    except ValueError:
        gigabytes = math.nan
    if not (math.isfinite(gigabytes) and gigabytes > 0):
        raise InputError(f"{CACHE_SIZE_ENV}={raw!r}: give the converted pixel models' cache "
                         "size in GB, a number above 0")  # fmt: skip
    return int(gigabytes * 1e9)


def prune_cache(folder: Path, keep: Path, limit: int) -> list[Path]:
    """Remove the least recently used converted models of ``folder`` (by modification time:
    a cache hit touches its file) until they hold at most ``limit`` bytes, never ``keep``,
    and the ``.part`` files of conversions killed over a day ago; other files stay. Returns
    what was removed. Files another process removes meanwhile are passed over."""
    removed = []
    now = time.time()
    for part, stat in _stats(folder.glob("*.onnx.part")):
        if now - stat.st_mtime > STALE_PART_S:
            part.unlink(missing_ok=True)
            removed.append(part)
    cached = _stats(p for p in folder.iterdir() if CACHED_NAME.fullmatch(p.name))
    held = sum(stat.st_size for _, stat in cached)
    for path, stat in sorted(cached, key=lambda entry: entry[1].st_mtime):
        if held <= limit:
            break
        if path != keep:
            path.unlink(missing_ok=True)
            held -= stat.st_size
            removed.append(path)
    for path in removed:
        log.info("pixel model cache over %s GB: removed %s", f"{limit / 1e9:g}", path.name)
    return removed


def _stats(paths: Iterable[Path]) -> list[tuple[Path, os.stat_result]]:
    """Each file of ``paths`` with its stat, those gone meanwhile left out."""
    found = []
    for path in paths:
        try:
            found.append((path, path.stat()))
        except FileNotFoundError:  # pruned or renamed by another process
            continue
    return found


def cache_folder() -> Path:
    """Where converted pixel models are kept: ``$BIGEARTHNET_CACHE/onnx-pixels``, else
    ``$XDG_CACHE_HOME/bigearthnet/onnx-pixels`` (``~/.cache`` without it)."""
    root = os.environ.get(CACHE_ENV)
    if not root:
        root = str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bigearthnet")
    return Path(root) / "onnx-pixels"


def cache_key(model: PixelModel, identity: Mapping[str, str]) -> str:
    """A digest of everything that made a converted file: the model's identity (its
    registry name, the weights' digest), its normalisation, the window shape and bands, the
    opset and the converters' versions."""
    import tf2onnx

    made_of = {
        "identity": dict(sorted(identity.items())),
        "mean": [float(v) for v in model.mean],
        "std": [float(v) for v in model.std],
        "shape": list(model.shape),
        "channels": model.channels,
        "code": _code_digest(),  # what builds the graph: the registry, normalisation, softmax
        "opset": OPSET,
        "tf2onnx": tf2onnx.__version__,
        "tensorflow": tf.__version__,
    }
    return hashlib.sha256(json.dumps(made_of, sort_keys=True).encode()).hexdigest()[:32]


def _code_digest() -> str:
    """A digest of the sources that build the pixel model's graph from its weights: the
    models' registry, the normalisation, :mod:`.pixel_model`."""
    from bigearthnet import models
    from bigearthnet.data import normalization
    from bigearthnet.inference import pixel_model

    files = sorted(Path(models.__file__).parent.rglob("*.py"))
    files += [Path(normalization.__file__), Path(pixel_model.__file__)]
    return files_digest(files)


def _onnx_model(model: PixelModel, identity: Mapping[str, str], limit: int) -> OnnxPixelModel:
    folder = cache_folder()
    path = (
        folder / f"{model.name}-{model.shape[0]}x{model.shape[1]}-{cache_key(model, identity)}.onnx"
    )
    if path.is_file():
        try:
            loaded = OnnxPixelModel(path, model)
            # Recently used: pruned last (a cache shared read-only keeps its owner's order).
            with contextlib.suppress(OSError):
                os.utime(path)
            return loaded
        except Exception as err:  # a truncated or foreign file under the key: made again
            log.warning("%s: unreadable (%s): converting again", path, str(err).splitlines()[0])
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(suffix=".onnx.part", dir=folder)
    os.close(handle)
    try:
        _convert(model, Path(temporary))
        converted = OnnxPixelModel(Path(temporary), model)
        _check(converted, model)
        os.replace(temporary, path)  # whole or not at all: a killed conversion leaves a .part
    finally:
        Path(temporary).unlink(missing_ok=True)
    prune_cache(folder, path, limit)
    log.info("pixel model converted to ONNX at %d x %d px: %s", *model.shape, path)
    converted.path = path  # the session checked above holds the graph: not loaded again
    return converted


def _convert(model: PixelModel, path: Path) -> None:
    import onnx
    import tf2onnx

    function = model.function()
    graph, _ = tf2onnx.convert.from_function(
        function, input_signature=function.input_signature, opset=OPSET
    )
    softmax_last(graph)
    onnx.save(graph, str(path))


def softmax_last(graph: onnx.ModelProto) -> None:
    """tf2onnx computes in NCHW and ends with Softmax over axis 1 then a Transpose back to
    NHWC; onnxruntime's Softmax over a non-last axis transposes inside, slowly (3.2 of 7.8 s
    for a 1,728 px window of ResNet-50 against 0.7 s over the last axis). The two are
    swapped (the same values); a graph that does not end so is left as it is."""
    nodes = graph.graph.node
    if len(nodes) < 2:
        return
    softmax, transpose = nodes[-2], nodes[-1]
    perm = [list(a.ints) for a in transpose.attribute if a.name == "perm"]
    axis = [a.i for a in softmax.attribute if a.name == "axis"]
    if not (softmax.op_type == "Softmax" and transpose.op_type == "Transpose"
            and perm == [[0, 2, 3, 1]] and axis == [1]
            and transpose.input[0] == softmax.output[0]):  # fmt: skip
        return
    logits, output = softmax.input[0], transpose.output[0]
    transpose.input[0], transpose.output[0] = logits, "pixel_logits_nhwc"
    softmax.input[0], softmax.output[0] = "pixel_logits_nhwc", output
    for attribute in softmax.attribute:
        if attribute.name == "axis":
            attribute.i = 3
    nodes.remove(softmax)
    nodes.append(softmax)


def _check(converted: OnnxPixelModel, model: PixelModel) -> None:
    """ValueError unless both runtimes give the same probabilities on one window of the
    reflectances the model was trained on: each band drawn around its training mean by its
    standard deviation (uniform noise over 0-10,000 lies far outside them: activations and
    logits grow, and so does the float32 rounding of both runtimes)."""
    rng = np.random.default_rng(0)
    values = model.mean + model.std * rng.standard_normal((1, *model.shape, model.channels))
    images = np.clip(values, 0, np.iinfo(np.uint16).max).astype(np.uint16)
    difference = float(np.abs(converted(images) - model(images)).max())
    if not difference <= TOLERANCE:
        raise ValueError(
            f"the ONNX pixel model differs from TensorFlow's by {difference:.2e} (> {TOLERANCE:g})"
        )
