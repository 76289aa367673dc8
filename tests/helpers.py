"""Helpers the tests share (fixtures live in conftest.py): the repository root, the tiny
training recipe, in-process preprocessing, and 2-rank runs through horovodrun."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import numpy as np

from bigearthnet.core import constants
from bigearthnet.formats.history import HistoryRow

if TYPE_CHECKING:  # TensorFlow loads only in the tests that build a model
    import tensorflow as tf

REPO = Path(__file__).resolve().parents[1]


def unavailable(what: str, reason: str) -> NoReturn:
    """Skip a test that needs ``what`` (slurm, chromium, shellcheck, tmpfs), which this machine
    lacks for ``reason``, or fail it where ``BEN_REQUIRE`` (comma-separated, or ``all``) names
    it: CI installs them all, so a tier there must not pass by skipping."""
    import pytest

    required = {word.strip() for word in os.environ.get("BEN_REQUIRE", "").split(",")}
    if what in required or "all" in required:
        pytest.fail(f"BEN_REQUIRE names {what}, but {reason}", pytrace=False)
    pytest.skip(reason)


def preprocess(archive: Path, out: Path, *extra: str) -> int:
    from bigearthnet.cli.preprocess import main

    return main([str(archive), str(out), "--no-progress", *extra])


TINY_RECIPE = [
    "--model",
    "tiny",
    "--optimizer",
    "adam",
    "--lr",
    "0.01",
    "--batch-size",
    "8",
    "--warmup-epochs",
    "0",
    "--threads",
    "1",
    "--no-progress",
]


def train_argv(
    data: Path, run: Path, epochs: int = 1, *extra: str, eval_test: bool = False
) -> list[str]:
    """train.py's arguments: the tiny recipe on ``data`` into ``run`` for ``epochs``, the
    final test evaluation only with ``eval_test``, then ``extra`` (later flags win)."""
    argv = ["--data", str(data), "--run-dir", str(run), "--epochs", str(epochs), *TINY_RECIPE]
    return [*argv, *([] if eval_test else ["--no-eval-test"]), *extra]


def train_command(data: Path, run: Path, epochs: int = 1, *extra: str, **kw: bool) -> list[str]:
    """``python train.py`` with :func:`train_argv` (run from the repository)."""
    return [sys.executable, "train.py", *train_argv(data, run, epochs, *extra, **kw)]


HOLD = (
    "import sys, time; from bigearthnet.core import runlock; "
    "runlock.acquire(sys.argv[1]); print('held', flush=True); time.sleep(600)"
)


def hold_run_folder(run: Path, **env: str) -> subprocess.Popen:
    """Another process holding ``run`` (as a training on it would), until killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


DISCOVER = REPO / "jobs" / "elastic" / "discover_hosts.sh"


def elastic_command(
    data: Path,
    run: Path,
    np_: int,
    epochs: int,
    *extra: str,
    discover: str | Path = DISCOVER,
    eval_test: bool = False,
) -> list[str]:
    """horovodrun of an elastic train.py on this machine (1 to 2 workers, hosts from
    ``discover``: a command line, Gloo over loopback); the final test evaluation only with
    ``eval_test``."""
    return [
        str(Path(sys.executable).with_name("horovodrun")),
        "-np",
        str(np_),
        "--min-np",
        "1",
        "--max-np",
        "2",
        "--host-discovery-script",
        str(discover),
        "--network-interface",
        "lo",
        "--gloo",
        sys.executable,
        "train.py",
        "--elastic",
        "--data",
        str(data),
        "--run-dir",
        str(run),
        "--epochs",
        str(epochs),
        "--commit-every",
        "4",
        *TINY_RECIPE,
        "--batch-size",
        "2",
        *([] if eval_test else ["--no-eval-test"]),
        *extra,
    ]


def wait_for_text(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> None:
    """Wait until ``text`` is in the log ``path`` of the running ``proc``."""
    deadline = time.monotonic() + timeout
    while text not in path.read_text(errors="replace"):
        assert proc.poll() is None, path.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"no '{text}' after {timeout} s"
        time.sleep(0.3)


def worker_on(host: str, run: Path) -> int:
    """pid of the training worker that Horovod started for ``host``."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        is_python = cmdline and cmdline[0].endswith(b"python") and b"train.py" in cmdline
        if (
            is_python
            and str(run).encode() in cmdline
            and f"HOROVOD_HOSTNAME={host}".encode() in environ
        ):
            return int(pid)
    raise AssertionError(f"no worker for {host}")


def run_elastic(data: Path, run: Path, np_: int, epochs: int, env: dict[str, str]):
    """:func:`elastic_command` run to its end (at most 10 minutes), output captured."""
    cmd = elastic_command(data, run, np_, epochs)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def horovodrun(np_: int, *argv: str, timeout: int = 600, env: dict | None = None):
    """Run ``python argv...`` on ``np_`` local ranks through horovodrun (Gloo)."""
    launcher = Path(sys.executable).with_name("horovodrun")  # installed by `make setup`
    cmd = [
        str(launcher),
        "-np",
        str(np_),
        "-H",
        f"localhost:{np_}",
        "--gloo",
        sys.executable,
        *argv,
    ]
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1", **(env or {})}
    return subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=full_env
    )


def python_script(*argv: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``python argv...`` from the repository, output captured (one process, no launcher)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1"}
    return subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)  # fmt: skip


# TensorFlow's own C++ log lines ("2026-01-01 10:00:00.000000: E external/...", absl's
# "E0000 00:00:..."): TF 2.18's CPU wheel logs failed CUDA probes at import, at E level.
TF_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d [\d:.]+: [EWIF] |[EWIF]\d{4} \d\d:\d\d:)")


def error_lines(stderr: str) -> list[str]:
    """The lines of ``stderr`` that report an error, TensorFlow's start-up log left out."""
    lines = stderr.splitlines()
    return [line for line in lines if "error" in line.lower() and not TF_LOG_LINE.match(line)]


def one_line(errors: list[str], *needles: str) -> str:
    """The last error a command reported (``reported_errors()``): one line, no traceback,
    naming every needle."""
    line = errors[-1]
    assert "\n" not in line and "Traceback" not in line, errors
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def history_row(epoch: int, **fields) -> HistoryRow:
    """A ``history.csv`` row for tests of what reads histories: plausible defaults,
    ``fields`` overriding them (val_micro_f1, world_size, gns_b_simple, ...)."""
    values = dict(
        lr=0.1,
        loss=0.5,
        val_loss=0.4,
        val_micro_f1=0.5,
        val_macro_f1=0.5,
        samples_per_s=1.0,
        data_wait_fraction=0.0,
        seconds=1.0,
        world_size=1,
    )
    return HistoryRow(epoch=epoch, **{**values, **fields})


def pooled_linear(input_shape, num_classes, *, name: str = "pooled_linear", **_) -> tf.keras.Model:
    """A model without BatchNorm (per-band means -> dense logits): each sample's gradient is
    its own, so per-example gradients give the gradient noise scale exactly."""
    import tensorflow as tf

    inputs = tf.keras.Input(shape=(None, None, input_shape[-1]))  # any patch size
    pooled = tf.keras.layers.GlobalAveragePooling2D()(inputs)
    logits = tf.keras.layers.Dense(num_classes, kernel_initializer="glorot_uniform")(pooled)
    return tf.keras.Model(inputs, logits, name=name)


def pixel_linear(input_shape, num_classes, *, name: str = "pixel_linear", dense_head=False, **_):
    """:func:`pooled_linear` with a dense head of its own (a 1x1 conv of the pixels, no
    BatchNorm either): a 2-rank step is then exactly a 1-rank step on the whole batch."""
    import tensorflow as tf

    from bigearthnet import models

    inputs = tf.keras.Input(shape=(None, None, input_shape[-1]))
    pooled = tf.keras.layers.GlobalAveragePooling2D()(inputs)
    logits = tf.keras.layers.Dense(num_classes, name=models.PATCH_HEAD)(pooled)
    if not dense_head:
        return tf.keras.Model(inputs, logits, name=name)
    pixels = tf.keras.layers.Conv2D(models.PIXEL_CLASSES, 1, name=models.PIXEL_HEAD)(inputs)
    return tf.keras.Model(inputs, {models.PATCH_HEAD: logits, models.PIXEL_HEAD: pixels}, name=name)


def pooled_linear_replica(
    *,
    batch_size: int,
    passes: int,
    lr: float,
    gns_decay: float = 0.99,
    pixel_loss_weight: float = 0.0,
):
    """A :class:`~bigearthnet.training.replica.Replica` of :func:`pooled_linear` (with
    ``pixel_loss_weight``: :func:`pixel_linear`; registered for the call) with plain SGD, no
    augmentation: its update is a fixed function of its batches."""
    from bigearthnet import models
    from bigearthnet.core.config import TrainConfig
    from bigearthnet.formats.model_inputs import ModelInputs
    from bigearthnet.training.replica import Replica
    from bigearthnet.training.schedules import LRSchedule

    models.MODELS.setdefault("pooled_linear", pooled_linear)
    models.MODELS.setdefault("pixel_linear", pixel_linear)
    cfg = TrainConfig(
        data="d",
        run_dir="r",
        model="pixel_linear" if pixel_loss_weight else "pooled_linear",
        batch_size=batch_size,
        backward_passes_per_step=passes,
        optimizer="sgd",
        momentum=0.0,
        lr=lr,
        augment=False,
        gns_decay=gns_decay,
        seed=1,
        pixel_loss_weight=pixel_loss_weight,
    )
    schedule = LRSchedule(
        base_lr=lr,
        world_size=1,
        steps_per_epoch=1,
        total_epochs=1,
        warmup_epochs=0,
        kind="constant",
    )
    bands = len(SYNTHETIC_BAND_MEANS)
    inputs = ModelInputs(
        bands=constants.BANDS,
        mean=(1000.0,) * bands,
        std=(300.0,) * bands,
        channel_scale=(1.0,) * bands,
        channel_offset=(0.0,) * bands,
        resampling="bilinear",
        classes=tuple(f"class {c}" for c in range(SYNTHETIC_CLASSES)),
    )
    return Replica(cfg, inputs=inputs, schedule=schedule)


SYNTHETIC_CLASSES = 5
SYNTHETIC_BAND_MEANS = np.linspace(600, 1400, 12)


def synthetic_batch(count: int, *, seed: int, size: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """``count`` small uint16 images whose band levels decide their labels (noisily): a
    fixed function of ``seed``."""
    rng = np.random.default_rng(seed)
    levels = rng.normal(SYNTHETIC_BAND_MEANS, 300.0, size=(count, 1, 1, len(SYNTHETIC_BAND_MEANS)))
    images = levels + rng.normal(0.0, 50.0, size=(count, size, size, len(SYNTHETIC_BAND_MEANS)))
    scores = levels[:, 0, 0, :SYNTHETIC_CLASSES] - SYNTHETIC_BAND_MEANS[:SYNTHETIC_CLASSES]
    labels = (scores + rng.normal(0.0, 200.0, size=scores.shape)) > 0
    return np.clip(images, 0, 65535).astype(np.uint16), labels.astype(np.uint8)


def study_result(batch: int, steps: int | None, *, diverged: bool = False):
    """A batch-size study's row with ``steps`` to the target (None: not reached)."""
    from bigearthnet.scaling.study_outputs import StudyResult

    return StudyResult(
        global_batch=batch,
        optimizer="lamb",
        peak_lr=0.01,
        steps_to_target=steps,
        epochs_to_target=None,
        best_val_micro_f1=0.8 if steps else 0.3,
        diverged=diverged,
        mean_b_simple=20.0,
        late_b_simple=25.0 + batch / 1000,
        samples_per_s_per_rank=50.0,
    )


def torch_state_dict(model: tf.keras.Model, *, prefix: str = "") -> dict[str, np.ndarray]:
    """A Keras ResNet of the registry written as the timm/torchvision state dict it would
    be imported from (the inverse of bigearthnet.weights.convert; biases must be zero), so
    tests make published-style files of any size without PyTorch."""
    from bigearthnet.weights import convert

    bottleneck = any(layer.name.endswith("_3_conv") for layer in model.layers)
    blocks = tuple(
        len({layer.name.split("_")[1] for layer in model.layers
             if layer.name.startswith(f"conv{stage + 2}_block")})
        for stage in range(4)
    )  # fmt: skip
    layout = convert.Layout("", blocks, bottleneck, 0, (), 0, None)
    out: dict[str, np.ndarray] = {}
    for torch_name, keras_name, kind in convert.layer_names(layout):
        try:
            weights = model.get_layer(keras_name).get_weights()
        except ValueError:
            continue  # a block without a projection shortcut
        if kind.startswith("conv"):
            out[f"{torch_name}.weight"] = weights[0].transpose(3, 2, 0, 1).copy()
        else:
            gamma, beta, mean, var = weights
            var = var + convert.KERAS_BN_EPSILON - 1e-5
            for name, value in zip(convert.BN_PARAMS, (gamma, beta, mean, var)):
                out[f"{torch_name}.{name}"] = value
            out[f"{torch_name}.num_batches_tracked"] = np.array(0, np.int64)
    if any(layer.name == "logits" for layer in model.layers):
        kernel, bias = model.get_layer("logits").get_weights()
        out["fc.weight"], out["fc.bias"] = kernel.T.copy(), bias
    return {prefix + key: np.ascontiguousarray(value) for key, value in out.items()}


# Two float32 computations of one network (AVX-512 or AVX2 kernels, TensorFlow, ONNX Runtime
# or PyTorch, another batch split) sum in another order: they differ by a few ulps of the
# largest partial sums, i.e. relative to the output's scale, never by a fixed amount.
FLOAT32_RTOL = 1e-4


def assert_close_to_scale(actual, expected, rtol: float = FLOAT32_RTOL) -> None:
    """``actual`` equals ``expected`` (logits, features) to ``rtol`` of the largest
    magnitude in ``expected``: the scale that bounds a float32 network's rounding."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    allowed = rtol * max(float(np.abs(expected).max()), np.finfo(np.float32).tiny)
    worst = float(np.abs(actual - expected).max())
    assert worst <= allowed, f"differ by {worst:.3g}, more than {rtol} of the scale ({allowed:.3g})"


def assert_scores_close(actual, expected, rtol: float = FLOAT32_RTOL) -> None:
    """Sigmoid scores from two float32 computations of the same logits: the logits may differ
    by ``rtol`` of their scale, and a score by that times the sigmoid's slope p(1 - p) there
    (a saturated score hardly moves), plus float32's rounding of a score near 1."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    eps = float(np.finfo(np.float32).eps)
    clipped = np.clip(expected, eps, 1 - eps)
    logit_scale = max(float(np.abs(np.log(clipped / (1 - clipped))).max()), 1.0)
    slope = np.maximum(actual * (1 - actual), expected * (1 - expected))
    allowed = slope * rtol * logit_scale + 2 * eps
    excess = np.abs(actual - expected) - allowed
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    assert excess[worst] <= 0, (
        f"score {actual[worst]:.7g} vs {expected[worst]:.7g} at {worst}: beyond {rtol} of the "
        f"logit scale {logit_scale:.3g} through the sigmoid's slope"
    )


def copy_scene(scene: Path, folder: Path) -> Path:
    """``scene`` copied into ``folder`` (a STAC item with its assets beside it)."""
    import shutil

    source = scene.parent.parent if scene.suffix == ".json" else scene
    shutil.copytree(source, folder / source.name)
    return folder / scene.relative_to(source.parent)


def declare_nodata(form: str, scene: Path, value: int) -> None:
    """Store ``value`` where ``scene`` has no data (0), declared as its form declares it:
    the item's raster:bands (its COGs still say 0), the Zarr arrays' _FillValue, the
    GeoTIFFs' GDAL nodata."""
    import json

    import rasterio
    import zarr

    from bigearthnet.core import constants
    from bigearthnet.formats import s2_layouts as layout

    if form == "zarr":
        root = zarr.open_group(scene, mode="r+")
        for band in constants.BANDS:
            array = root[layout.zarr_band(band)]
            values = array[:]
            array[:] = np.where(values == 0, value, values)
            array.attrs["_FillValue"] = value
        return
    item = json.loads(scene.read_text()) if form == "stac" else None
    files = {key: scene.parent / a["href"] for key, a in item["assets"].items()} if item else {
        path.stem: path for path in scene.glob("B*.tif")}  # fmt: skip
    for key, file in files.items():
        if key.upper() == layout.SCL:
            continue
        with rasterio.open(file) as src:
            values, profile, scales = src.read(1), src.profile, (src.scales, src.offsets)
        profile.update(nodata=profile["nodata"] if item else value)
        file.unlink()
        with rasterio.open(file, "w", **profile) as dst:
            dst.write(np.where(values == 0, value, values).astype(values.dtype), 1)
            dst.scales, dst.offsets = scales
        if item:
            item["assets"][key]["raster:bands"][0]["nodata"] = value
    if item:
        scene.write_text(json.dumps(item))


class Killed(BaseException):
    """What a SIGKILL does to a replacement: it stops there, and no handler runs."""


def kill_swap_at(monkeypatch, step: str, old: Callable[[Path], bool]) -> None:
    """Make core.swap's renames and removals stop (:class:`Killed`) at ``step``: "rename N"
    (before its Nth rename), "remove the old" (before it removes what ``old`` says is the
    old), anything else: nowhere. The renames and removals of everything else go on."""
    import os
    import shutil

    from bigearthnet.core import swap

    real_rename, real_rmtree, renames = os.rename, shutil.rmtree, []

    def rename(src, dst):
        renames.append(dst)
        if step == f"rename {len(renames)}":
            raise Killed
        real_rename(src, dst)

    def rmtree(path, *args, **kwargs):
        if step == "remove the old" and old(Path(path)):
            raise Killed
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(swap.os, "rename", rename)
    monkeypatch.setattr(swap.shutil, "rmtree", rmtree)
