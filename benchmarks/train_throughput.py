"""P3: end-to-end train.py throughput on 1 rank against plain Keras ``model.fit``.

Side by side, runs interleaved, the same model (ResNet-50 from the registry), batch, optimizer
(SGD with momentum), thread count (1) and data (the train split, in memory):

* ``train.py`` as a user runs it: the rank's pipeline, normalisation and augmentation in
  the step, the Horovod allreduce (1 rank), loss/stop agreement, history and checkpoints;
* plain Keras: ``model.fit`` on in-memory float32 tensors, normalised beforehand, no
  augmentation, no Horovod.

Each run's rate is the median over its epochs after the first (which traces graphs and
warms up). Knobs are measured the same way against the train.py default, in the first
``--knob-repeats`` repetitions: XLA (``--xla``) and mixed precision
(``--amp``; float16 has no fast path on this CPU, it is a GPU knob). ``dense`` (P3-dense)
pairs two runs of its own on the same v2 shards with reference maps: the dense head on
(their default) and off (``--pixel-loss-weight 0``).

``--other-python`` (``make bench-stacks``): the same two runs with the other TensorFlow
stack's interpreter too (e.g. ``.venv-tf2.18/bin/python``), interleaved with this one's:
P3 on each stack and K-stack, the other stack's train.py rate over this one's.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import common
from common import Figure

KNOBS = {"xla": ["--xla"], "amp": ["--amp"], "dense": []}
DENSE = {"dense head": [], "dense head off": ["--pixel-loss-weight", "0"]}  # on v2 shards


def keras_rate(data: Path, threads: int = 1, python: str = common.PYTHON) -> float:
    """Run the Keras baseline in a fresh process; its epoch-2 samples/s."""
    argv = [str(Path(__file__)), "--keras-worker", "--data", str(data), "--threads", str(threads)]
    result = common.launch(1, argv, python=python).check("Keras baseline")
    return float(json.loads(result.stdout.strip().splitlines()[-1])["samples_per_s"])


def keras_worker(data: Path, threads: int) -> None:
    """The baseline itself (runs in its own process): prints {"samples_per_s": ...}."""
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(min(2, threads))
    from bigearthnet import models
    from bigearthnet.data.normalization import band_stats
    from bigearthnet.data.rank_data import RankData
    from bigearthnet.formats.manifest import read_manifest

    manifest = read_manifest(data)
    part = RankData(data, manifest, "train", labels=19, cache="memory", verify=False)
    mean, std = band_stats(manifest)
    images, labels, *_ = part.take(np.arange(len(part)))
    x = tf.constant((images.astype(np.float32) - mean) / std)
    y = tf.constant(labels.astype(np.float32))
    tf.keras.utils.set_random_seed(42)
    model = models.get_model("resnet50", manifest.image_shape, 19)
    model.compile(
        optimizer=tf.keras.optimizers.legacy.SGD(learning_rate=0.001, momentum=0.9),
        loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
    )
    timer = epoch_timer()
    model.fit(
        x,
        y,
        batch_size=common.TRAIN_BATCH,
        epochs=common.TRAIN_EPOCHS,
        shuffle=True,
        verbose=0,
        callbacks=[timer],
    )
    rate = common.median([len(part) / s for s in timer.seconds[1:]])  # as train_run
    print(json.dumps({"samples_per_s": rate}), flush=True)


def epoch_timer():
    """A Keras callback whose ``seconds`` lists each epoch's wall time (TF imported late)."""
    import tensorflow as tf

    class EpochTimer(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seconds: list[float] = []

        def on_epoch_begin(self, epoch, logs=None):
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self._start)

    return EpochTimer()


def run(args, work: Path) -> list[Figure]:
    data = common.train_shards(work)
    results: dict[str, list[dict]] = {}

    def train_variant(name: str, extra: list[str], python: str = common.PYTHON, shards=data):
        def measure(rep: int) -> float:
            run_dir = work / f"p3-{name.replace(' ', '-')}-{rep}"
            out = common.train_run(shards, run_dir, 1, extra, f"train.py {name}", python=python)
            results.setdefault(name, []).append(out)
            return out["samples_per_s"]

        return measure

    variants = {"train.py": train_variant("default", []), "keras fit": lambda rep: keras_rate(data)}
    other = str(args.other_python) if args.other_python else None
    if other:
        variants["train.py other"] = train_variant("other", [], python=other)
        variants["keras fit other"] = lambda rep: keras_rate(data, python=other)
    limit = {}
    for knob in args.knobs:
        if knob == "dense":
            maps = common.train_shards(work, layout="v2")
            for name, extra in DENSE.items():
                variants[name] = train_variant(name, extra, shards=maps)
                limit[name] = args.knob_repeats
        else:
            variants[knob] = train_variant(knob, KNOBS[knob])
            limit[knob] = args.knob_repeats
    common.say(f"P3: ResNet-50, batch {common.TRAIN_BATCH}, 1 rank x 1 thread, knobs {args.knobs}")
    rates = common.interleave(variants, args.repeats, common.say, limit=limit)
    details = {name: values for name, values in rates.items()}
    figures = [
        Figure(
            "P3",
            "train.py samples/s / Keras model.fit, 1 rank, ResNet-50",
            common.paired_ratio(rates["train.py"], rates["keras fit"]),
            "x",
            ">=",
            0.95,
            "forward+backward+update; in-step augmentation ~2 % of a step, the rest is noise "
            "of the shared machine (per-step costs equal in-process, see README)",
            details,
        ),
    ]
    notes = {
        "xla": "XLA on CPU: forward and backward as one cluster (allreduce, update outside)",
        "amp": "float16 is emulated on this CPU (no AVX512-FP16): a GPU knob",
    }
    if other:
        figures += stack_figures(rates, this=stack_of(common.PYTHON), other=stack_of(other))
    if "dense" in args.knobs:
        figures.append(
            Figure(
                "P3-dense",
                "train.py samples/s with the dense head / without it (--pixel-loss-weight 0), "
                "1 rank, ResNet-50, batch 8, v2 shards with maps",
                common.paired_ratio(rates["dense head"], rates["dense head off"]),
                "x",
                ">=",
                0.8,
                "the decoder (1x1 laterals, one 3x3 conv at stride 4, 64 channels) and the "
                "per-pixel softmax cross-entropy over 120 x 120 x 19 logits, forward and back",
                {name: rates[name] for name in DENSE},
            )
        )
    for knob in (k for k in args.knobs if k != "dense"):
        figures.append(
            common.knob_figure(
                f"K-{knob}",
                f"knob --{knob} / default: train.py samples/s, 1 rank",
                rates[knob],
                rates["train.py"],
                notes[knob],
            )
        )
    return figures


def stack_of(python: str) -> str:
    """The TensorFlow version an interpreter imports (for the figures' labels)."""
    code = "import os; os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'; import bigearthnet, "
    code += "tensorflow as tf; print(tf.__version__)"
    result = common.run([python, "-c", code]).check(f"{python}: TensorFlow version")
    return "TF " + result.stdout.strip().splitlines()[-1]


def stack_figures(rates: dict[str, list[float]], *, this: str, other: str) -> list[Figure]:
    """P3 on the other stack, and the other stack's train.py rate over this one's."""
    return [
        Figure(
            "P3-other",
            f"train.py samples/s / Keras model.fit, 1 rank, ResNet-50, on {other}",
            common.paired_ratio(rates["train.py other"], rates["keras fit other"]),
            "x",
            ">=",
            0.95,
            "as P3, with the other stack's TensorFlow and Horovod",
        ),
        Figure(
            "K-stack",
            f"train.py samples/s on {other} / on {this}, 1 rank, ResNet-50",
            common.paired_ratio(rates["train.py other"], rates["train.py"]),
            "x",
            limited_by="the two TensorFlow builds' oneDNN kernels (same model, data and steps)",
        ),
    ]


def build_parser():
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.set_defaults(repeats=3)
    common.add_knob_arguments(parser, KNOBS, "knobs")
    parser.add_argument(
        "--other-python",
        type=Path,
        help="also measure with this interpreter (the other TensorFlow stack's venv)",
    )
    parser.add_argument("--keras-worker", action="store_true", help="(internal) the baseline")
    parser.add_argument("--data", type=Path, help="(internal) shards for --keras-worker")
    parser.add_argument("--threads", type=int, default=1, help="(internal) TF threads")
    return parser


if __name__ == "__main__":
    if "--keras-worker" in sys.argv:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        cli = build_parser().parse_args()
        keras_worker(cli.data, cli.threads)
        raise SystemExit(0)
    raise SystemExit(common.run_cli(build_parser(), run))
