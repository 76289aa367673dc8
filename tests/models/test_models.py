"""Tests for the model registry, the ResNets' architecture and the tiny CNN's ability to learn."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bigearthnet.core.constants import BANDS, PATCH_SIZE
from bigearthnet.models import (
    DENSE_CONTEXT,
    MODELS,
    PATCH_HEAD,
    PIXEL_HEAD,
    available_models,
    count_parameters,
    get_model,
    has_dense_head,
    is_head_layer,
    split_outputs,
)

INPUT_SHAPE = (PATCH_SIZE, PATCH_SIZE, len(BANDS))  # (120, 120, 12)
N_BANDS = len(BANDS)


@pytest.fixture(autouse=True)
def _clear_keras_session():
    """Free each test's graphs and layer-name counters so later tests start clean."""
    yield
    tf.keras.backend.clear_session()


# --- registry ---------------------------------------------------------------------------------


def test_available_models_lists_the_registry():
    assert available_models() == sorted(MODELS)
    assert {"resnet18", "resnet50", "tiny"} <= set(available_models())


def test_unknown_name_raises_value_error_listing_all_names():
    with pytest.raises(ValueError) as excinfo:
        get_model("resnet51")
    message = str(excinfo.value)
    assert "\n" not in message  # the CLI prints it as-is, on one line
    assert "resnet51" in message
    for name in available_models():
        assert name in message


def test_count_parameters_counts_trainable_and_non_trainable():
    model = get_model("tiny", input_shape=(16, 16, N_BANDS), num_classes=3)
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    frozen = sum(int(np.prod(w.shape)) for w in model.non_trainable_weights)
    assert frozen > 0  # BN moving statistics
    assert count_parameters(model) == trainable + frozen


def test_regularisation_and_dropout_kwargs():
    plain = get_model("resnet18")
    model = get_model("resnet18", dropout=0.3, weight_decay=1e-4)
    kernels = [w for w in model.trainable_weights if "kernel" in w.name]
    assert len(plain.losses) == 0
    assert len(model.losses) == len(kernels)  # one L2 term per conv/dense kernel, nothing else
    assert model.get_layer("head_dropout").rate == pytest.approx(0.3)
    assert count_parameters(model) == count_parameters(plain)
    with pytest.raises(ValueError):
        get_model("tiny", dropout=1.0)


# --- architecture: parameter counts -----------------------------------------------------------


@pytest.fixture(scope="module")
def keras_resnet50_backbone_params() -> int:
    """Parameters of keras.applications' ResNet-50 without its head, for 12-band 120x120 input."""
    reference = tf.keras.applications.ResNet50(
        weights=None, include_top=False, input_shape=INPUT_SHAPE, pooling="avg"
    )
    count = reference.count_params()
    del reference
    tf.keras.backend.clear_session()
    return count


@pytest.mark.filterwarnings("ignore:This model usually expects:UserWarning")
@pytest.mark.parametrize("num_classes", [19, 43])
def test_resnet50_matches_keras_applications(keras_resnet50_backbone_params, num_classes):
    model = get_model("resnet50", input_shape=INPUT_SHAPE, num_classes=num_classes)
    head = 2048 * num_classes + num_classes
    print(f"resnet50, {num_classes} classes: {count_parameters(model):,} parameters")
    assert count_parameters(model) == keras_resnet50_backbone_params + head


def _resnet18_params(bands: int, num_classes: int) -> int:
    """ResNet-18's parameter count as Keras counts it, layer by layer from the architecture.

    Every conv has a bias (as in keras.applications) and every BN layer 4 weights per channel
    (gamma, beta, moving mean, moving variance).
    """

    def conv_bn(kernel: int, c_in: int, c_out: int) -> int:
        return kernel * kernel * c_in * c_out + c_out + 4 * c_out

    total = conv_bn(7, bands, 64)  # stem
    c_in = 64
    for width in (64, 128, 256, 512):
        total += conv_bn(3, c_in, width) + conv_bn(3, width, width)  # block 1
        if c_in != width:
            total += conv_bn(1, c_in, width)  # projection shortcut
        total += 2 * conv_bn(3, width, width)  # block 2
        c_in = width
    return total + 512 * num_classes + num_classes  # dense head


def test_resnet18_formula_agrees_with_the_published_figure():
    # torchvision's resnet18 (3 bands, 1000 classes) has 11,689,512 parameters, but its convs
    # have no bias and its count leaves out BN running statistics. Its convs and BN layers have
    # 4,800 output channels in all: add one bias and two BN statistics for each.
    torchvision_resnet18 = 11_689_512
    assert _resnet18_params(3, 1000) == torchvision_resnet18 + 4_800 + 2 * 4_800
    model = get_model("resnet18", input_shape=(224, 224, 3), num_classes=1000)
    assert count_parameters(model) == _resnet18_params(3, 1000)


@pytest.mark.parametrize("num_classes", [19, 43])
def test_resnet18_parameter_count(num_classes):
    model = get_model("resnet18", input_shape=INPUT_SHAPE, num_classes=num_classes)
    print(f"resnet18, {num_classes} classes: {count_parameters(model):,} parameters")
    assert count_parameters(model) == _resnet18_params(N_BANDS, num_classes)


def test_tiny_is_tiny():
    model = get_model("tiny", input_shape=INPUT_SHAPE, num_classes=43)
    print(f"tiny, 43 classes: {count_parameters(model):,} parameters")
    assert count_parameters(model) < 100_000


# --- every registered model: shapes, dtypes, one training step --------------------------------


# ResNet-50's training step costs 24 s of the fast tier (its graph traced); the heavy tier
# trains it for real (test_precise_bn.py, test_bundle.py), so here it is slow.
ONE_STEP_MODELS = [
    pytest.param(name, marks=pytest.mark.slow) if name == "resnet50" else name
    for name in available_models()
]


@pytest.mark.parametrize("name", ONE_STEP_MODELS)
def test_model_trains_one_step(name):
    num_classes, batch = 19, 2
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, *INPUT_SHAPE)).astype("float32")
    y = (rng.random((batch, num_classes)) < 0.3).astype("float32")
    model = get_model(name, input_shape=INPUT_SHAPE, num_classes=num_classes, weight_decay=1e-4)
    assert model.name == name

    logits = model(x, training=False)
    assert logits.shape == (batch, num_classes)
    assert logits.dtype == tf.float32

    model.compile(
        optimizer=tf.keras.optimizers.SGD(0.01),
        loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
    )
    loss = model.train_on_batch(x, y)
    assert np.isfinite(loss)


@pytest.mark.parametrize("name", available_models())
def test_logits_stay_float32_under_mixed_precision(name):
    # A small input keeps float16 convolutions (slow on CPU) cheap; the dtypes do not depend on it.
    model = get_model(name, input_shape=(64, 64, N_BANDS), num_classes=19, policy="mixed_float16")
    assert model.get_layer("conv1_conv").compute_dtype == "float16"  # the policy is in effect
    logits = model(np.zeros((1, 64, 64, N_BANDS), "float32"), training=False)
    assert logits.dtype == tf.float32
    assert model.output.dtype == tf.float32


def test_a_policy_applies_to_its_model_only():
    """The process's global policy neither leaks into a model nor is changed by building one:
    a --amp bf16 training in-process once made later models compute in bfloat16."""
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        plain = get_model("tiny", input_shape=(32, 32, N_BANDS), num_classes=19)
        assert {layer.compute_dtype for layer in plain.layers} == {"float32"}
        half = get_model(
            "tiny", input_shape=(32, 32, N_BANDS), num_classes=19, policy="mixed_float16"
        )
        assert "float16" in {layer.compute_dtype for layer in half.layers}
        assert tf.keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")


# --- the dense head ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", available_models())
def test_the_dense_head_adds_named_per_pixel_logits_and_nothing_else(name):
    """With the head: two named outputs, per-pixel logits of the 19 classes at the input's
    size (also for 43 labels); without: the very model of before, layer for layer. Every
    layer the head adds is a head layer (what --init-weights leaves random where the
    source lacks it and --freeze-backbone leaves trainable)."""
    shape = (64, 64, N_BANDS)  # small: the shapes, not the cost, are checked
    plain = get_model(name, input_shape=shape, num_classes=43)
    tf.keras.backend.clear_session()
    dense = get_model(name, input_shape=shape, num_classes=43, dense_head=True)
    assert not has_dense_head(plain) and has_dense_head(dense)
    out = dense(np.zeros((2, *shape), "float32"), training=False)
    assert sorted(out) == sorted([PATCH_HEAD, PIXEL_HEAD])
    logits, pixels = split_outputs(out)
    assert logits.shape == (2, 43) and pixels.shape == (2, 64, 64, 19)
    assert pixels.dtype == tf.float32
    assert split_outputs(plain(np.zeros((1, *shape), "float32")))[1] is None
    plain_layers = [(layer.name, [w.shape for w in layer.weights]) for layer in plain.layers]
    shared = [(layer.name, [w.shape for w in layer.weights]) for layer in dense.layers
              if layer.name in dict(plain_layers)]  # fmt: skip
    assert sorted(shared) == sorted(plain_layers)  # the encoder and classifier, unchanged
    added = {layer.name for layer in dense.layers} - {name for name, _ in plain_layers}
    assert added and all(is_head_layer(layer) for layer in added)
    assert not any(is_head_layer(layer) for layer, _ in plain_layers if layer != PATCH_HEAD)


def test_the_dense_head_learns_where_each_class_is():
    """Per-pixel cross-entropy on the tiny model's dense head: pixel accuracy on held-out
    images rises from ~0 (19 outputs, 3 classes used) to most pixels right: it maps where
    each class is, not just which classes there are."""
    tf.keras.utils.set_random_seed(1)
    rng = np.random.default_rng(1)
    signatures = rng.choice([-2.0, 2.0], size=(3, N_BANDS))

    def images_and_maps(n):
        maps = np.zeros((n, 32, 32), np.int64)
        for i in range(n):
            row, col = rng.integers(4, 28, size=2)
            maps[i, :row] = 1
            maps[i, row:, col:] = 2
        x = rng.normal(size=(n, 32, 32, N_BANDS)).astype("float32") + signatures[maps]
        return x.astype("float32"), maps

    x_train, m_train = images_and_maps(128)
    x_test, m_test = images_and_maps(32)
    model = get_model("tiny", input_shape=(32, 32, N_BANDS), num_classes=3, dense_head=True)
    optimizer = tf.keras.optimizers.Adam(1e-2)

    @tf.function
    def step(x, maps):
        with tf.GradientTape() as tape:
            pixels = split_outputs(model(x, training=True))[1]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(maps, pixels))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    def accuracy() -> float:
        pixels = split_outputs(model(x_test, training=False))[1].numpy()
        return float(np.mean(pixels.argmax(-1) == m_test))

    before = accuracy()
    for _ in range(6):
        for start in range(0, 128, 32):
            step(x_train[start : start + 32], m_train[start : start + 32])
    after = accuracy()
    print(f"tiny dense head held-out pixel accuracy: {before:.3f} -> {after:.3f}")
    assert before < 0.6 and after > 0.85


@pytest.mark.parametrize("name", ["tiny", "resnet18"])
def test_pixel_logits_stay_float32_under_mixed_precision(name):
    model = get_model(
        name, input_shape=(64, 64, N_BANDS), num_classes=19, dense_head=True, policy="mixed_float16"
    )
    assert model.get_layer("decoder_smooth").compute_dtype == "float16"
    logits, pixels = split_outputs(model(np.zeros((1, 64, 64, N_BANDS), "float32")))
    assert logits.dtype == tf.float32 and pixels.dtype == tf.float32


# --- the tiny CNN learns ----------------------------------------------------------------------

F1_THRESHOLD = 0.9
"""Held-out micro-F1 the tiny CNN must exceed. Predicting every label scores about 0.67 here
(2p / (1 + p) with p = 0.5), the untrained model 0.3-0.6, and training on shuffled labels about
0.45 (it memorises the training set but learns nothing that transfers), while the real run
reaches about 1.0 after 5 epochs for every seed tried (0-6)."""


def _spectral_dataset(
    n: int, signatures: np.ndarray, rng: np.random.Generator, size: int = 32, region: int = 12
) -> tuple[np.ndarray, np.ndarray]:
    """Noise images where each present class adds its per-band offset in a random square."""
    n_classes, bands = signatures.shape
    x = rng.normal(size=(n, size, size, bands)).astype("float32")
    y = (rng.random((n, n_classes)) < 0.5).astype("float32")
    for i in range(n):
        for k in np.flatnonzero(y[i]):
            row, col = rng.integers(0, size - region + 1, size=2)
            x[i, row : row + region, col : col + region] += signatures[k]
    return x, y


def _micro_f1(y_true: np.ndarray, logits: np.ndarray) -> float:
    predicted, actual = logits > 0, y_true > 0.5  # logit 0 = probability 0.5
    tp = np.sum(predicted & actual)
    return float(2 * tp / (2 * tp + np.sum(predicted & ~actual) + np.sum(~predicted & actual)))


# Seeded Keras 2.15 initialisers call random.randint(1, 1e9) (keras/src/backend.py), which
# Python 3.10+ deprecates; the warning is Keras's, not ours.
@pytest.mark.filterwarnings("ignore:non-integer arguments to randrange:DeprecationWarning")
def test_tiny_learns_spectral_signatures():
    tf.keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    signatures = rng.choice([-1.0, 1.0], size=(4, N_BANDS))  # one distinct signature per class
    x_train, y_train = _spectral_dataset(256, signatures, rng)
    x_test, y_test = _spectral_dataset(128, signatures, rng)
    assert _micro_f1(y_test, np.ones_like(y_test)) < F1_THRESHOLD  # the trivial answer fails

    model = get_model("tiny", input_shape=x_train.shape[1:], num_classes=4)
    model.compile(
        optimizer=tf.keras.optimizers.Adam(1e-2),
        loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
    )
    before = _micro_f1(y_test, model.predict(x_test, verbose=0))
    model.fit(x_train, y_train, batch_size=32, epochs=5, verbose=0)
    after = _micro_f1(y_test, model.predict(x_test, verbose=0))
    print(f"tiny held-out micro-F1: {before:.3f} untrained -> {after:.3f} after 5 epochs")
    assert before < F1_THRESHOLD
    assert after > F1_THRESHOLD


def _reach(model: tf.keras.Model, size: int, phase: int) -> list[int]:
    """How far (px: up, down, left, right) the dense head's logits of the pixel at
    ``phase`` within the stride of 32 reach into the input: where the gradient of its
    logits is not zero (random weights and inputs: no ReLU is dead everywhere)."""
    pixels = tf.keras.Model(model.input, model.get_layer(PIXEL_HEAD).output)
    centre = (size // 2 - 16) // 32 * 32 + phase
    image = tf.constant(np.random.default_rng(phase).normal(size=(1, size, size, N_BANDS)),
                        tf.float32)  # fmt: skip
    with tf.GradientTape() as tape:
        tape.watch(image)
        logits = pixels(image, training=False)[0, centre, centre]
    seen = np.abs(tape.gradient(logits, image).numpy()[0]).sum(axis=-1) > 0
    rows, cols = np.nonzero(seen.any(axis=1))[0], np.nonzero(seen.any(axis=0))[0]
    assert rows[0] > 0 and cols[0] > 0 and rows[-1] < size - 1 and cols[-1] < size - 1
    return [centre - rows[0], rows[-1] - centre, centre - cols[0], cols[-1] - centre]


# ResNet-50's value is not measured here (32 gradients: ~2 min of CI's heavy tier): its
# margin is proven where it matters, by tests/maps/test_scene_pixels.py's seam test (no
# stored step moves past it; half of it moves 250 steps).
@pytest.mark.slow  # 32 gradients a model: ~2 s (tiny), ~1 min (ResNet-18) on 2 cores
@pytest.mark.parametrize("name", [n for n in available_models() if n != "resnet50"])
def test_the_dense_context_is_the_receptive_fields_half_width(name):
    """DENSE_CONTEXT (what a 10 m map's margin follows, maps/scene/tiles.py) is the
    farthest the logits of a pixel reach, over the 32 positions of a pixel within the
    encoders' stride: more would waste window, less would leave seams."""
    context = DENSE_CONTEXT[name]
    size = -(-(2 * context + 34) // 32) * 32  # the reach inside the input on both sides
    tf.keras.utils.set_random_seed(0)
    model = get_model(name, (size, size, N_BANDS), 19, dense_head=True)
    assert max(max(_reach(model, size, phase)) for phase in range(32)) == context
