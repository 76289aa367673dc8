"""The gradient noise scale: the estimator's formulas, the monitor's averages, the estimate
against per-example gradients, the same estimate for 2 ranks x b and 1 rank x 2 b, and the
history columns of a run."""

from __future__ import annotations

import json
import math
from dataclasses import asdict

import numpy as np
import pytest
import tensorflow as tf
from helpers import (
    TINY_RECIPE,
    horovodrun,
    pooled_linear_replica,
    python_script,
    synthetic_batch,
)

import train
from bigearthnet.core import distributed
from bigearthnet.formats.efficiency import read_efficiency
from bigearthnet.formats.history import read_history
from bigearthnet.training.gns import (
    NoiseEstimate,
    NoiseSample,
    NoiseScaleMonitor,
    adascale_gain,
    unbiased,
    verdict,
)
from bigearthnet.training.replica import bce_loss


def _expected_sample(grad_sq: float, trace: float, small: int, big: int) -> NoiseSample:
    """Norms as their expectations E|g_B|^2 = |G|^2 + tr(S)/B."""
    return NoiseSample(
        small_sq=grad_sq + trace / small, big_sq=grad_sq + trace / big, b_small=small, b_big=big
    )


def test_two_batch_estimates_invert_the_expectations():
    assert unbiased(_expected_sample(2.0, 300.0, 8, 32)) == pytest.approx((2.0, 300.0))
    assert unbiased(_expected_sample(2.0, 300.0, 8, 8)) is None  # one size: nothing to say


def test_monitor_averages_apart_with_bias_correction():
    monitor = NoiseScaleMonitor(decay=0.9)
    assert monitor.estimate() is None
    monitor.add(_expected_sample(2.0, 300.0, 8, 16))
    first = monitor.estimate()
    assert first is not None
    assert (first.grad_sq, first.trace) == pytest.approx((2.0, 300.0))  # not 10x too small
    assert first.b_simple == pytest.approx(150.0)
    monitor.add(NoiseSample(small_sq=math.nan, big_sq=1.0, b_small=8, b_big=16))  # fp16 overflow
    monitor.add(_expected_sample(1.0, 300.0, 8, 8))  # a one-rank moment of an elastic run
    assert (monitor.updates, monitor.skipped) == (1, 2)
    # Averaging the ratio would not give the ratio of the averages: 0.5(100 + 400) != 200.
    monitor = NoiseScaleMonitor(decay=0.5)
    monitor.add(_expected_sample(3.0, 300.0, 8, 16))
    monitor.add(_expected_sample(1.0, 400.0, 8, 16))
    estimate = monitor.estimate()
    assert estimate is not None
    assert estimate.b_simple == pytest.approx((300 / 3 + 400 * 2 / 3) / (3 / 3 + 2 / 3))


def test_verdict_says_which_side_of_the_critical_batch():
    assert verdict(1840.0, 512) == "B_simple 1,840 vs global batch 512: larger batches still pay"
    assert "past the critical batch" in verdict(100.0, 512)
    assert verdict(None, 64).startswith("B_simple n/a")


def _per_example_truth(replica, images, labels) -> tuple[float, float]:
    """|G|^2 and tr(S) of the dataset from every sample's own gradient (population
    covariance: batches below are drawn with replacement)."""
    variables = replica.model.trainable_variables
    x = (images.astype(np.float32) - 1000.0) / 300.0
    flat = []
    for i in range(len(images)):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(
                bce_loss(labels[i : i + 1].astype(np.float32), replica.model(x[i : i + 1]))
            )
        grads = tape.gradient(loss, variables)
        flat.append(np.concatenate([g.numpy().ravel() for g in grads]).astype(np.float64))
    per_example = np.stack(flat)
    mean = per_example.mean(axis=0)
    trace = float(((per_example - mean) ** 2).sum(axis=1).mean())
    return float(mean @ mean), trace


def test_estimate_matches_per_example_gradients():
    """On a model whose weights do not move (LR ~0), batches of 8 drawn with replacement and
    accumulated 4 at a time: the averaged estimates agree with |G|^2 and tr(S) computed from
    all 256 per-example gradients, within their statistical error."""
    distributed.init(threads=1)
    replica = pooled_linear_replica(batch_size=8, passes=4, lr=1e-12, gns_decay=0.999)
    images, labels = synthetic_batch(256, seed=11)
    grad_sq, trace = _per_example_truth(replica, images, labels)
    rng = np.random.default_rng(0)
    estimates = []
    for _ in range(400):
        for micro in range(4):
            pick = rng.integers(0, len(images), size=8)
            result = replica.train_step(
                tf.constant(images[pick]),
                tf.constant(labels[pick]),
                seed=tf.constant([0, 0], tf.int64),
                stop=False,
                apply=micro == 3,
            )
        assert result.noise is not None and (result.noise.b_small, result.noise.b_big) == (8, 32)
        estimates.append(unbiased(result.noise))
    per_update = np.array(estimates)
    mean, sem = per_update.mean(axis=0), per_update.std(axis=0) / math.sqrt(len(per_update))
    assert abs(mean[0] - grad_sq) < 4 * sem[0], (mean[0], grad_sq, sem[0])
    assert abs(mean[1] - trace) < 4 * sem[1], (mean[1], trace, sem[1])
    monitor = replica.noise.estimate()
    assert monitor is not None
    assert monitor.b_simple == pytest.approx(trace / grad_sq, rel=0.1)


@pytest.mark.slow  # 51 s of make test: 2 ranks under horovodrun and two runs beside
@pytest.mark.horovod
def test_two_ranks_and_two_accumulated_passes_measure_the_same(tmp_path):
    """The same global batch of 8 as 2 ranks x 4 and as 1 rank x 2 accumulated 4: the same
    norms, batch sizes and weights after every update."""
    results = {}
    for ranks, passes in ((2, 1), (1, 2)):
        out = tmp_path / f"{ranks}x{passes}.json"
        probe = ["tests/noise_probe.py", str(out), "--passes", str(passes)]
        # One rank needs no launcher: Horovod alone is a world of 1.
        run = horovodrun(ranks, *probe) if ranks > 1 else python_script(*probe)
        assert run.returncode == 0, run.stderr[-3000:]
        results[ranks] = json.loads(out.read_text())
    two_ranks, accumulated = results[2], results[1]
    for a, b in zip(two_ranks["samples"], accumulated["samples"]):
        assert (a["b_small"], a["b_big"]) == (b["b_small"], b["b_big"]) == (4, 8)
        assert a["small_sq"] == pytest.approx(b["small_sq"], rel=1e-5)
        assert a["big_sq"] == pytest.approx(b["big_sq"], rel=1e-5)
        assert a["small_sq"] > a["big_sq"]  # averaging cancels noise
    assert len(two_ranks["samples"]) == 6
    assert two_ranks["weights"] == accumulated["weights"]


def test_a_run_writes_the_noise_scale(tmp_path, shards_v1, trained_run):
    """1 rank x 2 accumulated batches: B_simple in history.csv, efficiency.json and the log;
    one rank without accumulation (the session's trained_run): "n/a", never a made-up
    number."""
    argv = ["--data", str(shards_v1), "--epochs", "2", "--no-eval-test", *TINY_RECIPE]
    assert (
        train.main([*argv, "--run-dir", str(tmp_path / "acc"), "--backward-passes-per-step", "2"])
        == 0
    )
    rows = read_history(tmp_path / "acc")
    assert all(r.gns_b_simple is not None and r.gns_trace is not None for r in rows)
    assert all(r.global_batch == 16 for r in rows)
    report = asdict(read_efficiency(tmp_path / "acc"))["gradient_noise"]
    assert report["measured"] and report["updates_averaged"] == 2 * 9
    rows = read_history(trained_run)
    assert rows and all(r.gns_b_simple is None and r.gns_grad_sq is None for r in rows)


def test_adascale_gain_goes_from_linear_scaling_to_none():
    """r = (tr(S)/b + |G|^2) / (tr(S)/(s b) + |G|^2): ~s while noise dominates, ~1 when the
    gradient does; 1 before any estimate; clipped to [1, s]."""
    noisy = NoiseEstimate(grad_sq=1.0, trace=1000.0, updates=5)  # B_simple 1000, batch 10
    assert adascale_gain(noisy, base_batch=10, scale=4) == pytest.approx(101 / 26)
    quiet = NoiseEstimate(grad_sq=1.0, trace=0.01, updates=5)  # B_simple 0.01
    assert adascale_gain(quiet, base_batch=10, scale=4) == pytest.approx(1.0, abs=1e-3)
    assert adascale_gain(None, base_batch=10, scale=4) == 1.0
    assert adascale_gain(NoiseEstimate(-1.0, 50.0, 1), base_batch=10, scale=4) == 4.0
    assert adascale_gain(NoiseEstimate(1.0, -50.0, 1), base_batch=10, scale=4) == 1.0


def test_monitor_state_round_trips_for_elastic_workers():
    monitor = NoiseScaleMonitor(decay=0.9)
    for trace in (300.0, 500.0):
        monitor.add(_expected_sample(2.0, trace, 8, 16))
    joined = NoiseScaleMonitor(decay=0.9)
    joined.restore(monitor.snapshot())
    assert joined.estimate() == monitor.estimate()


def test_adascale_lr_follows_the_measured_gain(tmp_path, shards_v1):
    """1 rank x 2 accumulated passes (scale 2), constant schedule: the LR in history.csv is
    the base LR times the gain of the run's final noise estimate, inside (1, 2]."""
    run = tmp_path / "adascale"
    argv = ["--data", str(shards_v1), "--run-dir", str(run), "--epochs", "2", "--no-eval-test"]
    extra = [
        "--backward-passes-per-step",
        "2",
        "--lr-scaling",
        "adascale",
        "--schedule",
        "constant",
    ]
    assert train.main([*argv, *TINY_RECIPE, *extra]) == 0
    base_lr = float(TINY_RECIPE[TINY_RECIPE.index("--lr") + 1])
    report = asdict(read_efficiency(run))["gradient_noise"]
    final = NoiseEstimate(report["grad_sq"], report["trace"], report["updates_averaged"])
    rank_batch = read_history(run)[-1].global_batch // 2
    gain = adascale_gain(final, base_batch=rank_batch, scale=2)
    assert 1.0 < gain <= 2.0
    assert read_history(run)[-1].lr == pytest.approx(base_lr * gain, rel=1e-5)
    assert train.main([*argv, *TINY_RECIPE, "--lr-scaling", "adascale", "--no-gns"]) == 2
