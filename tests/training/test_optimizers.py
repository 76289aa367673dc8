"""The large-batch optimizers against NumPy transcriptions of the papers' update rules, and
by training."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import TINY_RECIPE

import train
from bigearthnet.core.config import TrainConfig
from bigearthnet.core.errors import ConfigError
from bigearthnet.core.optimizer_table import OPTIMIZERS
from bigearthnet.formats.history import read_history
from bigearthnet.training import optimizers

STEPS = 5
LR, WD, MOMENTUM, ETA = 0.05, 0.01, 0.9, 0.02


def _norm(x: np.ndarray) -> float:
    return float(np.sqrt(np.sum(x.astype(np.float64) ** 2)))


def _ratio(num: float, den: float) -> float:
    return num / den if num > 0 and den > 0 else 1.0


class LambReference:
    """You et al. 2020, Algorithm 2 (phi = identity); ``trust=False`` is AdamW."""

    def __init__(self, eps: float, *, trust: bool) -> None:
        self.eps, self.trust, self.t = eps, trust, 0
        self.m: dict[int, np.ndarray] = {}
        self.v: dict[int, np.ndarray] = {}

    def step(self, weights: list[np.ndarray], grads: list[np.ndarray]) -> None:
        self.t += 1
        b1, b2 = optimizers.BETA_1, optimizers.BETA_2
        for i, (w, g) in enumerate(zip(weights, grads)):
            self.m[i] = b1 * self.m.get(i, 0) + (1 - b1) * g
            self.v[i] = b2 * self.v.get(i, 0) + (1 - b2) * g * g
            m_hat = self.m[i] / (1 - b1**self.t)
            v_hat = self.v[i] / (1 - b2**self.t)
            u = m_hat / (np.sqrt(v_hat) + self.eps)
            ratio = 1.0
            if w.ndim > 1:  # BatchNorm parameters and biases: no decay, no trust ratio
                u = u + WD * w
                ratio = _ratio(_norm(w), _norm(u)) if self.trust else 1.0
            w -= LR * ratio * u


class LarsReference:
    """You, Gitman & Ginsburg 2017, Algorithm 1."""

    def __init__(self) -> None:
        self.velocity: dict[int, np.ndarray] = {}

    def step(self, weights: list[np.ndarray], grads: list[np.ndarray]) -> None:
        for i, (w, g) in enumerate(zip(weights, grads)):
            local_lr = 1.0
            if w.ndim > 1:
                local_lr = _ratio(ETA * _norm(w), _norm(g) + WD * _norm(w))
                g = g + WD * w
            self.velocity[i] = MOMENTUM * self.velocity.get(i, 0) + LR * local_lr * g
            w -= self.velocity[i]


def _problem(seed: int = 0) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    """A kernel, a bias (rank 1: excluded), a zero kernel (trust ratio 1) and a kernel
    whose gradient is zero at one step; gradients of different scales per layer."""
    rng = np.random.default_rng(seed)
    weights = [
        rng.normal(size=(3, 4)).astype(np.float32),
        rng.normal(size=(4,)).astype(np.float32),
        np.zeros((2, 2), np.float32),
        rng.normal(size=(2, 3, 2)).astype(np.float32) * 10,
    ]
    grads = []
    for step in range(STEPS):
        step_grads = [
            rng.normal(size=w.shape).astype(np.float32) * 10.0**i for i, w in enumerate(weights)
        ]
        if step == 2:
            step_grads[3] = np.zeros_like(step_grads[3])
        grads.append(step_grads)
    return weights, grads


def _run_keras(optimizer, weights, grads) -> list[np.ndarray]:
    variables = [tf.Variable(w) for w in weights]
    for step_grads in grads:
        optimizer.apply_gradients(zip([tf.constant(g) for g in step_grads], variables))
    return [v.numpy() for v in variables]


@pytest.mark.parametrize(
    ("name", "reference"),
    [
        ("adamw", lambda: LambReference(optimizers.ADAMW_EPSILON, trust=False)),
        ("lamb", lambda: LambReference(optimizers.LAMB_EPSILON, trust=True)),
        ("lars", LarsReference),
    ],
)
def test_update_matches_the_papers_rule(name, reference):
    weights, grads = _problem()
    optimizer = optimizers.make(
        name, learning_rate=LR, momentum=MOMENTUM, weight_decay=WD, trust_coefficient=ETA
    )
    got = _run_keras(optimizer, weights, grads)
    expected = [w.astype(np.float64) for w in weights]
    ref = reference()
    for step_grads in grads:
        ref.step(expected, [g.astype(np.float64) for g in step_grads])
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=1e-6)
    assert not np.allclose(got[0], weights[0]), "the update moved nothing"


def test_lamb_moves_each_layer_by_lr_times_its_norm():
    """The trust ratio's point: whatever a layer's gradient scale (1 to 1000 here), one LAMB
    step changes it by lr x ||w|| (no decay: the step is the Adam direction rescaled)."""
    weights, grads = _problem()
    optimizer = optimizers.LAMB(learning_rate=LR, weight_decay=0.0)
    got = _run_keras(optimizer, weights, grads[:1])
    for before, after in zip(weights, got):
        if before.ndim > 1 and _norm(before) > 0:
            assert _norm(after - before) == pytest.approx(LR * _norm(before), rel=1e-4)


def test_trust_ratio_is_one_where_a_norm_is_zero():
    assert float(optimizers.trust_ratio(tf.constant(0.0), tf.constant(2.0))) == 1.0
    assert float(optimizers.trust_ratio(tf.constant(3.0), tf.constant(0.0))) == 1.0
    assert float(optimizers.trust_ratio(tf.constant(3.0), tf.constant(2.0))) == 1.5


def test_decay_lives_in_the_loss_only_for_sgd_and_adam():
    assert [n for n in optimizers.CHOICES if optimizers.decay_in_loss(n)] == ["sgd", "adam"]


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_each_entry_of_the_table_builds_its_class_with_the_options_it_takes(name):
    """core/optimizer_table says which class builds an optimizer and what it takes; make()
    hands it exactly those options."""
    entry = OPTIMIZERS[name]
    built = optimizers.make(name, learning_rate=0.1, momentum=0.5, weight_decay=0.01,
                            trust_coefficient=0.02)  # fmt: skip
    config = built.get_config()
    assert type(built).__name__ == entry.builder
    assert (config.get("momentum") == 0.5) == entry.momentum
    assert (config.get("weight_decay") == 0.01) == (not entry.decay_in_loss)
    assert (config.get("trust_coefficient") == 0.02) == entry.trust_coefficient


def test_bad_optimizer_options_are_refused():
    with pytest.raises(ValueError, match="unknown optimizer 'rmsprop'"):
        optimizers.make("rmsprop", learning_rate=0.1)
    with pytest.raises(ConfigError, match="--trust-coefficient"):
        TrainConfig(data="d", run_dir="r", optimizer="lars", trust_coefficient=-1.0).validate()
    with pytest.raises(ConfigError, match="--optimizer must be one of"):
        TrainConfig(data="d", run_dir="r", optimizer="rmsprop").validate()


def test_state_survives_a_checkpoint(tmp_path):
    """Slots and the step count (LAMB's bias correction) restore: the resumed update equals
    the uninterrupted one."""
    weights, grads = _problem()
    straight = _run_keras(optimizers.LAMB(learning_rate=LR, weight_decay=WD), weights, grads)
    variables = [tf.Variable(w) for w in weights]
    first = optimizers.LAMB(learning_rate=LR, weight_decay=WD)
    for step_grads in grads[:3]:
        first.apply_gradients(zip([tf.constant(g) for g in step_grads], variables))
    path = tf.train.Checkpoint(optimizer=first, weights=variables).write(str(tmp_path / "c"))
    resumed_vars = [tf.Variable(np.zeros_like(w)) for w in weights]
    second = optimizers.LAMB(learning_rate=LR, weight_decay=WD)
    second.apply_gradients(zip([tf.zeros_like(v) for v in resumed_vars], resumed_vars))
    tf.train.Checkpoint(optimizer=second, weights=resumed_vars).read(path).assert_consumed()
    for step_grads in grads[3:]:
        second.apply_gradients(zip([tf.constant(g) for g in step_grads], resumed_vars))
    for a, b in zip(straight, resumed_vars):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-6)


# Per-layer relative step about 1 % for the trust-ratio optimizers (LAMB: lr; LARS: lr x eta).
LEARNS_WITH = {"adamw": ["--lr", "0.01"], "lamb": ["--lr", "0.01"], "lars": ["--lr", "10"]}


# LAMB in make test; LARS and AdamW, a training each, in the slow tier (37 s of make test).
LEARNING_RUNS = [
    name if name == "lamb" else pytest.param(name, marks=pytest.mark.slow)
    for name in sorted(LEARNS_WITH)
]


@pytest.mark.parametrize("name", LEARNING_RUNS)
def test_trains_the_tiny_model(name, tmp_path, shards_v1):
    """Each optimizer learns the synthetic rule as well as the tiny recipe's Adam does."""
    run = tmp_path / name
    argv = ["--data", str(shards_v1), "--run-dir", str(run), "--epochs", "6", "--no-eval-test"]
    extra = ["--optimizer", name, "--weight-decay", "0.001", *LEARNS_WITH[name]]
    assert train.main(argv + TINY_RECIPE + extra) == 0
    rows = read_history(run)
    assert rows[-1].loss < 0.8 * rows[0].loss
    assert max(r.val_micro_f1 for r in rows) > 0.45  # chance is ~0.2
