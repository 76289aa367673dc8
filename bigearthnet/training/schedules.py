"""Learning-rate schedules for Horovod data-parallel training (Goyal et al. 2017).

"Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour" gives the recipe used here:

* **Linear scaling rule** - with ``world_size`` workers the global batch is
  ``world_size`` times larger, so the learning rate is ``base_lr * world_size``, where
  ``base_lr`` is the rate that works for one worker.
* **Gradual warm-up** - a large LR at the start, while the weights change fast, can
  diverge. The LR therefore starts at ``base_lr`` (the single-worker rate) and grows
  linearly *per step* to ``base_lr * world_size`` over ``warmup_epochs`` epochs.
* **Then a schedule** from that peak: ``cosine`` (half cosine down to ``min_lr`` at the
  end of the last epoch), ``step`` (multiply by ``gamma`` at each epoch in
  ``step_epochs``, by default 50 % and 75 % of the epochs) or ``constant``.

With ``world_size == 1`` the warm-up is flat by construction: it ramps from ``base_lr``
to ``base_lr * 1``. That is Goyal's rule, not a bug.

:class:`LRSchedule` is the configuration (what the run asked for, and the quantities derived
from it). :class:`WarmupSchedule` is the one formula: a ``tf.keras`` ``LearningRateSchedule``
that the optimizer evaluates at its ``iterations`` counter; the counter is part of the
optimizer's checkpoint, so a resumed run continues at the right point.
:meth:`LRSchedule.lr_at` evaluates the same formula for logs, history and tests.

Do not combine it with Horovod's ``LearningRateWarmupCallback`` or
``LearningRateScheduleCallback``, which would apply the warm-up a second time.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Union

import tensorflow as tf

from bigearthnet.core.config import SCHEDULES

KINDS = SCHEDULES


def default_step_epochs(total_epochs: float) -> tuple[int, ...]:
    """50 % and 75 % of the epochs, rounded half up, without zeros or duplicates."""
    epochs = {int(math.floor(f * total_epochs + 0.5)) for f in (0.5, 0.75)}
    return tuple(sorted(e for e in epochs if e > 0))


@dataclasses.dataclass(frozen=True)
class LRSchedule:
    """Linear-scaling LR with per-step linear warm-up, then cosine, step or constant.

    ``step`` counts optimizer updates from 0; ``epoch = step / steps_per_epoch``.
    Past the last epoch the LR stays at its final value.
    """

    base_lr: float
    world_size: int
    steps_per_epoch: int
    total_epochs: float
    warmup_epochs: float = 5.0
    kind: str = "cosine"
    min_lr: float = 0.0
    step_epochs: tuple[float, ...] | None = None  # None: default_step_epochs for "step"
    gamma: float = 0.1

    def __post_init__(self) -> None:
        if self.step_epochs is not None:
            # Accept lists (JSON/YAML configs) but keep the dataclass hashable and frozen.
            object.__setattr__(self, "step_epochs", tuple(float(e) for e in self.step_epochs))
        elif self.kind == "step":
            object.__setattr__(self, "step_epochs", default_step_epochs(self.total_epochs))
        self._validate()

    def _validate(self) -> None:
        def check(ok: bool, message: str) -> None:
            if not ok:
                raise ValueError(f"LRSchedule: {message}")

        finite = all(
            math.isfinite(v)
            for v in (self.base_lr, self.total_epochs, self.warmup_epochs, self.min_lr, self.gamma)
        )
        check(finite, "numeric fields must be finite")
        check(self.kind in KINDS, f"kind must be one of {KINDS}, got {self.kind!r}")
        check(self.base_lr > 0, f"base_lr must be > 0, got {self.base_lr}")
        for name in ("world_size", "steps_per_epoch"):
            value = getattr(self, name)
            check(int(value) == value >= 1, f"{name} must be an integer >= 1, got {value}")
        check(self.total_epochs > 0, f"total_epochs must be > 0, got {self.total_epochs}")
        check(self.warmup_epochs >= 0, f"warmup_epochs must be >= 0, got {self.warmup_epochs}")
        check(
            self.warmup_epochs <= self.total_epochs,
            f"warmup_epochs ({self.warmup_epochs}) exceeds total_epochs ({self.total_epochs})",
        )
        check(0 <= self.min_lr <= self.peak_lr, "min_lr must lie in [0, base_lr * world_size]")
        check(self.gamma > 0, f"gamma must be > 0, got {self.gamma}")
        epochs = self.step_epochs or ()
        check(
            all(0 < e <= self.total_epochs for e in epochs)
            and all(a < b for a, b in zip(epochs, epochs[1:])),
            f"step_epochs must increase strictly within (0, total_epochs], got {epochs}",
        )

    # Derived quantities, used by the formula and by logs.
    @property
    def peak_lr(self) -> float:
        """The linearly scaled LR reached at the end of the warm-up."""
        return self.base_lr * self.world_size

    @property
    def start_lr(self) -> float:
        """LR at step 0: ``base_lr``, the single-worker rate (Goyal)."""
        return self.base_lr

    @property
    def warmup_steps(self) -> float:
        return self.warmup_epochs * self.steps_per_epoch

    @property
    def total_steps(self) -> float:
        return self.total_epochs * self.steps_per_epoch

    @property
    def boundary_steps(self) -> tuple[float, ...]:
        """Steps at which ``kind="step"`` multiplies the LR by ``gamma``."""
        return tuple(e * self.steps_per_epoch for e in self.step_epochs or ())

    def lr_at(self, step: Union[int, float]) -> float:
        """Learning rate for optimizer step ``step`` (0-based, clamped at 0): the value the
        optimizer gets, evaluated in float64."""
        return float(self._keras(tf.constant(step, tf.float64), dtype=tf.float64))

    @functools.cached_property
    def _keras(self) -> WarmupSchedule:
        return WarmupSchedule(self)

    def lr_at_epoch(self, epoch: float) -> float:
        """Learning rate at a (fractional) epoch."""
        return self.lr_at(epoch * self.steps_per_epoch)

    def to_config(self) -> dict[str, Any]:
        """Plain dict (lists, floats) that ``LRSchedule(**config)`` accepts back."""
        config = dataclasses.asdict(self)
        if config["step_epochs"] is not None:
            config["step_epochs"] = list(config["step_epochs"])
        return config


@tf.keras.utils.register_keras_serializable(package="bigearthnet")
class WarmupSchedule(tf.keras.optimizers.schedules.LearningRateSchedule):
    """:class:`LRSchedule` as a Keras schedule, evaluated at the optimizer's ``iterations``.

    Works with ``tf.keras.optimizers.SGD`` (and the other Keras 2 optimizers) as well as
    with ``tf.keras.optimizers.legacy.SGD``, the class Horovod's DistributedOptimizer
    wraps. The maths is done in float64 (the legacy optimizer passes the step as float32;
    float64 keeps the cosine and warm-up fractions exact enough to match
    :meth:`LRSchedule.lr_at`) and returned as float32.
    """

    def __init__(self, schedule: LRSchedule) -> None:
        super().__init__()
        if not isinstance(schedule, LRSchedule):
            raise TypeError(f"expected an LRSchedule, got {type(schedule).__name__}")
        self.schedule = schedule

    def __call__(self, step: Any, dtype: tf.DType = tf.float32) -> tf.Tensor:
        with tf.name_scope("WarmupSchedule"):
            s = self.schedule
            step = tf.maximum(tf.cast(step, tf.float64), 0.0)
            lr = self._after_warmup(step)
            if s.warmup_steps > 0:
                ramp = s.start_lr + (s.peak_lr - s.start_lr) * step / s.warmup_steps
                lr = tf.where(step < s.warmup_steps, ramp, lr)
            return tf.cast(lr, dtype)

    def _after_warmup(self, step: tf.Tensor) -> tf.Tensor:
        s = self.schedule
        if s.kind == "constant":
            return tf.fill(tf.shape(step), tf.constant(s.peak_lr, tf.float64))
        if s.kind == "step":
            decays = tf.zeros_like(step)
            for boundary in s.boundary_steps:
                decays += tf.cast(step >= boundary, tf.float64)
            return s.peak_lr * tf.pow(tf.constant(s.gamma, tf.float64), decays)
        # Cosine from the peak down to min_lr over the steps after the warm-up. (Keras'
        # CosineDecay computes the same but branches with tf.cond, so it cannot take a
        # vector of steps, which plots and tests use.)
        decay_steps = s.total_steps - s.warmup_steps
        if decay_steps > 0:
            progress = tf.minimum((step - s.warmup_steps) / decay_steps, 1.0)
        else:
            progress = tf.ones_like(step)
        cosine = 0.5 * (1.0 + tf.cos(math.pi * progress))
        return s.min_lr + (s.peak_lr - s.min_lr) * cosine

    def get_config(self) -> dict[str, Any]:
        return self.schedule.to_config()

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> WarmupSchedule:
        return cls(LRSchedule(**config))


class GainedSchedule(tf.keras.optimizers.schedules.LearningRateSchedule):
    """A schedule times a gain held in a variable (AdaScale's r): the gain changes every
    update without retracing the compiled step."""

    def __init__(self, schedule: LRSchedule, gain: tf.Variable) -> None:
        super().__init__()
        self.inner = WarmupSchedule(schedule)
        self.gain = gain

    def __call__(self, step: Any, dtype: tf.DType = tf.float32) -> tf.Tensor:
        return self.inner(step, dtype) * tf.cast(self.gain, dtype)

    def get_config(self) -> dict[str, Any]:
        return self.inner.get_config()  # the gain is recomputed, not saved


Schedule = Union[LRSchedule, WarmupSchedule]


def with_world_size(
    schedule: Schedule, new_size: int, steps_per_epoch: int | None = None
) -> Schedule:
    """A copy of ``schedule`` for ``new_size`` workers (same type as the input).

    Elastic training calls this after the worker set changed: the peak LR follows the
    linear scaling rule for the new size. A different world size usually also changes
    the number of steps per epoch (fixed per-worker batch, fixed data set); pass it as
    ``steps_per_epoch`` so that epoch boundaries stay where they were meant to be.
    The schedule reads the position from ``optimizer.iterations``, which then still
    counts steps taken at the old size: set it to ``epoch * steps_per_epoch`` (the new
    value) when you swap schedules, or the run lands at the wrong point of the curve.
    """
    changes: dict[str, Any] = {"world_size": new_size}
    if steps_per_epoch is not None:
        changes["steps_per_epoch"] = steps_per_epoch
    if isinstance(schedule, WarmupSchedule):
        return WarmupSchedule(dataclasses.replace(schedule.schedule, **changes))
    return dataclasses.replace(schedule, **changes)
