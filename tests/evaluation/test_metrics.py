"""bigearthnet.evaluation.metrics: sklearn parity and the multi-rank (summed counts) property."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import tensorflow as tf
from sklearn.metrics import (
    average_precision_score,
    f1_score,
    precision_recall_fscore_support,
    precision_score,
    recall_score,
)

from bigearthnet.evaluation.metrics import (
    class_counts,
    constant_micro_f1,
    f1_from_counts,
    full_report,
    predict,
    tf_class_counts,
    tune_thresholds,
)

SEEDS = [0, 1, 2, 3, 4]
TIGHT = {"rel": 1e-12, "abs": 1e-15}


def random_case(seed: int, n: int = 200, c: int = 9) -> tuple[np.ndarray, np.ndarray]:
    """Random multi-hot labels and scores with the awkward columns sklearn special-cases."""
    rng = np.random.default_rng(seed)
    y_true = (rng.random((n, c)) < rng.uniform(0.05, 0.6, size=c)).astype(np.int64)
    y_score = rng.random((n, c))
    y_true[:, 0] = 0  # zero support, some predictions (only false positives)
    y_score[:, 1] = 0.1 * y_score[:, 1]  # support but zero predictions at 0.5
    y_true[:, 2], y_score[:, 2] = 0, 0.0  # neither support nor predictions: 0/0 everywhere
    return y_true, y_score


def sklearn_scores(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """scikit-learn's figures under the project's rule: macro over the classes that have
    positives (``labels``), micro over all."""
    supported = np.flatnonzero(np.asarray(y_true).sum(axis=0) > 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out: dict[str, float] = {"macro_classes": len(supported)}
        for avg, labels in (("micro", None), ("macro", supported)):
            kw = {"average": avg, "zero_division": 0, "labels": labels}
            out[f"{avg}_f1"] = f1_score(y_true, y_pred, **kw)
            out[f"{avg}_precision"] = precision_score(y_true, y_pred, **kw)
            out[f"{avg}_recall"] = recall_score(y_true, y_pred, **kw)
    return out


# ----------------------------------------------------------------- counts + F1


@pytest.mark.parametrize("seed", SEEDS)
def test_class_counts_match_sklearn_confusion(seed: int) -> None:
    y_true, y_score = random_case(seed)
    pred = y_score >= 0.5
    tp, fp, fn = class_counts(y_true, y_score)
    np.testing.assert_array_equal(tp, (y_true.astype(bool) & pred).sum(0))
    np.testing.assert_array_equal(fp, (~y_true.astype(bool) & pred).sum(0))
    np.testing.assert_array_equal(fn, (y_true.astype(bool) & ~pred).sum(0))
    _, _, _, support = precision_recall_fscore_support(y_true, pred, average=None, zero_division=0)
    np.testing.assert_array_equal(tp + fn, support)
    assert class_counts(y_true, y_score).dtype == np.int64


@pytest.mark.parametrize("seed", SEEDS)
def test_f1_from_counts_equals_sklearn(seed: int) -> None:
    y_true, y_score = random_case(seed)
    got = f1_from_counts(class_counts(y_true, y_score))
    want = sklearn_scores(y_true, y_score >= 0.5)
    assert set(got) == set(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, **TIGHT), key
        assert type(got[key]) is (int if key == "macro_classes" else float)


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_per_class_threshold_counts_equal_sklearn(seed: int) -> None:
    y_true, y_score = random_case(seed)
    thr = np.linspace(0.1, 0.9, y_true.shape[1])
    pred = y_score >= thr[None, :]
    np.testing.assert_array_equal(predict(y_score, thr), pred)
    got = f1_from_counts(class_counts(y_true, y_score, thr))
    for key, value in sklearn_scores(y_true, pred).items():
        assert got[key] == pytest.approx(value, **TIGHT), key


def test_bad_shapes_raise() -> None:
    with pytest.raises(ValueError):
        class_counts(np.zeros((4, 3)), np.zeros((4, 2)))
    with pytest.raises(ValueError):
        class_counts(np.zeros((4, 3)), np.zeros((4, 3)), threshold=[0.5, 0.5])
    with pytest.raises(ValueError):
        f1_from_counts(np.zeros((2, 3)))


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_tf_class_counts_equal_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    y_true, _ = random_case(seed)
    logits = rng.normal(scale=3.0, size=y_true.shape).astype(np.float32)
    probs = tf.sigmoid(logits).numpy()  # the same float32 probabilities the model reports
    thr = np.array([0.5, 0.25, 0.75, 0.5, 0.125, 0.375, 0.625, 0.875, 0.5])  # exact in float32

    counts_fn = tf.function(tf_class_counts)
    for threshold in (0.5, thr):
        got = counts_fn(tf.constant(y_true), tf.constant(logits), threshold)
        assert got.dtype == tf.float32 and got.shape == (3, y_true.shape[1])
        np.testing.assert_array_equal(got.numpy(), class_counts(y_true, probs, threshold))


def test_tf_class_counts_accumulate_over_batches() -> None:
    y_true, _ = random_case(7, n=256)
    logits = np.random.default_rng(7).normal(size=y_true.shape).astype(np.float32)
    total = tf.Variable(tf.zeros((3, y_true.shape[1])))

    @tf.function
    def update(y: tf.Tensor, z: tf.Tensor) -> None:
        total.assign_add(tf_class_counts(y, z))

    for batch in tf.data.Dataset.from_tensor_slices((y_true, logits)).batch(50):
        update(*batch)
    want = class_counts(y_true, tf.sigmoid(logits).numpy())
    np.testing.assert_array_equal(total.numpy(), want)


# ------------------------------------------------------- the multi-rank property


@pytest.mark.parametrize("seed", SEEDS)
def test_summed_counts_over_shards_equal_whole(seed: int) -> None:
    y_true, y_score = random_case(seed, n=301)  # odd n: unequal shards, like real ranks
    shards = np.array_split(np.arange(len(y_true)), 3)
    summed = sum(class_counts(y_true[i], y_score[i]) for i in shards)
    np.testing.assert_array_equal(summed, class_counts(y_true, y_score))
    whole = sklearn_scores(y_true, y_score >= 0.5)
    for key, value in f1_from_counts(summed).items():
        assert value == pytest.approx(whole[key], **TIGHT), key


def test_averaging_per_rank_f1_is_wrong() -> None:
    # Rank 0 holds one positive of class 0 and gets it right; rank 1 holds four and misses
    # them all. Class 1 is never present nor predicted (it keeps sklearn in multi-label mode).
    y_true_a, y_score_a = np.array([[1, 0]]), np.array([[0.9, 0.0]])
    y_true_b, y_score_b = np.tile([1, 0], (4, 1)), np.full((4, 2), 0.1)
    counts_a = class_counts(y_true_a, y_score_a)
    counts_b = class_counts(y_true_b, y_score_b)

    averaged = np.mean([f1_from_counts(c)["micro_f1"] for c in (counts_a, counts_b)])
    summed = f1_from_counts(counts_a + counts_b)["micro_f1"]
    whole = f1_score(
        np.vstack([y_true_a, y_true_b]), np.vstack([y_score_a, y_score_b]) >= 0.5, average="micro"
    )
    assert summed == pytest.approx(whole) == pytest.approx(1 / 3)  # 2*1 / (2*1 + 0 + 4)
    assert averaged == pytest.approx(0.5)
    assert averaged != pytest.approx(whole)


# -------------------------------------------------------------------- full report


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_full_report_matches_sklearn(seed: int) -> None:
    y_true, y_score = random_case(seed)
    names = [f"class {c}" for c in range(y_true.shape[1])]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the report must not spam warnings
        report = full_report(y_true, y_score, 0.5, names)
    pred = y_score >= 0.5

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for avg in ("micro", "samples", "weighted"):
            want = f1_score(y_true, pred, average=avg, zero_division=0)
            assert report[f"{avg}_f1"] == pytest.approx(want, **TIGHT), avg
        for key, value in sklearn_scores(y_true, pred).items():
            assert report[key] == pytest.approx(value, **TIGHT), key
        p, r, f, s = precision_recall_fscore_support(y_true, pred, average=None, zero_division=0)

    has_pos = y_true.any(axis=0)
    ap = [average_precision_score(y_true[:, c], y_score[:, c]) for c in np.flatnonzero(has_pos)]
    assert report["macro_map"] == pytest.approx(np.mean(ap), **TIGHT)
    assert report["micro_map"] == pytest.approx(
        average_precision_score(y_true, y_score, average="micro"), **TIGHT
    )
    assert report["count"] == len(y_true)
    assert report["threshold"] == 0.5
    assert report["classes"] == names

    per_class = report["per_class"]
    assert [row["index"] for row in per_class] == list(range(y_true.shape[1]))
    for c, row in enumerate(per_class):
        assert row["class"] == names[c]
        assert row["support"] == s[c]
        assert (row["precision"], row["recall"], row["f1"]) == pytest.approx((p[c], r[c], f[c]))
        assert (row["ap"] is None) == (not has_pos[c])
    assert [row["ap"] for row in per_class if row["ap"] is not None] == pytest.approx(ap)
    json.dumps(report, allow_nan=False)  # plain JSON, no NaN, no numpy scalars


def test_full_report_macro_map_equals_sklearn_when_every_class_has_positives() -> None:
    rng = np.random.default_rng(11)
    y_true = (rng.random((100, 5)) < 0.3).astype(int)
    y_true[0] = 1
    y_score = np.clip(0.6 * y_true + 0.5 * rng.random(y_true.shape), 0, 1)
    report = full_report(y_true, y_score)
    assert report["macro_map"] == pytest.approx(
        average_precision_score(y_true, y_score, average="macro"), **TIGHT
    )
    assert report["classes"] == ["0", "1", "2", "3", "4"]


def test_full_report_per_class_thresholds() -> None:
    y_true, y_score = random_case(3)
    thr = np.linspace(0.2, 0.8, y_true.shape[1])
    report = full_report(y_true, y_score, thr)
    assert report["threshold"] == pytest.approx(list(thr))
    assert isinstance(report["threshold"], list)
    assert all(type(t) is float for t in report["threshold"])
    supported = np.flatnonzero(y_true.any(axis=0))
    want = f1_score(y_true, y_score >= thr, labels=supported, average="macro", zero_division=0)
    assert report["macro_f1"] == pytest.approx(want, **TIGHT)
    json.dumps(report, allow_nan=False)


def test_one_rule_for_every_macro_average() -> None:
    """On a split where most classes have no positive, macro F1, precision, recall and AP
    all average over the same classes (those with positives), as scikit-learn does with
    ``labels``; before, F1 counted the absent classes as 0 while AP skipped them."""
    rng = np.random.default_rng(5)
    y_true = np.zeros((300, 19), dtype=int)
    present = [0, 3, 7, 8, 11, 15, 18]
    y_true[:, present] = rng.random((300, len(present))) < 0.4
    y_score = np.clip(0.7 * y_true + 0.4 * rng.random(y_true.shape), 0, 1)
    report = full_report(y_true, y_score)
    assert report["macro_classes"] == len(present)
    pred = y_score >= 0.5
    for name, score in (("f1", f1_score), ("precision", precision_score), ("recall", recall_score)):
        want = score(y_true, pred, labels=present, average="macro", zero_division=0)
        assert report[f"macro_{name}"] == pytest.approx(want, **TIGHT), name
    assert report["macro_map"] == pytest.approx(
        average_precision_score(y_true[:, present], y_score[:, present], average="macro"), **TIGHT
    )
    counts = f1_from_counts(class_counts(y_true, y_score))
    assert counts["macro_f1"] == pytest.approx(report["macro_f1"], **TIGHT)
    assert counts["macro_classes"] == len(present)
    assert report["macro_f1"] > 0.9  # absent classes no longer drag it to ~0.35


def test_full_report_rejects_wrong_number_of_names() -> None:
    y_true, y_score = random_case(0)
    with pytest.raises(ValueError):
        full_report(y_true, y_score, 0.5, ["only one"])


# -------------------------------------------------------------------- thresholds


def miscalibrated_case(seed: int, n: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Class 0 is well calibrated; class 1's scores are squashed below 0.5; class 2 is empty."""
    rng = np.random.default_rng(seed)
    y_true = (rng.random((n, 3)) < 0.3).astype(int)
    y_true[:, 2] = 0
    y_score = np.clip(0.35 * y_true + 0.65 * rng.random((n, 3)) ** 2, 0, 1)
    y_score[:, 1] *= 0.5  # a positive now scores at most ~0.5: threshold 0.5 misses nearly all
    return y_true, y_score


def test_tune_thresholds_improves_validation_f1() -> None:
    y_val, s_val = miscalibrated_case(0)
    thr = tune_thresholds(y_val, s_val)
    assert thr.shape == (3,)
    assert thr[1] < 0.5  # the squashed class needs a lower threshold
    assert thr[2] == 0.5  # no positives: keep the default
    assert np.all(np.isin(np.round(thr, 2), np.round(np.arange(0.05, 0.951, 0.05), 2)))

    def macro_f1(y: np.ndarray, s: np.ndarray, t: np.ndarray | float) -> float:
        return f1_from_counts(class_counts(y, s, t))["macro_f1"]

    assert macro_f1(y_val, s_val, thr) > macro_f1(y_val, s_val, 0.5) + 0.1
    # Tuned on validation, the gain carries over to fresh data from the same distribution.
    y_test, s_test = miscalibrated_case(1)
    assert macro_f1(y_test, s_test, thr) > macro_f1(y_test, s_test, 0.5) + 0.1


def test_tune_thresholds_is_per_class_optimal_on_grid() -> None:
    y_true, y_score = miscalibrated_case(2, n=500)
    grid = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    thr = tune_thresholds(y_true, y_score, grid)
    for c in range(2):
        f1s = [f1_score(y_true[:, c], y_score[:, c] >= t, zero_division=0) for t in grid]
        assert f1_score(y_true[:, c], y_score[:, c] >= thr[c]) == pytest.approx(max(f1s))


def test_tune_thresholds_tie_prefers_centre() -> None:
    # Perfectly separated scores: every threshold in (0.2, 0.8] gives F1 = 1.
    y_true = np.array([[1], [0], [1], [0]])
    y_score = np.array([[0.9], [0.1], [0.85], [0.15]])
    assert tune_thresholds(y_true, y_score)[0] == pytest.approx(0.5)


def test_the_best_constant_answer_is_the_best_k_most_frequent_classes() -> None:
    """constant_micro_f1 equals the brute force over k (reBEN's test split: 0.446)."""
    rng = np.random.default_rng(3)
    truth = rng.random((500, 19)) < np.linspace(0.6, 0.01, 19)
    order = np.argsort(-truth.sum(axis=0), kind="stable")
    best = 0.0
    for k in range(1, 20):
        pred = np.zeros_like(truth)
        pred[:, order[:k]] = True
        tp, fp, fn = (pred & truth).sum(), (pred & ~truth).sum(), (~pred & truth).sum()
        best = max(best, 2 * tp / (2 * tp + fp + fn))
    assert constant_micro_f1(truth) == pytest.approx(best)
    assert full_report(truth, truth.astype(float))["constant_micro_f1"] == pytest.approx(best)
