"""The gradient noise scale, measured while training (McCandlish et al. 2018, "An Empirical
Model of Large-Batch Training", App. A.1).

Every optimizer update of a data-parallel run sees the gradient at two batch sizes for free:
each rank's own gradient over ``B_small`` samples (its batch, or each accumulated micro-batch)
and the allreduced gradient over ``B_big = B_small x ranks x passes``. With
``E|g_B|^2 = |G|^2 + tr(S)/B``, the squared norms at the two sizes give unbiased estimates
of the true gradient's squared norm ``|G|^2`` and of the per-sample covariance's trace
``tr(S)``::

    |G|^2 ~ (B_big |g_big|^2 - B_small |g_small|^2) / (B_big - B_small)
    tr(S) ~ (|g_small|^2 - |g_big|^2) / (1/B_small - 1/B_big)

Single estimates are noisy (|G|^2 can come out negative), and their ratio is biased, so the
two are averaged apart (exponential moving averages with Adam's bias correction) and the
simple noise scale ``B_simple = tr(S) / |G|^2`` is taken of the averages. It predicts the
critical batch: below it a larger batch cuts the steps needed almost in proportion; above
it, hardly. With one rank and no accumulation there is no second size: no estimate, "n/a".

The replica (:mod:`bigearthnet.training.replica`) supplies the two norms per update; this module is
plain arithmetic (no TensorFlow), the one home of the formulas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

DEFAULT_DECAY = 0.99  # per update: the averages span about the last 100 updates
LOG_EVERY = 10  # updates between the points written to TensorBoard


@dataclass(frozen=True)
class NoiseSample:
    """One update's squared gradient norms and the batch sizes they were taken over."""

    small_sq: float  # |g_small|^2: each rank's (micro-)batch gradient, averaged over them
    big_sq: float  # |g_big|^2: the allreduced gradient
    b_small: int
    b_big: int


@dataclass(frozen=True)
class NoiseEstimate:
    """The averaged estimates after some updates."""

    grad_sq: float  # |G|^2
    trace: float  # tr(S)
    updates: int  # updates averaged

    @property
    def b_simple(self) -> float:
        """tr(S) / |G|^2; infinite where |G|^2 is not (yet) measurably positive."""
        return self.trace / self.grad_sq if self.grad_sq > 0 else math.inf


def unbiased(sample: NoiseSample) -> tuple[float, float] | None:
    """(|G|^2, tr(S)) of one update, or None where the two batch sizes are the same."""
    small, big = sample.b_small, sample.b_big
    if big <= small:
        return None
    grad_sq = (big * sample.big_sq - small * sample.small_sq) / (big - small)
    trace = (sample.small_sq - sample.big_sq) / (1.0 / small - 1.0 / big)
    return grad_sq, trace


@dataclass
class NoiseScaleMonitor:
    """Bias-corrected moving averages of |G|^2 and tr(S) over the run's updates."""

    decay: float = DEFAULT_DECAY
    _grad_sq: float = 0.0
    _trace: float = 0.0
    updates: int = 0
    skipped: int = 0  # non-finite norms (an fp16 overflow step) or one batch size only
    points: list[tuple[int, NoiseEstimate]] = field(default_factory=list)  # for TensorBoard

    def __post_init__(self) -> None:
        if not 0.0 <= self.decay < 1.0:
            raise ValueError(f"the noise-scale average's decay must be in [0, 1), got {self.decay}")

    def add(self, sample: NoiseSample) -> None:
        """Fold in one update (skipped where it has no estimate or a non-finite norm)."""
        estimate = unbiased(sample)
        if estimate is None or not all(map(math.isfinite, estimate)):
            self.skipped += 1
            return
        grad_sq, trace = estimate
        self.updates += 1
        self._grad_sq = self.decay * self._grad_sq + (1.0 - self.decay) * grad_sq
        self._trace = self.decay * self._trace + (1.0 - self.decay) * trace
        if self.updates % LOG_EVERY == 0:
            current = self.estimate()
            if current is not None:
                self.points.append((self.updates, current))

    def estimate(self) -> NoiseEstimate | None:
        """The current averages (None before the first estimate: "n/a")."""
        if not self.updates:
            return None
        correction = 1.0 - self.decay**self.updates
        return NoiseEstimate(
            grad_sq=self._grad_sq / correction,
            trace=self._trace / correction,
            updates=self.updates,
        )

    def snapshot(self) -> list[float]:
        """The averages as plain numbers (elastic state: every worker takes rank 0's)."""
        return [self._grad_sq, self._trace, float(self.updates)]

    def restore(self, values: list[float]) -> None:
        self._grad_sq, self._trace, self.updates = values[0], values[1], int(values[2])

    def take_points(self) -> list[tuple[int, NoiseEstimate]]:
        """The TensorBoard points since the last call."""
        points, self.points = self.points, []
        return points


def adascale_gain(estimate: NoiseEstimate | None, *, base_batch: int, scale: float) -> float:
    """AdaScale's gain ratio (Johnson et al. 2020, as AdaptDL uses it) for a batch ``scale``
    times ``base_batch``: r = (s2 + m2) / (s2 / scale + m2) with s2 = tr(S) / base_batch the
    gradient variance of a base batch and m2 = |G|^2. r is ~scale while the noise dominates
    (B_simple >> the batch: linear scaling) and ~1 once it does not (a larger batch buys no
    larger step). 1 before the first estimate; clipped to [1, scale], the range of the true
    r, as single estimates can fall outside it."""
    if estimate is None or scale <= 1:
        return 1.0
    variance = max(estimate.trace, 0.0) / base_batch
    grad_sq = max(estimate.grad_sq, 0.0)
    if variance + grad_sq <= 0:
        return 1.0
    gain = (variance + grad_sq) / (variance / scale + grad_sq)
    return min(max(gain, 1.0), scale)


def verdict(b_simple: float | None, global_batch: int) -> str:
    """One log line comparing the noise scale with the batch in use."""
    if b_simple is None:
        return (
            f"B_simple n/a (one batch size only: 1 rank, no accumulation), "
            f"global batch {global_batch:,}"
        )
    shown = "inf" if math.isinf(b_simple) else f"{b_simple:,.0f}"
    if b_simple > global_batch:
        advice = "larger batches still pay"
    else:
        advice = "past the critical batch: a larger batch would hardly cut the steps"
    return f"B_simple {shown} vs global batch {global_batch:,}: {advice}"


def noise_report(monitor: NoiseScaleMonitor, *, enabled: bool) -> dict:
    """The monitor's state for ``efficiency.json`` (null estimates where there are none)."""
    estimate = monitor.estimate() if enabled else None
    b_simple = None if estimate is None or math.isinf(estimate.b_simple) else estimate.b_simple
    return {
        "measured": estimate is not None,
        "b_simple": b_simple,
        "grad_sq": estimate.grad_sq if estimate else None,
        "trace": estimate.trace if estimate else None,
        "updates_averaged": monitor.updates,
        "updates_skipped": monitor.skipped,
        "decay": monitor.decay,
    }
