"""Per-pixel land-cover metrics of the dense head, from a confusion matrix of pixel counts.

As for the multi-label metrics (:mod:`bigearthnet.evaluation.metrics`), ratios are never
averaged over ranks: each rank counts its pixels into a ``(classes, classes)`` confusion
matrix (rows: the reference map's class, columns: the class predicted; labelled pixels
only), the matrices are summed over ranks, and every figure comes from the sum
(:func:`pixel_scores`): overall accuracy, and per class precision, recall, F1 and IoU.

mIoU follows the project's one rule for macro averages: the mean over the classes with at
least one reference pixel in the scored data (a class absent from it has no recall and no
IoU), and the scores say how many classes that was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from bigearthnet.core import constants
from bigearthnet.evaluation import metrics
from bigearthnet.formats.pixel_eval import PixelClassRow

if TYPE_CHECKING:  # TensorFlow only inside tf_pixel_confusion: reports need none of it
    import tensorflow as tf


def tf_pixel_confusion(maps: Any, pixel_logits: Any) -> tf.Tensor:
    """``(C, C)`` float32 counts of the labelled pixels of ``maps`` ((B, H, W) int class
    indices; any value >= C is no label and not counted) by (reference, predicted class =
    argmax of ``pixel_logits`` (B, H, W, C)); inside a ``tf.function``."""
    import tensorflow as tf

    classes = pixel_logits.shape[-1]
    truth = tf.reshape(tf.cast(maps, tf.int32), [-1])
    predicted = tf.reshape(tf.argmax(pixel_logits, axis=-1, output_type=tf.int32), [-1])
    labelled = truth < classes
    return tf.math.confusion_matrix(
        tf.where(labelled, truth, 0),
        predicted,
        num_classes=classes,
        weights=tf.cast(labelled, tf.float32),
        dtype=tf.float32,
    )


def tf_class_pixels(pixel_logits: Any) -> tf.Tensor:
    """``(B, C)`` int32: per patch, the pixels where each class is the most probable of
    ``pixel_logits`` (B, H, W, C); inside a ``tf.function``."""
    import tensorflow as tf

    classes = pixel_logits.shape[-1]
    predicted = tf.argmax(pixel_logits, axis=-1, output_type=tf.int32)
    rows = tf.reshape(predicted, [tf.shape(predicted)[0], -1])
    return tf.math.bincount(rows, minlength=classes, maxlength=classes, axis=-1)


# A class is in a patch where it holds a pixel: reBEN's labels are its reference map's
# classes, whatever their area (bigearthnet-facts.md), so the dense head's are counted alike.
MIN_CLASS_PIXELS = 1


@dataclass(frozen=True)
class HeadAgreement:
    """The dense head's classes per patch against the multi-label head's, and the labels."""

    micro_f1: float  # between the two heads' sets (symmetric)
    exact: float  # share of patches whose two sets are the same
    classes_micro_f1: float  # the dense head's classes scored as the patches' labels


def head_agreement(class_pixels: Any, predicted: Any, labels: Any) -> HeadAgreement:
    """From ``class_pixels`` (N, C) (:func:`tf_class_pixels`), the multi-label head's
    ``predicted`` (N, C) sets and the ``labels`` (N, C), all in the same class order."""
    found = np.asarray(class_pixels) >= MIN_CLASS_PIXELS
    chosen = np.asarray(predicted, dtype=bool)
    if found.shape != chosen.shape:
        raise ValueError(f"class pixels {found.shape} against predictions {chosen.shape}")

    def micro_f1(truth: np.ndarray, sets: np.ndarray) -> float:
        counts = metrics.class_counts(truth, sets.astype(np.float64))
        return metrics.f1_from_counts(counts)["micro_f1"]

    return HeadAgreement(
        micro_f1=micro_f1(chosen, found),
        exact=float(np.all(found == chosen, axis=1).mean()) if len(found) else 0.0,
        classes_micro_f1=micro_f1(np.asarray(labels) > 0, found),
    )


@dataclass(frozen=True)
class PixelScores:
    """What a confusion matrix of pixel counts says."""

    pixel_count: int  # labelled pixels scored
    overall_accuracy: float | None  # None: no labelled pixel
    miou: float | None  # over the classes with reference pixels; None: none has
    miou_classes: int  # how many classes that was
    precision: np.ndarray  # per class; 0 where nothing was predicted as it
    recall: np.ndarray  # 0 where the class has no reference pixel
    f1: np.ndarray
    iou: np.ndarray
    support: np.ndarray  # reference pixels per class


def pixel_scores(confusion: Any) -> PixelScores:
    """The scores of a ``(C, C)`` confusion matrix (rows reference, columns predicted)."""
    matrix = np.asarray(confusion, dtype=np.float64)
    hits = np.diag(matrix)
    support, predicted = matrix.sum(axis=1), matrix.sum(axis=0)
    total = float(matrix.sum())
    precision = _ratio(hits, predicted)
    recall = _ratio(hits, support)
    present = support > 0
    iou = _ratio(hits, support + predicted - hits)
    return PixelScores(
        pixel_count=int(round(total)),
        overall_accuracy=float(hits.sum() / total) if total else None,
        miou=float(iou[present].mean()) if present.any() else None,
        miou_classes=int(present.sum()),
        precision=precision,
        recall=recall,
        f1=_ratio(2 * precision * recall, precision + recall),
        iou=iou,
        support=support.round().astype(np.int64),
    )


def pixel_rows(confusions: dict[str, np.ndarray]) -> list[PixelClassRow]:
    """pixel_per_class.csv's rows: each class's figures against each reference."""
    rows = []
    for against, confusion in confusions.items():
        s = pixel_scores(confusion)
        predicted = np.asarray(confusion).sum(axis=0).round().astype(np.int64)
        rows += [
            PixelClassRow(
                against,
                name,
                c,
                int(s.support[c]),
                int(predicted[c]),
                float(s.precision[c]),
                float(s.recall[c]),
                float(s.f1[c]),
                float(s.iou[c]),
            )  # fmt: skip
            for c, name in enumerate(constants.CLASSES_19)
        ]
    return rows


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.zeros_like(num, dtype=np.float64), where=den > 0)
