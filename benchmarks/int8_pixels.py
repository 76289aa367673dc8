"""P12-int8: ResNet-50 with the dense head as int8 in onnxruntime against TensorFlow float32
(issue 50, item 4: a study, not in ``make bench``; adopted only if faster and the same
class on >= 99 % of the pixels).

P12's run (``scene_maps_10m.dense_run``) and scene (1,728 px, JPEG 2000), the scene cut in
3 x 3 windows of ``--side`` px (read and upsampled as a 10 m map reads them, normalised as
the model is). The per-pixel logits' model is exported to ONNX (tf2onnx, opset 17) and
quantised (``onnxruntime.quantization.quantize_static``: QDQ, per-channel int8 weights,
uint8 activations, MinMax calibration on 4 of the windows, the dense head's decoder kept
in float32). Each window goes through TensorFlow float32, onnxruntime float32 and
onnxruntime int8, alternated, one thread each, timed in process CPU seconds (the first
window of each warms up); the top class of each pixel is compared with TensorFlow's.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import common
import numpy as np
from common import Figure
from scene_maps import scene
from scene_maps_10m import dense_run

AGREEMENT = 0.99  # the share of pixels of TensorFlow's class int8 must keep to be adopted
SCENE_PX = 1728


def windows(loaded, scene_dir: Path, side: int) -> list[np.ndarray]:
    """The scene's windows of ``side`` px, normalised as the model takes them."""
    from bigearthnet.data.normalization import normalize
    from bigearthnet.maps.inputs import identify
    from bigearthnet.maps.scene.input import Scene
    from bigearthnet.maps.scene.windows import WindowBands
    from bigearthnet.preprocessing.assembly import assemble

    found = []
    with Scene(identify(scene_dir), bands=tuple(loaded.bands)) as opened:
        for row in range(0, SCENE_PX, side):
            for col in range(0, SCENE_PX, side):
                rect = opened.rect(row, col, side, side)
                image = assemble(WindowBands(rect.bands), loaded.resampling, tuple(rect.bands),
                                 size=side)  # fmt: skip
                found.append(np.asarray(normalize(image[None], loaded.mean, loaded.std)))
    return found


def onnx_models(keras, side: int, channels: int, calibration: list, work: Path) -> dict:
    """float32 and int8 ONNX files of ``keras`` (the input named ``x``)."""
    import onnx
    import tensorflow as tf
    import tf2onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    fp32, pre, int8 = (work / f"p12-pixels-{name}.onnx" for name in ("fp32", "pre", "int8"))
    spec = (tf.TensorSpec((1, side, side, channels), tf.float32, name="x"),)
    tf2onnx.convert.from_keras(keras, input_signature=spec, opset=17, output_path=str(fp32))
    quant_pre_process(str(fp32), str(pre), skip_symbolic_shape=True)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(calibration)

        def get_next(self):
            item = next(self.items, None)
            return None if item is None else {"x": item}

    decoder = [n.name for n in onnx.load(str(pre)).graph.node
               if "decoder_" in n.name or "pixel_logits" in n.name]  # fmt: skip
    quantize_static(str(pre), str(int8), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, nodes_to_exclude=decoder)  # fmt: skip
    return {"ort_fp32": fp32, "ort_int8": int8}


def measure(run: Path, scene_dir: Path, side: int, work: Path) -> dict:
    """Core-s per window and the top classes, per way of running the model."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from bigearthnet.core import distributed

    distributed.init(threads=1)
    import onnxruntime as ort
    import tensorflow as tf

    from bigearthnet import models
    from bigearthnet.inference.pixel_model import rebuilt
    from bigearthnet.inference.trained_run import load_model

    loaded = load_model(run, "best")
    weights = loaded.model.get_weights()
    built = rebuilt(loaded.provenance["model"], side, len(loaded.bands), loaded.num_classes,
                    lambda m: m.set_weights(weights))  # fmt: skip
    keras = tf.keras.Model(built.input, built.get_layer(models.PIXEL_HEAD).output)
    found = windows(loaded, scene_dir, side)
    files = onnx_models(keras, side, len(loaded.bands), found[::2][:4], work)
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    runners = {"tf_fp32": tf.function(lambda x: keras(x, training=False))}
    for name, path in files.items():
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        runners[name] = lambda x, s=session: s.run(None, {"x": x})[0]
    seconds: dict[str, list[float]] = {name: [] for name in runners}
    top: dict[str, list[np.ndarray]] = {name: [] for name in runners}
    for index, image in enumerate(found):
        for name, runner in runners.items():
            started = time.process_time()
            logits = np.asarray(runner(image))
            if index:  # the first window warms each up
                seconds[name].append(time.process_time() - started)
            top[name].append(logits[0].argmax(-1))
    reference = np.stack(top["tf_fp32"])
    return {"core_s": {name: common.median(v) for name, v in seconds.items()},
            "agreement": {name: float((np.stack(v) == reference).mean())
                          for name, v in top.items()}}  # fmt: skip


def run(args, work: Path) -> list[Figure]:
    trained = dense_run(work)
    scene_dir = scene(work, SCENE_PX, "safe")
    common.say(f"P12-int8: {SCENE_PX} px scene in windows of {args.side} px, 1 thread")
    found = measure(trained, scene_dir, args.side, work)
    core_s, agreement = found["core_s"], found["agreement"]
    speedup = core_s["tf_fp32"] / core_s["ort_int8"]
    adopted = speedup > 1 and agreement["ort_int8"] >= AGREEMENT
    return [
        Figure("P12-int8", "pixels of TensorFlow float32's class under int8 onnxruntime "
               "(ResNet-50 + dense head, static QDQ), P12's scene",
               agreement["ort_int8"], "%", ">=", AGREEMENT,
               f"int8 {speedup:.1f}x faster than TensorFlow float32; "
               f"{'adopt' if adopted else 'not adopted'}",
               {"side_px": args.side, **found}),
    ]  # fmt: skip


def build_parser():
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, default=576, help="window side in 10 m px")
    return parser


if __name__ == "__main__":
    sys.exit(common.run_cli(build_parser(), run))
