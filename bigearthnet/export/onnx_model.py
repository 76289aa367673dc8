"""The ONNX model: the serving function converted with tf2onnx, then run with onnxruntime
and compared with the SavedModel before it is kept. A stack tf2onnx cannot convert gets a
one-line reason (:class:`OnnxUnavailable`), and the export goes on without it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bigearthnet.export.serving import ServingModule
from bigearthnet.formats.exported import INPUT_NAME

OPSET = 17  # supported by onnxruntime >= 1.14 and every tf2onnx we install
TOLERANCE = 1e-4  # largest |ONNX - SavedModel| probability accepted at export time


class OnnxUnavailable(RuntimeError):
    """No ONNX model could be written or it disagreed with the SavedModel."""


@dataclass(frozen=True)
class OnnxModel:
    path: Path
    opset: int
    max_abs_diff: float  # against the SavedModel on the probe batch


def convert(module: ServingModule, path: Path, opset: int = OPSET) -> None:
    """Write ``path`` from the module's serving function."""
    try:
        import tf2onnx
    except ImportError as err:  # the stack has no tf2onnx (or one that does not import)
        raise OnnxUnavailable(f"tf2onnx does not import on this stack: {err}") from None
    try:
        tf2onnx.convert.from_function(
            module.serve,
            input_signature=module.serve.input_signature,
            opset=opset,
            output_path=str(path),
        )
    except Exception as err:  # tf2onnx raises anything from its graph rewriters
        text = str(err).strip().splitlines()
        reason = text[0] if text else type(err).__name__
        raise OnnxUnavailable(f"tf2onnx could not convert the model: {reason}") from None


def run_onnx(path: Path, images: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """The outputs ``names`` (probabilities, and per pixel with the dense head) of
    ``images`` from the ONNX model at ``path`` (onnxruntime, CPU)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip(names, map(np.asarray, session.run(names, {INPUT_NAME: images}))))


def export_onnx(
    module: ServingModule, path: Path, probe: np.ndarray, reference: dict[str, np.ndarray]
) -> OnnxModel:
    """Convert, then check on ``probe`` against every named output of the SavedModel
    (``reference``)."""
    convert(module, path)
    try:
        outputs = run_onnx(path, probe, list(reference))
        max_diff = max(float(np.abs(outputs[k] - reference[k]).max()) for k in reference)
    except Exception as err:  # onnxruntime could not load or run what tf2onnx wrote
        path.unlink(missing_ok=True)
        raise OnnxUnavailable(f"onnxruntime could not run the converted model: {err}") from None
    if not max_diff <= TOLERANCE:
        path.unlink(missing_ok=True)
        raise OnnxUnavailable(
            f"the ONNX model differs from the SavedModel by {max_diff:.2e} (> {TOLERANCE:g})"
        )
    return OnnxModel(path, opset=OPSET, max_abs_diff=max_diff)
