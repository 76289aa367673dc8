"""P10: the exported model on a CPU, ONNX (onnxruntime) samples/s against the SavedModel's.

``bigearthnet-export`` of the ResNet-50 run (P3's, else a 1-epoch run made here), timed;
then the same batches of raw uint16 test patches through the SavedModel's serving signature
(TensorFlow) and through the ONNX model (onnxruntime's CPU provider), interleaved, both
with the machine's cores as intra-op threads and one warm-up batch each. The sizes of the
SavedModel, the ONNX model and the training checkpoint are reported beside.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import common
import numpy as np
from common import Figure
from evaluation import trained_run

BATCH = 32
BATCHES = 8  # 256 patches a measurement: ~5 s of ResNet-50 on 2 cores


def folder_mb(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 1e6


def test_patches(data: Path, count: int) -> np.ndarray:
    import h5py

    from bigearthnet.formats.manifest import read_manifest

    chunks, total = [], 0
    for entry in read_manifest(data).split_shards("test"):
        with h5py.File(entry.path(data), "r") as f:
            chunks.append(f["images"][: count - total])
        total += len(chunks[-1])
        if total >= count:
            break
    return np.concatenate(chunks)


def run(args, work: Path) -> list[Figure]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import onnxruntime
    import tensorflow as tf

    from bigearthnet.export.bundle import export_run
    from bigearthnet.export.options import ExportOptions
    from bigearthnet.formats import exported

    threads = os.cpu_count() or 1
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    source = trained_run(work)
    out = work / "p10-export"
    common.say(f"P10: exporting {source}")
    started = time.perf_counter()
    summary = export_run(ExportOptions(run_dir=source, out=out, overwrite=True))
    export_s = time.perf_counter() - started
    if "onnx" not in summary.info.formats:
        return [Figure("P10", "ONNX export failed", None, limited_by="; ".join(summary.notes))]

    images = test_patches(common.eval_shards(work), BATCH * BATCHES)
    batches = [images[i : i + BATCH] for i in range(0, len(images), BATCH)]
    serve = tf.saved_model.load(str(out / exported.SAVEDMODEL_DIR)).signatures["serving_default"]
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = onnxruntime.InferenceSession(
        str(out / exported.ONNX_FILE), options, providers=["CPUExecutionProvider"]
    )

    def savedmodel(rep: int) -> float:
        started = time.perf_counter()
        for batch in batches:
            serve(images=tf.constant(batch))["probabilities"].numpy()
        return len(images) / (time.perf_counter() - started)

    def onnx(rep: int) -> float:
        started = time.perf_counter()
        for batch in batches:
            session.run(["probabilities"], {"images": batch})
        return len(images) / (time.perf_counter() - started)

    savedmodel(-1), onnx(-1)  # graph building and allocations: not measured
    rates = common.interleave({"SavedModel": savedmodel, "ONNX": onnx}, args.repeats, common.say)
    sizes = {
        "savedmodel_mb": folder_mb(out / exported.SAVEDMODEL_DIR),
        "onnx_mb": folder_mb(out / exported.ONNX_FILE),
        "checkpoint_mb": folder_mb(Path(summary.info.source.checkpoint).parent),
    }
    details = {"samples_per_s": rates, "export_s": export_s, **sizes, "threads": threads}
    return [
        Figure("P10", "exported ResNet-50 on CPU: ONNX (onnxruntime) / SavedModel samples/s",
               common.paired_ratio(rates["ONNX"], rates["SavedModel"]), "x", ">=", 0.8,
               f"SavedModel {common.median(rates['SavedModel']):.1f}/s, ONNX "
               f"{common.median(rates['ONNX']):.1f}/s, batch {BATCH}, {threads} threads",
               details),
        Figure("P10-size", "export size: SavedModel MB (ONNX MB; checkpoint with optimizer MB)",
               sizes["savedmodel_mb"], "MB",
               limited_by=f"ONNX {sizes['onnx_mb']:.1f} MB; checkpoint "
               f"{sizes['checkpoint_mb']:.1f} MB; export took {export_s:.0f} s"),
    ]  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(common.run_cli(common.base_parser(__doc__.splitlines()[0]), run))
