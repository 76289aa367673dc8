"""bigearthnet.evaluation.pixel_metrics: pixel counts in the step, scores from their sum,
as scikit-learn computes them on the labelled pixels."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from sklearn.metrics import confusion_matrix, jaccard_score, precision_recall_fscore_support

from bigearthnet.core.constants import NO_LABEL
from bigearthnet.evaluation.pixel_metrics import pixel_scores, tf_pixel_confusion

CLASSES = 19


def _batch(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Maps (no label in places, classes 0-4 only: the rest absent) and pixel logits that
    mostly agree with them."""
    rng = np.random.default_rng(seed)
    maps = rng.integers(0, 5, (3, 10, 10)).astype(np.int32)
    maps[rng.random(maps.shape) < 0.2] = NO_LABEL
    logits = rng.normal(0, 1, (3, 10, 10, CLASSES)).astype(np.float32)
    np.put_along_axis(logits, np.minimum(maps, CLASSES - 1)[..., None], 2.0, axis=-1)
    return maps, logits


def test_counts_summed_over_batches_give_sklearns_scores() -> None:
    confusion = np.zeros((CLASSES, CLASSES))
    truth, predicted = [], []
    for seed in (1, 2):  # as ranks and batches add up
        maps, logits = _batch(seed)
        confusion += tf_pixel_confusion(tf.constant(maps), tf.constant(logits)).numpy()
        labelled = maps != NO_LABEL
        truth.append(maps[labelled])
        predicted.append(logits.argmax(-1)[labelled])
    y_true, y_pred = np.concatenate(truth), np.concatenate(predicted)
    np.testing.assert_array_equal(confusion, confusion_matrix(y_true, y_pred, labels=range(19)))
    scores = pixel_scores(confusion)
    assert scores.pixel_count == len(y_true)
    assert scores.overall_accuracy == pytest.approx(np.mean(y_true == y_pred))
    present = sorted(set(y_true))  # the macro rule: classes with reference pixels
    assert scores.miou_classes == len(present) == 5
    assert scores.miou == pytest.approx(
        jaccard_score(y_true, y_pred, labels=present, average="macro", zero_division=0)
    )
    precision, recall, f1, support = precision_recall_fscore_support(
        y_true, y_pred, labels=range(19), zero_division=0
    )
    np.testing.assert_allclose(scores.precision, precision)
    np.testing.assert_allclose(scores.recall, recall)
    np.testing.assert_allclose(scores.f1, f1)
    np.testing.assert_array_equal(scores.support, support)


def test_no_labelled_pixel_has_no_scores() -> None:
    scores = pixel_scores(np.zeros((CLASSES, CLASSES)))
    assert (scores.pixel_count, scores.overall_accuracy, scores.miou) == (0, None, None)
