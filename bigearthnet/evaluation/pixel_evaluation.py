"""The dense head in an evaluation (:mod:`bigearthnet.evaluation.evaluate`).

Each rank scores its patches' pixels, in the forward pass that scores their labels, against
the shards' reference maps and, for a synthetic archive, against its true class per pixel
(:mod:`bigearthnet.formats.truth_maps`): confusion matrices of pixel counts, summed over
the ranks. Per patch it counts the pixels of each class the dense head finds; those rows
are gathered with the scores, for the agreement of the two heads.

Rank 0 turns the sums into figures (:mod:`~bigearthnet.evaluation.pixel_metrics`, the one
home of the formulas): metrics.json's pixel keys
(:class:`~bigearthnet.evaluation.summary.PixelSummary`), ``pixel_per_class.csv`` and
``pixel_confusion.csv`` (:mod:`bigearthnet.formats.pixel_eval`).

The reference pixels scored must be every labelled pixel of the split as the manifest counts
them, or the evaluation fails, as for the patches. The truth is the one beside the archive
the shards were made from (the manifest's ``archive``), taken only when that archive is
synthetic, its ``SYNTHETIC.json`` says what the manifest's origin says (the same generator
settings: the same truth) and it has a truth for every patch, on every rank; otherwise one
warning says why and the dense head is scored against the reference maps alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tensorflow as tf

from bigearthnet import models
from bigearthnet.core import constants, distributed
from bigearthnet.core.errors import EvaluationError, InputError
from bigearthnet.data.rank_data import Batch
from bigearthnet.evaluation.pixel_metrics import (
    PixelScores,
    head_agreement,
    pixel_scores,
    tf_class_pixels,
    tf_pixel_confusion,
)
from bigearthnet.evaluation.summary import PixelFigures, PixelSummary
from bigearthnet.formats.archive_origin import read_origin
from bigearthnet.formats.manifest import Manifest
from bigearthnet.formats.pixel_eval import AGAINST, REFERENCE, TRUTH
from bigearthnet.formats.shard_maps import NO_LABEL_INDEX
from bigearthnet.formats.truth_maps import TRUTH_MAPS, read_truth_maps
from bigearthnet.inference.trained_run import LoadedModel

log = distributed.log
CLASSES = len(constants.CLASSES_19)


@dataclass
class PixelScorer:
    """One rank's part scored by both heads in one pass, its pixel counts added up."""

    loaded: LoadedModel
    maps: bool  # the part's batches carry the reference maps
    truth: dict[str, np.ndarray] | None = None  # patch name -> its truth, for the part
    truth_path: Path | None = None
    confusions: dict[str, np.ndarray] = field(init=False)

    def __post_init__(self) -> None:
        zeros = np.zeros((CLASSES, CLASSES), dtype=np.float64)
        self.confusions = {a: zeros.copy() for a in self.against}
        self._fn = tf.function(self._score, reduce_retracing=True)

    @property
    def against(self) -> list[str]:
        """What this rank scores the pixels against, in :data:`AGAINST` order."""
        return [REFERENCE] * self.maps + [TRUTH] * (self.truth is not None)

    def _score(self, images, references):
        out = self.loaded.outputs(images)
        probabilities = out[models.PIXEL_HEAD]  # the argmax of the logits, as trained
        confusions = [tf_pixel_confusion(maps, probabilities) for maps in references]
        return out[models.PATCH_HEAD], tf_class_pixels(probabilities), confusions

    def score(self, batch: Batch, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The batch's sigmoid scores (N, classes) and class pixels (N, 19); its pixel
        counts added to :attr:`confusions`."""
        references = [batch.maps] if self.maps else []
        if self.truth is not None:
            references.append(np.stack([self.truth[name] for name in names]))
        scores, class_pixels, confusions = self._fn(tf.convert_to_tensor(batch.images),
                                                    tuple(references))  # fmt: skip
        for against, confusion in zip(self.against, confusions):
            self.confusions[against] += confusion.numpy()
        return scores.numpy(), class_pixels.numpy().astype(np.int32)

    def summed(self, split: str) -> dict[str, np.ndarray]:
        """Collective: each reference's confusion summed over ranks; a truth some rank could
        not read is left out on every rank (with a warning)."""
        zeros = np.zeros((CLASSES, CLASSES))
        mine = [self.confusions.get(a, zeros).ravel() for a in AGAINST]
        used = np.array([float(a in self.confusions) for a in AGAINST])
        total = distributed.allreduce_sum(np.concatenate([*mine, used]), name=f"pixels_{split}")
        size = distributed.size()
        summed = {}
        for i, against in enumerate(AGAINST):
            ranks = int(round(total[len(AGAINST) * CLASSES * CLASSES + i]))
            if ranks == size:
                summed[against] = total[i * CLASSES * CLASSES : (i + 1) * CLASSES * CLASSES]
            elif ranks:
                log.warning("the %s was read by %d of %d ranks only: not scored", against,
                            ranks, size)  # fmt: skip
        return {a: counts.reshape(CLASSES, CLASSES) for a, counts in summed.items()}


def pixel_scorer(loaded: LoadedModel, manifest: Manifest, names: list[str]) -> PixelScorer:
    """The scorer of a part whose patches are ``names``, for a model with the dense head;
    the shards' maps and the archive's truth where there are."""
    if not manifest.has_maps:
        log.warning("the shards hold no reference maps: the dense head is scored by how far "
                    "it agrees with the multi-label head only")  # fmt: skip
    path, truth = _truth(manifest, names)
    return PixelScorer(loaded, manifest.has_maps, truth, path)


def _truth(manifest: Manifest, names: list[str]) -> tuple[Path | None, dict | None]:
    """The truth per pixel of ``names`` beside the shards' archive, where it is theirs."""
    archive = Path(manifest.archive)
    path = archive / TRUTH_MAPS
    if not manifest.archive_origin.synthetic or not path.is_file():
        return None, None
    try:
        origin = read_origin(archive)
        if origin.detail != manifest.origin_detail:
            raise InputError(f"{archive} is now {origin.detail!r}, the shards were made of "
                             f"{manifest.origin_detail!r}")  # fmt: skip
        return path, read_truth_maps(archive, names)
    except InputError as err:
        log.warning("not scored against the truth: %s", err)
        return None, None


def check_pixel_coverage(confusion: np.ndarray, manifest: Manifest, split: str) -> None:
    """EvaluationError unless the reference pixels scored are every labelled pixel of the
    split (the manifest's count of its maps' pixels)."""
    assert manifest.reference_maps is not None  # only scored on shards with maps
    expected = sum(manifest.reference_maps.class_pixels[split][:NO_LABEL_INDEX])
    scored = int(round(float(confusion.sum())))
    if scored != expected:
        raise EvaluationError(
            f"{split}: {scored:,} labelled reference pixels scored over {distributed.size()} "
            f"rank(s), but the manifest counts {expected:,}"
        )


def pixel_summary(
    confusions: dict[str, np.ndarray],
    class_pixels: np.ndarray,
    predicted: np.ndarray,
    labels: np.ndarray,
    truth_maps: Path | None,
) -> PixelSummary:
    """metrics.json's pixel figures: each reference's from its summed confusion, and the
    agreement of the dense head's classes per patch with the multi-label head's
    ``predicted`` sets (at the report's thresholds) and with the ``labels``."""
    agreement = head_agreement(class_pixels, predicted, labels)
    return PixelSummary(
        agreement.micro_f1,
        agreement.exact,
        agreement.classes_micro_f1,
        {against: _figures(pixel_scores(c)) for against, c in confusions.items()},
        str(truth_maps) if TRUTH in confusions and truth_maps is not None else "",
    )


def _figures(scores: PixelScores) -> PixelFigures:
    return PixelFigures(scores.pixel_count, scores.overall_accuracy, scores.miou,
                        scores.miou_classes)  # fmt: skip
