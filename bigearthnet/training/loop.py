"""The steps of one epoch, and validation: what the epoch driver
(:mod:`bigearthnet.training.driver`) runs for fixed-size and elastic training alike.

:func:`train_epoch` trains on the batches an epoch source yields, from a
:class:`~bigearthnet.formats.position.Position`, and advances it step by step; the
timing, the finite-loss check, the stop vote and the augmentation seed live here once.
``after_step`` sees every new position (elastic training commits its state there).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

from bigearthnet.core import distributed
from bigearthnet.core.errors import RunFailed
from bigearthnet.core.signals import STOP
from bigearthnet.data.augment import PIXEL_CLASSES
from bigearthnet.data.batching import StepBatch
from bigearthnet.data.rank_data import Batch
from bigearthnet.evaluation import metrics
from bigearthnet.evaluation.pixel_metrics import PixelScores, pixel_scores
from bigearthnet.formats.position import Position
from bigearthnet.training.replica import Replica, StepResult

log = distributed.log
SEED_STRIDE = 1 << 32  # steps per epoch can never reach this: seeds never repeat


class TrainingError(RunFailed):
    """Training cannot go on (non-finite loss); the last good checkpoint is kept."""


def step_seed(seed: int, *, rank: int, epoch: int, step: int) -> tf.Tensor:
    """The augmentation seed of one step on one rank: a different one for every rank, epoch
    and step, the same whatever the world did before (a resumed run sees the same seeds)."""
    return tf.constant([seed * 1000 + rank, epoch * SEED_STRIDE + step], dtype=tf.int64)


@dataclass
class EpochTimes:
    """Wall-clock split of one epoch on this rank (seconds)."""

    wait: float = 0.0  # waiting for the next batch from the input pipeline
    step: float = 0.0  # forward, backward, allreduce and update
    samples: int = 0
    # With --comm-timing, step = compute + comm, each measured (else both stay 0):
    compute: float = 0.0  # forward and backward (this rank's useful work)
    comm: float = 0.0  # gradient allreduce (incl. waiting for the slowest rank) + update


@dataclass
class EpochOutcome:
    """How an epoch's steps ended."""

    position: Position  # after the last step taken (losses of resumed steps included)
    times: EpochTimes = field(default_factory=EpochTimes)
    stopped: bool = False  # every rank agreed to stop before the epoch's last step
    stop_after: bool = False  # the stop vote fell on the epoch's last step

    @property
    def mean_loss(self) -> float:
        return self.position.mean_loss


def train_epoch(
    replica: Replica,
    batches: Iterable[StepBatch],
    *,
    position: Position,
    seed: int,
    progress: Callable[[float], None] | None = None,
    after_step: Callable[[Position, StepResult], None] | None = None,
) -> EpochOutcome:
    """Train on ``batches`` (the epoch's steps after ``position``) until they end or all
    ranks agree to stop; raises TrainingError on a non-finite loss (on every rank at the
    same step)."""
    outcome = EpochOutcome(position=position)
    times, rank, epoch = outcome.times, distributed.rank(), position.epoch
    source = iter(batches)
    while True:
        t0 = time.perf_counter()
        batch = next(source, None)
        if batch is None:
            return outcome
        t1 = time.perf_counter()
        # The stop is voted on at update boundaries only (accumulated passes are not lost).
        result = replica.train_step(
            batch.images,
            batch.labels,
            seed=step_seed(seed, rank=rank, epoch=epoch, step=batch.step),
            stop=batch.apply and STOP.requested,
            apply=batch.apply,
            maps=batch.maps,
            has_map=batch.has_map,
        )
        times.wait += t1 - t0
        times.step += time.perf_counter() - t1
        times.compute += result.compute_s
        times.comm += result.comm_s
        times.samples += int(batch.images.shape[0])
        if not math.isfinite(result.loss):
            raise TrainingError(
                f"non-finite loss {result.loss} at epoch {epoch + 1} step {batch.step + 1}; "
                "stopping, the last good checkpoint is kept (lower --lr?)"
            )
        outcome.position = outcome.position.after_step(taken=batch.taken, loss=result.loss)
        if after_step is not None:
            after_step(outcome.position, result)
        if progress is not None:
            progress(result.loss)
        if result.stop and not batch.last:
            outcome.stopped = True
            return outcome
        outcome.stop_after = outcome.stop_after or result.stop


@dataclass(frozen=True)
class Validation:
    """Validation of one epoch over all ranks: F1 from summed counts, mAP from gathered
    scores; with the dense head, pixel figures from the summed pixel confusion."""

    loss: float  # mean multi-label loss (+ the weighted mean pixel loss, with the head)
    micro_f1: float
    macro_f1: float
    micro_map: float | None = None  # None: no positive label in the split
    macro_map: float | None = None
    stop: bool = False  # some rank got a stop request (SIGUSR1/SIGTERM) by the end of it
    pixel_confusion: np.ndarray | None = None  # (19, 19) summed over ranks; None: no head

    @property
    def pixels(self) -> PixelScores | None:
        return None if self.pixel_confusion is None else pixel_scores(self.pixel_confusion)


def validate(replica: Replica, batches: Iterable[Batch], *, threshold: float) -> Validation:
    """Collective: loss and micro/macro F1 over all ranks' batches (summed TP/FP/FN), and
    whether any rank was asked to stop meanwhile (voted in the same allreduce, so a warning
    that came during validation stops the run at this epoch's end, not a step into the next).
    With the dense head the pixel loss and confusion are summed in the same allreduce."""
    classes, pixel_classes = replica.num_classes, PIXEL_CLASSES if replica.dense_head else 0
    loss_sum, counts, seen = 0.0, np.zeros((3, classes)), 0
    pixel = np.zeros(2 + pixel_classes**2)  # loss sum, weight, confusion
    scores = [np.zeros((0, classes), np.float32)]
    truth = [np.zeros((0, classes), np.uint8)]
    for batch in batches:
        seen += len(batch.images)
        out = replica.eval_step(batch, threshold)
        loss_sum += out.loss_sum
        counts += out.counts
        scores.append(out.scores)
        truth.append(np.asarray(batch.labels, np.uint8))
        if out.pixel_confusion is not None:
            pixel += np.concatenate([[out.pixel_loss_sum, out.pixel_weight],
                                     out.pixel_confusion.ravel()])  # fmt: skip
    packed = np.concatenate([[loss_sum, seen, float(STOP.requested)], counts.ravel(), pixel])
    total = distributed.allreduce_sum(packed, name="val_counts")
    pixel = total[3 + 3 * classes :]
    total = total[: 3 + 3 * classes]
    f1 = metrics.f1_from_counts(total[3:].reshape(3, classes))
    # Threshold-free metrics need every score: gathered (rows ~80 B each), then every rank
    # computes the same mAPs (so an early stop is decided alike everywhere).
    micro_map, macro_map = metrics.average_precisions(
        distributed.allgather(np.concatenate(truth), name="val_labels"),
        distributed.allgather(np.concatenate(scores), name="val_scores"),
    )
    pixel_loss = replica.pixel_weight * pixel[0] / pixel[1] if pixel_classes and pixel[1] else 0.0
    return Validation(
        loss=total[0] / max(total[1], 1) + pixel_loss,
        micro_f1=f1["micro_f1"],
        macro_f1=f1["macro_f1"],
        micro_map=micro_map,
        macro_map=macro_map,
        stop=bool(total[2]),
        pixel_confusion=pixel[2:].reshape(pixel_classes, pixel_classes) if pixel_classes else None,
    )
