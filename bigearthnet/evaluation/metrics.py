"""Multi-label classification metrics that stay correct when data is split over ranks.

With Horovod every rank sees a different shard of the evaluation data. A ratio such
as F1 computed per rank and then averaged is *not* the F1 of the whole data set: the
ranks hold different numbers of positives, and F1 is not linear in its counts. This
module therefore works in two stages:

* **Counts** - :func:`class_counts` (NumPy) and :func:`tf_class_counts` (TensorFlow,
  for use inside a ``tf.function`` during training) return per-class true positives,
  false positives and false negatives. Counts are additive, so ranks allreduce(sum)
  them and every rank then derives identical metrics with :func:`f1_from_counts`.
* **Scores** - ranking metrics (average precision) cannot be built from counts at one
  threshold. :func:`full_report` expects the scores of the whole evaluation set,
  gathered from all ranks (e.g. ``hvd.allgather``) before the call.

Every ratio follows scikit-learn's conventions with ``zero_division=0``: a precision,
recall or F1 whose denominator is zero counts as 0.

**One rule for macro averages**: F1, precision, recall and AP alike are averaged over the
classes that have at least one positive in the scored split (:func:`supported_classes`),
and reports say how many that was (``macro_classes``). A class the split does not contain
has no recall and no AP; counting it as 0 for F1 but skipping it for AP made the two macro
figures of one report disagree (0.355 against 0.985 on a split missing 11 of 19 classes).
:func:`f1_from_counts` reproduces ``sklearn.metrics.{f1,precision,recall}_score(average=
"micro"|"macro", labels=supported)`` exactly, and the tests check it.

Labels are multi-hot; soft labels (label smoothing, mix-up) are binarised at 0.5.
Predictions are ``score >= threshold`` with a scalar or per-class threshold;
:func:`tune_thresholds` picks per-class thresholds on validation data.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.metrics import (
    average_precision_score,
    f1_score,
    precision_recall_fscore_support,
    precision_score,
    recall_score,
)

if TYPE_CHECKING:  # TensorFlow only inside tf_class_counts: reports need none of it
    import tensorflow as tf

Threshold = Union[float, Sequence[float], np.ndarray]
"""A scalar threshold for every class or one threshold per class."""

COUNT_ROWS = ("tp", "fp", "fn")
"""Row order of the (3, C) count arrays."""

DEFAULT_GRID = np.round(np.arange(0.05, 0.951, 0.05), 2)
"""Thresholds :func:`tune_thresholds` tries by default: 0.05, 0.10, ..., 0.95."""


# --------------------------------------------------------------------------- counts


def _as_2d(y_true: Any, y_score: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate shapes and binarise the labels (soft labels count as positive above 0.5)."""
    y_true = np.asarray(y_true)
    y_score = np.asarray(y_score, dtype=np.float64)
    if y_true.ndim != 2 or y_true.shape != y_score.shape:
        raise ValueError(
            f"y_true and y_score must be 2-D arrays of equal shape (N, C), "
            f"got {y_true.shape} and {y_score.shape}"
        )
    return y_true > 0.5, y_score


def _as_threshold(threshold: Threshold, num_classes: int) -> np.ndarray:
    """Return the threshold as a scalar or a (C,) array that broadcasts over (N, C)."""
    t = np.asarray(threshold, dtype=np.float64)
    if t.ndim == 0:
        return t
    if t.shape != (num_classes,):
        raise ValueError(f"per-class threshold must have shape ({num_classes},), got {t.shape}")
    return t


def predict(y_score: Any, threshold: Threshold = 0.5) -> np.ndarray:
    """Binary predictions ``score >= threshold`` (scalar or per-class threshold)."""
    y_score = np.asarray(y_score, dtype=np.float64)
    return y_score >= _as_threshold(threshold, y_score.shape[-1])


def class_counts(y_true: Any, y_score: Any, threshold: Threshold = 0.5) -> np.ndarray:
    """Per-class TP, FP and FN as an int64 array of shape (3, C), rows in ``COUNT_ROWS`` order.

    ``y_score`` are probabilities; a sample is predicted positive for a class when its
    score is ``>= threshold``. Sum these arrays over batches or ranks, never the ratios.
    """
    truth, y_score = _as_2d(y_true, y_score)
    pred = y_score >= _as_threshold(threshold, truth.shape[1])
    tp = np.sum(truth & pred, axis=0)
    fp = np.sum(~truth & pred, axis=0)
    fn = np.sum(truth & ~pred, axis=0)
    return np.stack([tp, fp, fn]).astype(np.int64)


def tf_class_counts(
    y_true: tf.Tensor, logits: tf.Tensor, threshold: Threshold = 0.5, dtype: tf.DType | None = None
) -> tf.Tensor:
    """TF version of :func:`class_counts` on logits, for accumulation inside a ``tf.function``.

    The threshold applies to ``sigmoid(logits)``, the same probabilities the model
    reports at evaluation (thresholds are compared in float32, so a per-class threshold
    that float32 cannot represent may flip a score lying exactly on it). The result
    defaults to float32 so it can go straight into a Keras metric variable or
    ``hvd.allreduce(..., op=hvd.Sum)``; float32 counts are exact up to 2**24 (16.7 M)
    per class, far above BigEarthNet's ~590 k patches.
    """
    import tensorflow as tf

    dtype = tf.float32 if dtype is None else dtype
    truth = tf.cast(y_true, tf.float32) > 0.5
    prob = tf.sigmoid(tf.cast(logits, tf.float32))
    pred = prob >= tf.cast(threshold, tf.float32)

    def count(mask: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(tf.cast(mask, dtype), axis=0)

    not_truth, not_pred = tf.logical_not(truth), tf.logical_not(pred)
    return tf.stack(
        [
            count(tf.logical_and(truth, pred)),
            count(tf.logical_and(not_truth, pred)),
            count(tf.logical_and(truth, not_pred)),
        ]
    )


# --------------------------------------------------------------------- count ratios


def _safe_div(num: np.ndarray | float, den: np.ndarray | float) -> np.ndarray:
    """num / den with 0 where den == 0, scikit-learn's ``zero_division=0``."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    return np.divide(num, den, out=np.zeros(np.broadcast(num, den).shape), where=den != 0)


def per_class_from_counts(counts: Any) -> dict[str, np.ndarray]:
    """Per-class precision, recall and F1 (each shape (C,)) from (3, C) counts."""
    tp, fp, fn = np.asarray(counts, dtype=np.float64)
    return {
        "precision": _safe_div(tp, tp + fp),
        "recall": _safe_div(tp, tp + fn),
        # sklearn computes F1 as 2tp / (2tp + fp + fn), not from the rounded P and R.
        "f1": _safe_div(2 * tp, 2 * tp + fp + fn),
    }


def supported_classes(positives: Any) -> np.ndarray:
    """Indices of the classes with at least one positive (``positives``: per-class counts of
    positives, TP + FN): the classes every macro average runs over."""
    return np.flatnonzero(np.asarray(positives) > 0)


def _macro(values: np.ndarray, supported: np.ndarray) -> float:
    """The mean of ``values`` over the supported classes (0 when the split has none)."""
    return float(np.mean(values[supported])) if supported.size else 0.0


def f1_from_counts(counts: Any) -> dict[str, float]:
    """Micro and macro precision, recall and F1 from (3, C) counts summed over all data.

    Micro pools the counts of all classes; macro is the unweighted mean of the per-class
    values over the classes with positives (:func:`supported_classes`), exactly as
    scikit-learn with ``zero_division=0`` and ``labels`` = those classes.
    """
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 2 or counts.shape[0] != 3:
        raise ValueError(f"counts must have shape (3, C), got {counts.shape}")
    tp, fp, fn = counts.sum(axis=1)
    per_class = per_class_from_counts(counts)
    supported = supported_classes(counts[0] + counts[2])
    return {
        "micro_f1": float(_safe_div(2 * tp, 2 * tp + fp + fn)),
        "macro_f1": _macro(per_class["f1"], supported),
        "micro_precision": float(_safe_div(tp, tp + fp)),
        "micro_recall": float(_safe_div(tp, tp + fn)),
        "macro_precision": _macro(per_class["precision"], supported),
        "macro_recall": _macro(per_class["recall"], supported),
        "macro_classes": int(supported.size),
    }


# -------------------------------------------------------------------- full report


def _threshold_for_json(threshold: np.ndarray) -> float | list[float]:
    return float(threshold) if threshold.ndim == 0 else [float(t) for t in threshold]


def _optional_float(value: float) -> float | None:
    """NaN becomes None so the report stays strict JSON."""
    return None if np.isnan(value) else float(value)


def _per_class_ap(truth: np.ndarray, y_score: np.ndarray) -> np.ndarray:
    """AP per class; NaN for classes without positives, where AP is undefined."""
    ap = np.full(truth.shape[1], np.nan)
    for c in np.flatnonzero(truth.any(axis=0)):
        ap[c] = average_precision_score(truth[:, c], y_score[:, c])
    return ap


def average_precisions(y_true: Any, y_score: Any) -> tuple[float | None, float | None]:
    """(micro mAP, macro mAP) of gathered scores, as :func:`full_report` computes them
    (validation in training uses this, so its mAPs equal the test report's)."""
    truth, y_score = _as_2d(y_true, y_score)
    return _mean_precisions(truth, y_score, _per_class_ap(truth, y_score))


def _mean_precisions(
    truth: np.ndarray, y_score: np.ndarray, ap: np.ndarray
) -> tuple[float | None, float | None]:
    if not truth.any():
        return None, None
    micro = float(average_precision_score(truth, y_score, average="micro"))
    return micro, float(np.nanmean(ap))


def full_report(
    y_true: Any,
    y_score: Any,
    threshold: Threshold = 0.5,
    class_names: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Complete evaluation report of gathered scores, computed with scikit-learn.

    Returns a JSON-serialisable dict with ``micro_f1, macro_f1, samples_f1, weighted_f1,
    micro_precision, micro_recall, macro_precision, macro_recall, micro_map, macro_map,
    macro_classes, count, threshold, classes`` and ``per_class`` (a list of ``{class,
    index, support, precision, recall, f1, ap}``). Ratios use ``zero_division=0``.

    Every macro figure (F1, precision, recall, AP) is the mean over the ``macro_classes``
    classes with at least one positive in the split: a class the split does not contain
    has no recall and no AP (``ap=None`` in ``per_class``), and counting it as 0 would
    penalise a model for classes it was never shown. ``micro_map`` pools all (sample,
    class) pairs; it is None only if there are no positives at all.
    """
    truth, y_score = _as_2d(y_true, y_score)
    num_classes = truth.shape[1]
    names = list(class_names) if class_names is not None else [str(c) for c in range(num_classes)]
    if len(names) != num_classes:
        raise ValueError(f"{len(names)} class names for {num_classes} classes")
    thr = _as_threshold(threshold, num_classes)
    pred = y_score >= thr
    supported = supported_classes(truth.sum(axis=0))

    with warnings.catch_warnings():
        # Empty classes or samples make sklearn warn once per call; zero_division=0
        # already says what we want, so the warnings are noise here and only here.
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        report: dict[str, Any] = {
            f"{avg}_f1": float(f1_score(truth, pred, average=avg, zero_division=0))
            for avg in ("micro", "samples", "weighted")
        }
        for name, score in (("f1", f1_score), ("precision", precision_score),
                            ("recall", recall_score)):  # fmt: skip
            report[f"macro_{name}"] = (
                float(score(truth, pred, labels=supported, average="macro", zero_division=0))
                if supported.size
                else 0.0
            )
        report["micro_precision"] = float(
            precision_score(truth, pred, average="micro", zero_division=0)
        )
        report["micro_recall"] = float(recall_score(truth, pred, average="micro", zero_division=0))
        precision, recall, f1, support = precision_recall_fscore_support(
            truth, pred, average=None, zero_division=0
        )

    ap = _per_class_ap(truth, y_score)
    report["micro_map"], report["macro_map"] = _mean_precisions(truth, y_score, ap)
    report["constant_micro_f1"] = constant_micro_f1(truth)
    report["macro_classes"] = int(supported.size)
    report["count"] = int(truth.shape[0])
    report["threshold"] = _threshold_for_json(thr)
    report["classes"] = names
    report["per_class"] = [
        {
            "class": names[c],
            "index": c,
            "support": int(support[c]),
            "precision": float(precision[c]),
            "recall": float(recall[c]),
            "f1": float(f1[c]),
            "ap": _optional_float(ap[c]),
        }
        for c in range(num_classes)
    ]
    return report


def constant_micro_f1(y_true: Any) -> float:
    """The best constant answer's micro-F1: every sample given the k most frequent classes
    of the split, the best k. A model must clear it to have learnt anything from the images
    (reBEN's test split: 0.446)."""
    truth = np.asarray(y_true, dtype=bool)
    if truth.size == 0:
        return 0.0
    positives = truth.sum(axis=0)
    order = np.argsort(-positives, kind="stable")
    samples, total = truth.shape[0], int(positives.sum())
    # The k most frequent classes for everyone: TP = their positives, FP = k * samples - TP.
    tp = np.cumsum(positives[order]).astype(np.float64)
    predicted = samples * np.arange(1, len(order) + 1, dtype=np.float64)
    return float(np.max(2 * tp / (predicted + total)))


# ------------------------------------------------------------------ thresholds


def tune_thresholds(
    y_true: Any, y_score: Any, grid: Sequence[float] | np.ndarray | None = None
) -> np.ndarray:
    """Per-class thresholds that maximise each class's F1 on (validation) data.

    Tries every value of ``grid`` (default 0.05, 0.10, ..., 0.95). Ties go to the
    threshold closest to 0.5, so a class whose F1 is flat over the grid (for example
    perfectly separated scores) keeps a central, less over-fitted threshold. Classes
    without positives keep 0.5: their F1 is 0 at every threshold, nothing to learn.
    Tune on validation data and report test metrics with the result, never tune on test.
    """
    truth, y_score = _as_2d(y_true, y_score)
    grid = np.asarray(DEFAULT_GRID if grid is None else grid, dtype=np.float64)
    if grid.ndim != 1 or grid.size == 0:
        raise ValueError("grid must be a non-empty 1-D sequence of thresholds")
    # One pass per grid value keeps memory at O(N*C) instead of O(N*C*G).
    f1 = np.stack([per_class_from_counts(class_counts(truth, y_score, t))["f1"] for t in grid])
    # Among the maximal F1 values pick the grid point nearest 0.5.
    is_best = np.isclose(f1, f1.max(axis=0), rtol=0.0, atol=1e-12)
    distance = np.where(is_best, np.abs(grid - 0.5)[:, None], np.inf)
    best = grid[np.argmin(distance, axis=0)]
    return np.where(truth.any(axis=0), best, 0.5)
