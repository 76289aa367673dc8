"""bigearthnet.evaluation.pixel_metrics: pixel counts in the step, scores from their sum,
as scikit-learn computes them on the labelled pixels; the dense head's classes per patch and
their agreement with the multi-label head's."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from sklearn.metrics import (
    confusion_matrix,
    f1_score,
    jaccard_score,
    precision_recall_fscore_support,
)

from bigearthnet.core.constants import NO_LABEL
from bigearthnet.evaluation.pixel_metrics import (
    MIN_CLASS_PIXELS,
    head_agreement,
    pixel_scores,
    tf_class_pixels,
    tf_pixel_confusion,
)

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


def test_the_dense_heads_classes_are_counted_per_patch() -> None:
    maps, logits = _batch(3)
    counts = tf_class_pixels(tf.constant(logits)).numpy()
    predicted = logits.argmax(-1)
    expected = [[int((predicted[p] == c).sum()) for c in range(CLASSES)] for p in range(3)]
    np.testing.assert_array_equal(counts, expected)


def test_head_agreement_is_sklearns_micro_f1_of_the_two_sets() -> None:
    rng = np.random.default_rng(4)
    class_pixels = rng.integers(0, 3, (40, CLASSES)) * rng.integers(0, 50, (40, CLASSES))
    predicted = rng.random((40, CLASSES)) < 0.3
    labels = rng.random((40, CLASSES)) < 0.3
    found = class_pixels >= MIN_CLASS_PIXELS
    agreement = head_agreement(class_pixels, predicted, labels)
    assert agreement.micro_f1 == pytest.approx(f1_score(predicted, found, average="micro"))
    assert agreement.micro_f1 == pytest.approx(f1_score(found, predicted, average="micro"))
    assert agreement.classes_micro_f1 == pytest.approx(f1_score(labels, found, average="micro"))
    assert agreement.exact == pytest.approx(np.mean((found == predicted).all(axis=1)))
    same = head_agreement(class_pixels, found, found)
    assert (same.micro_f1, same.exact, same.classes_micro_f1) == (1.0, 1.0, 1.0)
