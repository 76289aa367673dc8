"""The steps/examples trade-off of McCandlish et al. (2018, "An empirical model of large-batch
training"), fitted to a batch-size study, and the job sizes it recommends.

With S the optimizer steps and E = B x S the training examples a batch size B needs to reach
the target, the model is (S/S_min - 1)(E/E_min - 1) = 1, i.e. S = S_min (1 + B_crit/B) with
E_min = S_min x B_crit: far below B_crit doubling the batch halves the steps (perfect
scaling), far above it the steps stop falling. At B_crit a run takes twice the minimal steps
and twice the minimal examples. The fit minimises the squared log-residuals of S (each point
counts by its relative error), and a bootstrap over the points gives the intervals.

A study that cannot say (fewer than 3 batch sizes reached the target, steps that do not fall,
or steps that still halve with every doubling) gets a :class:`NoFit` with the reason, not a
number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_POINTS = 3
# B_crit this far outside the measured batches is not measured: the data are flat or
# perfectly scaling over the whole range.
OUTSIDE = 4.0
EFFICIENCY = 0.8  # the recommended job keeps >= 80 % of perfect scaling (E_min / E)


@dataclass(frozen=True)
class TradeoffFit:
    """S = s_min (1 + b_crit / B); intervals from the bootstrap (``level`` of resamples)."""

    s_min: float
    b_crit: float
    s_min_interval: tuple[float, float]
    b_crit_interval: tuple[float, float]
    e_min_interval: tuple[float, float]
    points: int  # batch sizes that reached the target
    resamples: int  # bootstrap resamples that could be fitted
    level: float

    @property
    def e_min(self) -> float:
        return self.s_min * self.b_crit

    def steps(self, batch: float) -> float:
        return self.s_min * (1.0 + self.b_crit / batch)

    def examples(self, batch: float) -> float:
        return batch * self.steps(batch)

    def efficiency(self, batch: float) -> float:
        """E_min / E(B): the share of perfect scaling kept at ``batch``."""
        return 1.0 / (1.0 + batch / self.b_crit)

    def batch_at(self, efficiency: float) -> float:
        """The batch size at which the share of perfect scaling falls to ``efficiency``."""
        return self.b_crit * (1.0 / efficiency - 1.0)


@dataclass(frozen=True)
class NoFit:
    """Why the study's points do not determine B_crit."""

    reason: str
    points: int


@dataclass(frozen=True)
class JobSize:
    """A recommended global batch and what it costs to reach the target."""

    label: str
    global_batch: int
    ranks: int
    rank_batch: int  # the recipe's per-rank batch, or the whole batch on one rank below it
    steps: float  # predicted by the fit
    examples: float
    efficiency: float
    accelerator_hours: float | None  # examples / measured samples/s per rank
    wall_hours: float | None


def _fit_once(batches: np.ndarray, steps: np.ndarray) -> tuple[float, float]:
    """(S_min, B_crit) minimising sum (log S - log S_min - log(1 + B_crit/B))^2."""
    from scipy.optimize import least_squares

    # Start from the straight line S = a + b/B (a = S_min, b = S_min B_crit).
    slope, intercept = np.polyfit(1.0 / batches, steps, 1)
    s0 = intercept if intercept > 0 else float(steps.min())
    c0 = slope / s0 if slope > 0 else float(batches.min())

    def residuals(theta: np.ndarray) -> np.ndarray:
        s_min, b_crit = np.exp(theta)
        return np.log(steps) - np.log(s_min) - np.log1p(b_crit / batches)

    solution = least_squares(residuals, np.log([s0, c0]), method="lm")
    s_min, b_crit = np.exp(solution.x)
    return float(s_min), float(b_crit)


def fit_tradeoff(
    batches: Sequence[int],
    steps: Sequence[float | None],
    *,
    resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> TradeoffFit | NoFit:
    """Fit the points whose ``steps`` are not None (the batch sizes that reached the target)."""
    pairs = sorted((float(b), float(s)) for b, s in zip(batches, steps) if s is not None and s > 0)
    distinct = len({b for b, _ in pairs})
    if distinct < MIN_POINTS:
        return NoFit(
            f"only {distinct} batch size(s) reached the target; the fit needs {MIN_POINTS}",
            distinct,
        )
    b = np.array([p[0] for p in pairs])
    s = np.array([p[1] for p in pairs])
    s_min, b_crit = _fit_once(b, s)
    if b_crit < b.min() / OUTSIDE:
        return NoFit(
            f"the steps to target do not fall with the batch size over {b.min():,.0f}-"
            f"{b.max():,.0f} (flat): B_crit is below the smallest batch measured; add "
            "smaller batches",
            distinct,
        )
    if b_crit > b.max() * OUTSIDE:
        return NoFit(
            f"the steps still fall in proportion up to {b.max():,.0f}: B_crit is above the "
            "largest batch measured; add larger batches",
            distinct,
        )
    draws = _bootstrap(b, s, resamples, seed)
    tail = (1.0 - level) / 2.0

    def interval(values: np.ndarray) -> tuple[float, float]:
        low, high = np.quantile(values, [tail, 1.0 - tail])
        return float(low), float(high)

    return TradeoffFit(
        s_min=s_min,
        b_crit=b_crit,
        s_min_interval=interval(draws[:, 0]),
        b_crit_interval=interval(draws[:, 1]),
        e_min_interval=interval(draws[:, 0] * draws[:, 1]),
        points=distinct,
        resamples=len(draws),
        level=level,
    )


def _bootstrap(b: np.ndarray, s: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """(S_min, B_crit) of resamples of the points (with replacement, >= 3 distinct batches)."""
    rng = np.random.default_rng(seed)
    fits = []
    for _ in range(resamples):
        pick = rng.integers(0, len(b), len(b))
        if len(set(b[pick])) < MIN_POINTS:
            continue
        fits.append(_fit_once(b[pick], s[pick]))
    return np.array(fits) if fits else np.array([[np.nan, np.nan]])


def recommend(
    fit: TradeoffFit, rank_batch: int, samples_per_s_per_rank: float | None
) -> list[JobSize]:
    """The largest global batch keeping >= 80 % of perfect scaling, and B_crit itself, each
    rounded down to whole ranks of ``rank_batch`` samples (or one rank with a smaller batch
    when it is below one rank's), with the predicted cost."""
    jobs = []
    for label, batch in (
        (f">= {EFFICIENCY:.0%} of perfect scaling", fit.batch_at(EFFICIENCY)),
        ("B_crit: 2x the minimal steps for 2x the minimal examples", fit.b_crit),
    ):
        # A fitted 249.99999 is 250: rounding down must not lose a sample to the fit's noise.
        batch *= 1 + 1e-9
        if batch >= rank_batch:
            ranks, per_rank = math.floor(batch / rank_batch), rank_batch
        else:  # less than one rank's batch: one rank with a smaller batch
            ranks, per_rank = 1, max(1, math.floor(batch))
        global_batch = ranks * per_rank
        examples = fit.examples(global_batch)
        hours = wall = None
        if samples_per_s_per_rank:
            hours = examples / samples_per_s_per_rank / 3600.0
            wall = hours / ranks
        jobs.append(
            JobSize(
                label=label,
                global_batch=global_batch,
                ranks=ranks,
                rank_batch=per_rank,
                steps=fit.steps(global_batch),
                examples=examples,
                efficiency=fit.efficiency(global_batch),
                accelerator_hours=hours,
                wall_hours=wall,
            )
        )
    return jobs


def compare_noise_scale(fit: TradeoffFit, b_simple: float | None) -> str:
    """The measured B_simple beside the fitted B_crit, in words."""
    if b_simple is None or not math.isfinite(b_simple) or b_simple <= 0:
        return "no gradient noise scale was measured (train.py --no-gns?)"
    ratio = fit.b_crit / b_simple
    if 0.5 <= ratio <= 2.0:
        relation = "about equal to"
    elif ratio > 2.0:
        relation = f"{ratio:.1f}x larger than"
    else:
        relation = f"{1 / ratio:.1f}x smaller than"
    return (
        f"the fitted B_crit {fit.b_crit:,.0f} is {relation} the measured B_simple "
        f"{b_simple:,.0f} (late-training median). They need not agree: B_simple is the "
        "gradient noise scale under the assumption of a well-conditioned Hessian, which "
        "McCandlish et al. found to track B_crit only to within an order of magnitude; "
        "B_crit is what this study measured."
    )
