"""bigearthnet.training.schedules: Goyal et al. warm-up + decay, Python vs TF, optimizers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import tensorflow as tf

from bigearthnet.training.schedules import (
    LRSchedule,
    WarmupSchedule,
    default_step_epochs,
    with_world_size,
)

BASE = dict(base_lr=0.1, world_size=8, steps_per_epoch=100, total_epochs=20, warmup_epochs=5)


def make(**overrides: object) -> LRSchedule:
    return LRSchedule(**{**BASE, **overrides})


def all_variants() -> list[LRSchedule]:
    return [
        make(kind="cosine"),
        make(kind="cosine", min_lr=0.01),
        make(kind="step"),
        make(kind="step", step_epochs=[7, 12.5, 18], gamma=0.5),
        make(kind="constant"),
        make(kind="cosine", warmup_epochs=0),
        make(kind="cosine", warmup_epochs=20),  # warm-up fills the run: no decay phase
        make(kind="cosine", world_size=1, steps_per_epoch=37, total_epochs=3, warmup_epochs=0.5),
    ]


# ---------------------------------------------------------------------- warm-up


def test_warmup_endpoints_and_linearity() -> None:
    s = make()
    assert s.warmup_steps == 500 and s.peak_lr == pytest.approx(0.8)
    assert s.lr_at(0) == pytest.approx(0.1)  # starts at the single-worker LR
    assert s.lr_at(500) == pytest.approx(0.8)  # base_lr * world_size after warm-up
    assert s.lr_at(250) == pytest.approx(0.45)
    ramp = np.array([s.lr_at(k) for k in range(501)])
    np.testing.assert_allclose(np.diff(ramp), 0.7 / 500, rtol=1e-9)  # linear per step
    assert s.lr_at(-3) == s.lr_at(0)
    assert s.lr_at_epoch(2.5) == s.lr_at(250)


def test_single_worker_warmup_is_flat() -> None:
    flat = make(world_size=1, kind="constant")
    assert {flat.lr_at(k) for k in range(0, 600, 10)} == {0.1}


# --------------------------------------------------------------------- decays


def test_cosine_reaches_min_lr_at_end() -> None:
    s = make(min_lr=0.001)
    assert s.lr_at(s.total_steps) == pytest.approx(0.001)
    assert s.lr_at(s.total_steps + 1000) == pytest.approx(0.001)  # stays after the end
    middle = (s.warmup_steps + s.total_steps) / 2
    assert s.lr_at(middle) == pytest.approx((0.8 + 0.001) / 2)
    decay = [s.lr_at(k) for k in range(500, 2001)]
    assert all(a >= b for a, b in zip(decay, decay[1:]))


def test_step_decay_boundaries() -> None:
    s = make(kind="step")
    assert s.step_epochs == (10, 15)  # 50 % and 75 % of 20 epochs
    assert s.lr_at(999) == pytest.approx(0.8)
    assert s.lr_at(1000) == pytest.approx(0.08)
    assert s.lr_at(1499) == pytest.approx(0.08)
    assert s.lr_at(1500) == pytest.approx(0.008)
    assert s.lr_at(5000) == pytest.approx(0.008)

    custom = make(kind="step", step_epochs=[6, 8], gamma=0.5)
    assert [custom.lr_at_epoch(e) for e in (5.99, 6, 7.99, 8)] == pytest.approx(
        [0.8, 0.4, 0.4, 0.2]
    )


def test_default_step_epochs_round_half_up() -> None:
    assert default_step_epochs(90) == (45, 68)
    assert default_step_epochs(20) == (10, 15)
    assert default_step_epochs(1) == (1,)  # 0.5 -> 1 and 0.75 -> 1 collapse
    assert make(kind="cosine").step_epochs is None


def test_constant_after_warmup() -> None:
    s = make(kind="constant")
    assert {round(s.lr_at(k), 12) for k in range(500, 3000, 50)} == {0.8}


# --------------------------------------------------------------- TF == Python


@pytest.mark.parametrize(
    "schedule", all_variants(), ids=lambda s: f"{s.kind}-w{s.warmup_epochs}-min{s.min_lr}"
)
def test_tf_schedule_matches_python(schedule: LRSchedule) -> None:
    steps = sorted(
        set(range(0, int(schedule.total_steps) + 60, 7))
        | {int(b) for b in schedule.boundary_steps}
        | {int(schedule.warmup_steps), int(schedule.warmup_steps) - 1}
    )
    tf_schedule = WarmupSchedule(schedule)
    want = np.array([schedule.lr_at(k) for k in steps])
    got = tf_schedule(tf.constant(steps, tf.int64)).numpy()  # vectorised call
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)

    # Scalar steps as the optimizers pass them: int64 (new) and float32 (legacy).
    compiled = tf.function(tf_schedule)
    for k in steps[::5]:
        for dtype in (tf.int64, tf.float32):
            assert compiled(tf.constant(k, dtype)).numpy() == pytest.approx(want[steps.index(k)])


# ------------------------------------------------------------------ optimizers


@pytest.mark.parametrize(
    "optimizer_cls",
    [tf.keras.optimizers.SGD, tf.keras.optimizers.legacy.SGD],
    ids=["SGD", "legacy.SGD"],
)
def test_optimizer_uses_schedule(optimizer_cls: type) -> None:
    schedule = LRSchedule(
        base_lr=0.05, world_size=4, steps_per_epoch=3, total_epochs=6, warmup_epochs=2
    )
    optimizer = optimizer_cls(learning_rate=WarmupSchedule(schedule))
    var = tf.Variable(0.0)
    for k in range(int(schedule.total_steps) + 2):
        # Plain SGD: var -= lr * grad, so with var = 0 and grad = 1 the update is -lr.
        var.assign(0.0)
        optimizer.apply_gradients([(tf.constant(1.0), var)])
        assert -var.numpy() == pytest.approx(schedule.lr_at(k), rel=1e-6), f"step {k}"
    assert int(optimizer.iterations.numpy()) == int(schedule.total_steps) + 2


@pytest.mark.parametrize(
    "optimizer_cls",
    [tf.keras.optimizers.SGD, tf.keras.optimizers.legacy.SGD],
    ids=["SGD", "legacy.SGD"],
)
def test_schedule_position_restored_with_optimizer(optimizer_cls: type, tmp_path) -> None:
    schedule = LRSchedule(
        base_lr=0.05, world_size=4, steps_per_epoch=3, total_epochs=6, warmup_epochs=2
    )
    var = tf.Variable(0.0)
    optimizer = optimizer_cls(learning_rate=WarmupSchedule(schedule))
    for _ in range(5):
        optimizer.apply_gradients([(tf.constant(1.0), var)])
    path = tf.train.Checkpoint(optimizer=optimizer, var=var).save(str(tmp_path / "ckpt"))

    var2 = tf.Variable(0.0)
    resumed = optimizer_cls(learning_rate=WarmupSchedule(schedule))
    tf.train.Checkpoint(optimizer=resumed, var=var2).restore(path)
    var2.assign(0.0)
    resumed.apply_gradients([(tf.constant(1.0), var2)])
    assert -var2.numpy() == pytest.approx(schedule.lr_at(5), rel=1e-6)


# --------------------------------------------------------------- serialisation


def test_serialization_round_trip() -> None:
    schedule = WarmupSchedule(make(kind="step", step_epochs=[8, 16], min_lr=0.0))
    config = schedule.get_config()
    json.dumps(config)
    assert config["step_epochs"] == [8.0, 16.0]

    rebuilt = WarmupSchedule.from_config(config)
    assert rebuilt.schedule == schedule.schedule
    via_keras = tf.keras.optimizers.schedules.deserialize(
        tf.keras.optimizers.schedules.serialize(schedule)
    )
    assert isinstance(via_keras, WarmupSchedule) and via_keras.schedule == schedule.schedule
    assert LRSchedule(**schedule.schedule.to_config()) == schedule.schedule

    # The optimizer's own config carries the schedule (registered serialisable).
    optimizer = tf.keras.optimizers.SGD(learning_rate=schedule)
    clone = tf.keras.optimizers.SGD.from_config(optimizer.get_config())
    restored = clone.get_config()["learning_rate"]
    assert restored == optimizer.get_config()["learning_rate"]
    assert tf.keras.optimizers.schedules.deserialize(restored).schedule == schedule.schedule


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "overrides",
    [
        {"total_epochs": -1},
        {"total_epochs": 0},
        {"warmup_epochs": -1},
        {"warmup_epochs": 21},  # longer than the run
        {"kind": "linear"},
        {"base_lr": 0.0},
        {"base_lr": math.nan},
        {"world_size": 0},
        {"world_size": 1.5},
        {"steps_per_epoch": 0},
        {"min_lr": 1.0},  # above the peak 0.8
        {"min_lr": -0.1},
        {"gamma": 0.0},
        {"kind": "step", "step_epochs": [12, 6]},
        {"kind": "step", "step_epochs": [0, 6]},
        {"kind": "step", "step_epochs": [10, 25]},
    ],
)
def test_bad_configs_raise(overrides: dict) -> None:
    with pytest.raises(ValueError):
        make(**overrides)


def test_warmup_schedule_requires_lrschedule() -> None:
    with pytest.raises(TypeError):
        WarmupSchedule({"base_lr": 0.1})  # type: ignore[arg-type]


# ---------------------------------------------------------------- world size


def test_with_world_size() -> None:
    s = make()
    bigger = with_world_size(s, 16)
    assert isinstance(bigger, LRSchedule) and s.world_size == 8  # original untouched
    assert bigger.peak_lr == pytest.approx(1.6)
    assert bigger.lr_at(0) == pytest.approx(0.1)

    wrapped = with_world_size(WarmupSchedule(s), 2, steps_per_epoch=400)
    assert isinstance(wrapped, WarmupSchedule)
    assert wrapped.schedule.world_size == 2 and wrapped.schedule.steps_per_epoch == 400
    assert float(wrapped(tf.constant(2000))) == pytest.approx(0.2)  # end of warm-up, 5 epochs
    with pytest.raises(ValueError):
        with_world_size(s, 0)
