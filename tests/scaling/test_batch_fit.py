"""The critical-batch fit: recovers B_crit from points of the model with noise, refuses
points that do not determine it, and turns the fit into job sizes and costs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bigearthnet.scaling.batch_fit import (
    EFFICIENCY,
    NoFit,
    TradeoffFit,
    compare_noise_scale,
    fit_tradeoff,
    recommend,
)

BATCHES = np.array([16, 32, 64, 128, 256, 512, 1024, 2048])


def model_points(s_min: float, b_crit: float, noise: float, seed: int) -> np.ndarray:
    """Steps S = S_min (1 + B_crit/B) with multiplicative log-normal noise."""
    rng = np.random.default_rng(seed)
    return s_min * (1 + b_crit / BATCHES) * np.exp(rng.normal(0.0, noise, len(BATCHES)))


@pytest.mark.parametrize("b_crit", [60.0, 300.0])
def test_recovers_b_crit_within_its_interval(b_crit):
    """20 noisy studies of 8 points (8 % noise per point): the 95 % bootstrap interval holds
    the true B_crit in at least 16 (with 8 points the pairs bootstrap undercovers: 85-92 %
    in 60 simulated studies), and every estimate is within 30 %."""
    covered = 0
    for seed in range(20):
        fit = fit_tradeoff(BATCHES, model_points(40.0, b_crit, 0.08, seed), resamples=300)
        assert isinstance(fit, TradeoffFit)
        low, high = fit.b_crit_interval
        covered += low <= b_crit <= high
        assert abs(fit.b_crit / b_crit - 1) < 0.3
        assert low < fit.b_crit < high and fit.points == len(BATCHES)
    assert covered >= 16


def test_exact_points_give_the_exact_model():
    fit = fit_tradeoff(BATCHES, 25.0 * (1 + 200.0 / BATCHES), resamples=50)
    assert isinstance(fit, TradeoffFit)
    assert fit.s_min == pytest.approx(25.0, rel=1e-6) and fit.b_crit == pytest.approx(200.0)
    assert fit.e_min == pytest.approx(5000.0)
    # At B_crit: twice the minimal steps and twice the minimal examples.
    assert fit.steps(200.0) == pytest.approx(2 * fit.s_min)
    assert fit.examples(200.0) == pytest.approx(2 * fit.e_min)
    assert fit.efficiency(fit.batch_at(EFFICIENCY)) == pytest.approx(EFFICIENCY)


def test_points_that_missed_the_target_are_left_out():
    steps = list(25.0 * (1 + 200.0 / BATCHES))
    steps[-1] = None  # 2,048 did not reach the target
    fit = fit_tradeoff(BATCHES, steps, resamples=50)
    assert isinstance(fit, TradeoffFit) and fit.points == len(BATCHES) - 1
    assert fit.b_crit == pytest.approx(200.0)


@pytest.mark.parametrize(
    "steps, reason",
    [
        ([150, 80, None, None, None, None, None, None], "only 2 batch size(s) reached"),
        ([20, 21, 20, 19, 20, 21, 19, 20], "do not fall with the batch size"),
        (list(8192.0 / BATCHES), "above the largest batch measured"),
    ],
)
def test_refuses_points_that_do_not_determine_b_crit(steps, reason):
    result = fit_tradeoff(BATCHES, steps)
    assert isinstance(result, NoFit) and reason in result.reason


def test_recommendation_in_whole_ranks_with_its_cost():
    fit = fit_tradeoff(BATCHES, 25.0 * (1 + 1000.0 / BATCHES), resamples=50)
    assert isinstance(fit, TradeoffFit)
    scaling, critical = recommend(fit, rank_batch=64, samples_per_s_per_rank=100.0)
    # 80 % of perfect scaling: B <= B_crit / 4 = 250 -> 3 ranks of 64 = 192.
    assert (scaling.global_batch, scaling.ranks) == (192, 3)
    assert scaling.efficiency >= EFFICIENCY and critical.efficiency < EFFICIENCY
    assert (critical.global_batch, critical.ranks) == (960, 15)
    assert scaling.examples == pytest.approx(192 * 25.0 * (1 + 1000.0 / 192))
    assert scaling.accelerator_hours == pytest.approx(scaling.examples / 100.0 / 3600)
    assert scaling.wall_hours == pytest.approx(scaling.accelerator_hours / 3)
    (unmeasured, _) = recommend(fit, rank_batch=64, samples_per_s_per_rank=None)
    assert unmeasured.accelerator_hours is None and unmeasured.global_batch == 192
    # Below one rank's batch: one rank with a smaller batch, still >= 80 %.
    (small, _) = recommend(fit, rank_batch=512, samples_per_s_per_rank=None)
    assert (small.ranks, small.rank_batch, small.global_batch) == (1, 250, 250)
    assert small.efficiency >= EFFICIENCY


def test_noise_scale_compared_in_words():
    fit = fit_tradeoff(BATCHES, 25.0 * (1 + 200.0 / BATCHES), resamples=20)
    assert isinstance(fit, TradeoffFit)
    assert "10.0x larger than the measured B_simple 20" in compare_noise_scale(fit, 20.0)
    assert "about equal to" in compare_noise_scale(fit, 150.0)
    assert "2.5x smaller than" in compare_noise_scale(fit, 500.0)
    assert "no gradient noise scale" in compare_noise_scale(fit, None)
    assert "no gradient noise scale" in compare_noise_scale(fit, math.nan)
