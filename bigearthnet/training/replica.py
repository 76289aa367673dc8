"""One model replica per rank: the model, its optimizer, the loss, the compiled steps and
the gradient exchange. Everything a training step does happens here, once, for fixed-size
and elastic training alike.

Per step the batch (uint16 from the rank's pipeline) is converted, normalised and augmented
on the device, the replica computes its gradients, Horovod averages each over all ranks as
soon as backprop makes it (``--grouped-allreduce``: all at once after the backward pass), and
every replica applies the same update. The loss and the stop vote travel in one small
allreduce, so all ranks take the same decisions (a non-finite loss stops every rank at the
same step; no rank is left waiting in a collective).

The public surface is small: :meth:`Replica.train_step` (one batch -> :class:`StepResult`),
:meth:`Replica.eval_step` (one batch -> :class:`EvalCounts`), :meth:`Replica.
use_schedule` (a new LR schedule after an elastic resize) and the state to checkpoint or
broadcast. Large-batch optimizers and per-step gradient statistics plug in here.

With a pixel-loss weight (:func:`bigearthnet.core.dense_head.with_pixel_head`) the model has
the dense head, every batch brings its reference maps (moved and mixed with the images:
:mod:`bigearthnet.data.augment`) and the loss adds the weighted per-pixel cross-entropy, a
mean over the global batch's labelled pixels (:mod:`bigearthnet.training.losses`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from bigearthnet import models
from bigearthnet.core import distributed
from bigearthnet.core.config import PRECISIONS, TrainConfig
from bigearthnet.core.errors import ConfigError
from bigearthnet.data.normalization import normalize
from bigearthnet.data.rank_data import Batch
from bigearthnet.evaluation import metrics
from bigearthnet.evaluation.pixel_metrics import tf_pixel_confusion
from bigearthnet.formats.model_inputs import ModelInputs
from bigearthnet.formats.shards import image_shape
from bigearthnet.training import optimizers
from bigearthnet.training.gns import NoiseSample, NoiseScaleMonitor, adascale_gain
from bigearthnet.training.initial import InitialWeights, start_from
from bigearthnet.training.losses import bce_loss, pixel_loss_sum
from bigearthnet.training.precise_bn import PreciseBatchNorm
from bigearthnet.training.schedules import GainedSchedule, LRSchedule, WarmupSchedule
from bigearthnet.training.step_inputs import pixel_scale_of, prepare, step_maps

# --amp -> Keras policy. Both mixed policies keep variables, logits and the loss in float32.
PRECISION_POLICY = dict(zip(PRECISIONS, ("float32", "mixed_float16", "mixed_bfloat16")))

log = distributed.log


@dataclass(frozen=True)
class StepResult:
    """What every rank learns from one training step (identical on all ranks)."""

    loss: float  # the batch loss averaged over ranks
    stop: bool  # some rank asked to stop (a Slurm warning)
    noise: NoiseSample | None = None  # an update's gradient norms (--gns)
    compute_s: float = 0.0  # --comm-timing: forward + backward on this rank
    comm_s: float = 0.0  # --comm-timing: allreduce (incl. waiting for the slowest) + update


@dataclass(frozen=True)
class EvalCounts:
    """One evaluation batch, in sums and counts that add up over batches and ranks."""

    loss_sum: float  # sum of the per-sample multi-label losses
    counts: np.ndarray  # (3, classes) TP/FP/FN at the threshold
    scores: np.ndarray  # (b, classes) sigmoid scores
    pixel_loss_sum: float = 0.0  # the dense head's cross-entropy summed over labelled pixels
    pixel_weight: float = 0.0  # its labelled pixels
    pixel_confusion: np.ndarray | None = None  # (19, 19) pixel counts; None: no dense head


class Replica:
    """This rank's copy of the model with its optimizer and compiled steps."""

    def __init__(
        self,
        cfg: TrainConfig,
        *,
        inputs: ModelInputs,
        schedule: LRSchedule,
        start: InitialWeights | None = None,
    ) -> None:
        self.cfg = cfg
        self.inputs = inputs  # channels, normalisation, classes: in every checkpoint record
        num_classes = self.num_classes = inputs.num_classes
        self.bands = inputs.bands  # the data's channels, in order: the model's input
        self.input_shape = image_shape(len(self.bands))
        # Variables, not constants: a resume takes the checkpoint's (use_inputs) without
        # retracing the compiled steps.
        self.mean = tf.Variable(
            np.asarray(inputs.mean, np.float32), trainable=False, name="band_mean"
        )
        self.std = tf.Variable(np.asarray(inputs.std, np.float32), trainable=False, name="band_std")
        self.loss_scaling = cfg.amp == "fp16"  # bfloat16 has float32's range: no scaling
        tf.keras.utils.set_random_seed(cfg.seed)
        # The per-pixel loss's weight, resolved from the shards (0: no dense head).
        self.pixel_weight = float(cfg.pixel_loss_weight or 0.0)
        self.model = models.get_model(
            cfg.model,
            self.input_shape,
            num_classes,
            weight_decay=cfg.weight_decay if optimizers.decay_in_loss(cfg.optimizer) else 0.0,
            dropout=cfg.dropout,
            dense_head=self.dense_head,
            policy=PRECISION_POLICY[cfg.amp],
        )
        # Before the optimizer: --freeze-backbone sets what trains.
        start_from(self.model, start, cfg)
        self.schedule = schedule
        # AdaScale's gain (--lr-scaling adascale), set after every update; 1 otherwise.
        self.lr_gain = tf.Variable(1.0, trainable=False, dtype=tf.float32, name="lr_gain")
        self.optimizer = optimizers.for_run(cfg, self._lr(schedule))
        self._accumulated = (
            [tf.Variable(tf.zeros_like(v), trainable=False) for v in self.model.trainable_variables]
            if cfg.backward_passes_per_step > 1
            else []
        )
        # The sum of the accumulated micro-batches' squared gradient norms (--gns).
        self._micro_sq = tf.Variable(0.0, trainable=False, name="micro_sq")
        self.noise = NoiseScaleMonitor(decay=cfg.gns_decay)
        self._precise_bn: PreciseBatchNorm | None = None  # built with its first use
        self._create_optimizer_state()
        self._compile()
        log.info(
            "model %s: %s parameters; %d classes%s; optimizer %s; peak LR %.4g%s",
            cfg.model,
            f"{models.count_parameters(self.model):,}",
            num_classes,
            f", dense head (pixel-loss weight {self.pixel_weight:g})" if self.dense_head else "",
            cfg.optimizer,
            schedule.peak_lr,
            " x the AdaScale gain" if cfg.lr_scaling == "adascale" else "",
        )

    @property
    def dense_head(self) -> bool:
        """Whether the model has the dense head, trained on the batches' reference maps."""
        return self.pixel_weight > 0

    # ------------------------------------------------------------------ state

    @property
    def trackables(self) -> dict[str, Any]:
        """What a checkpoint holds: model and optimizer (slots, update count: the LR
        position). Where training stands is the checkpoint record's ``Position``."""
        return {"model": self.model, "optimizer": self.optimizer}

    def broadcast_state(self) -> None:
        """Every rank takes rank 0's weights and optimizer state."""
        distributed.broadcast_variables(self.model.variables + optimizers.state_of(self.optimizer))

    def use_inputs(self, inputs: ModelInputs) -> None:
        """Normalise as ``inputs`` say (a resumed checkpoint's: a run keeps the statistics it
        started with, also when ``--allow-new-data`` resumes on other shards)."""
        if inputs.bands != self.bands or inputs.classes != self.inputs.classes:
            raise ConfigError("a checkpoint of other channels or classes cannot be resumed here")
        if inputs.mean != self.inputs.mean or inputs.std != self.inputs.std:
            log.warning("normalising with the resumed checkpoint's band statistics (%s)",
                        inputs.stats or "as recorded")  # fmt: skip
        self.inputs = inputs
        self.mean.assign(np.asarray(inputs.mean, np.float32))
        self.std.assign(np.asarray(inputs.std, np.float32))

    def average_batchnorm_statistics(self) -> None:
        """BatchNorm's moving statistics are updated from each rank's batches and drift
        apart; averaged once per epoch, every replica describes the same model."""
        distributed.average_in_place(self.model.non_trainable_variables, "bn_stats")

    def recompute_batchnorm(self, batches: Iterable[Batch]) -> int:
        """Collective, precise BN: the BatchNorm statistics of ``batches`` (this rank's
        share of the training split) with the current weights, the same on every rank.
        Returns the samples used over all ranks."""
        if self._precise_bn is None:
            self._precise_bn = PreciseBatchNorm(self.model)
        prepared = (
            normalize(tf.convert_to_tensor(batch.images), self.mean, self.std) for batch in batches
        )
        return self._precise_bn.recompute(prepared)

    def use_schedule(self, schedule: LRSchedule, *, updates_done: int) -> None:
        """Switch to ``schedule`` (an elastic resize) at optimizer update ``updates_done``."""
        self.schedule = schedule
        self.optimizer.learning_rate = self._lr(schedule)
        self.optimizer.iterations.assign(updates_done)
        self._compile()  # the step functions captured the previous schedule

    def _lr(self, schedule: LRSchedule):
        if self.cfg.lr_scaling == "adascale":
            return GainedSchedule(schedule, self.lr_gain)
        return WarmupSchedule(schedule)

    def lr_at_epoch(self, epoch: float) -> float:
        """The LR the optimizer uses at ``epoch`` (the gain as it stands now)."""
        return self.schedule.lr_at_epoch(epoch) * float(self.lr_gain.numpy())

    def refresh_gain(self, *, base_batch: int, scale: float) -> None:
        """--lr-scaling adascale: the gain for the monitor's current estimate (the same on
        every rank: the estimate comes from allreduced norms)."""
        if self.cfg.lr_scaling == "adascale":
            gain = adascale_gain(self.noise.estimate(), base_batch=base_batch, scale=scale)
            self.lr_gain.assign(gain)

    def _create_optimizer_state(self) -> None:
        """Create the optimizer's slots now (a zero update), so they can be restored and
        broadcast before the first real step; then reset the step counter."""
        variables = self.model.trainable_variables
        before = [v.read_value() for v in variables]
        self.optimizer.apply_gradients(zip([tf.zeros_like(v) for v in variables], variables))
        # A zero gradient still moves the weights under decoupled weight decay: put them back.
        for variable, value in zip(variables, before):
            variable.assign(value)
        self.optimizer.iterations.assign(0)

    # ------------------------------------------------------------------ steps

    def train_step(
        self,
        images: tf.Tensor,
        labels: tf.Tensor,
        *,
        seed: tf.Tensor,
        stop: bool,
        apply: bool = True,
        maps: tf.Tensor | None = None,
        has_map: tf.Tensor | None = None,
    ) -> StepResult:
        """One batch: gradients, then (``apply``) the exchange and the update, else (gradient
        accumulation) the gradients are added up locally. Waits for the step to finish.
        With the dense head ``maps`` and ``has_map`` are the batch's reference maps."""
        stop_flag = tf.constant(1.0 if stop else 0.0)
        exchange = apply or not self._accumulated
        pixels = self._pixels(maps, has_map)
        if not self.cfg.comm_timing:
            fn = self._train_fn if exchange else self._accumulate_fn
            outputs = fn(images, labels, pixels, seed, stop_flag).numpy()
            return self._result(outputs, rows=int(images.shape[0]), exchange=exchange)
        # --comm-timing: the same step cut in two, gradients first, then the rest, with a
        # host sync in between so that compute and communication are timed apart.
        t0 = time.perf_counter()
        scale = None if pixels is None else self._pixel_scale_fn(pixels, seed)
        loss, grads = self._gradients_fn(images, labels, pixels, seed, scale)
        # The first layer's gradient is the last that backprop makes: waiting for it waits
        # for the whole backward pass (on CPU every call is synchronous anyway).
        grads[0].numpy()
        t1 = time.perf_counter()
        fn = self._exchange_fn if exchange else self._add_up_fn
        outputs = fn(loss, grads, stop_flag).numpy()
        t2 = time.perf_counter()
        return self._result(
            outputs, rows=int(images.shape[0]), exchange=exchange, compute_s=t1 - t0, comm_s=t2 - t1
        )

    def _result(
        self, outputs: np.ndarray, *, rows: int, exchange: bool, **times: float
    ) -> StepResult:
        """The step's outputs (loss, stop votes[, |g_small|^2, |g_big|^2]) as a StepResult;
        an update's gradient norms go to the noise-scale monitor."""
        loss, votes = outputs[:2]
        noise = None
        if exchange and self.cfg.gns:
            scale = self.cfg.batch_plan(distributed.size()).scale  # ranks x passes
            noise = NoiseSample(
                small_sq=float(outputs[2]), big_sq=float(outputs[3]), b_small=rows,
                b_big=rows * scale,
            )  # fmt: skip
            self.noise.add(noise)
            self.refresh_gain(base_batch=rows, scale=scale)
        return StepResult(loss=float(loss), stop=bool(votes > 0), noise=noise, **times)

    def _pixels(self, maps: Any, has_map: Any) -> tf.Tensor | None:
        """The batch's reference maps as the step takes them; None without the dense head."""
        return step_maps(maps, has_map) if self.dense_head else None

    def eval_step(self, batch: Batch, threshold: float) -> EvalCounts:
        """One batch without augmentation, in sums and counts (with the dense head also its
        pixel loss, labelled pixels and pixel confusion)."""
        pixels = self._pixels(batch.maps, batch.has_map)
        out = self._eval_fn(batch.images, batch.labels, pixels, tf.constant(threshold, tf.float32))
        loss_sum, counts, scores = (float(out[0]), out[1].numpy(), out[2].numpy())
        if pixels is None:
            return EvalCounts(loss_sum, counts, scores)
        return EvalCounts(loss_sum, counts, scores, float(out[3]), float(out[4]), out[5].numpy())

    def _compile(self) -> None:
        # --xla compiles the forward and backward pass, in every variant of the step: the
        # step functions call _gradients_fn, so its jit_compile reaches the graph that runs.
        # The allreduce and the update stay outside (Horovod's ops have no XLA kernels).
        jit = self.cfg.xla or None
        self._gradients_fn = tf.function(self._gradients, jit_compile=jit, reduce_retracing=True)
        self._train_fn = tf.function(self._train, reduce_retracing=True)
        self._accumulate_fn = tf.function(self._accumulate, reduce_retracing=True)
        self._exchange_fn = tf.function(self._exchange, reduce_retracing=True)
        self._add_up_fn = tf.function(self._add_up, reduce_retracing=True)
        self._eval_fn = tf.function(self._evaluate, reduce_retracing=True)
        self._pixel_scale_fn = tf.function(self._pixel_scale, reduce_retracing=True)

    def _prepare(self, images, labels, pixels, seed, *, training: bool):
        """The model's input and targets (augmented when training): step_inputs.prepare."""
        augment, alpha = (self.cfg.augment, self.cfg.mixup_alpha) if training else (False, 0.0)
        return prepare(images, labels, pixels, seed, mean=self.mean, std=self.std,
                       augment=augment, alpha=alpha)  # fmt: skip

    def _pixel_scale(self, pixels, seed):
        """Collective: ranks / the global batch's labelled pixel weight (the mix-up's)."""
        return pixel_scale_of(pixels, seed, self.cfg.mixup_alpha)

    def _gradients(self, images, labels, pixels, seed, scale):
        x, y, targets = self._prepare(images, labels, pixels, seed, training=True)
        with tf.GradientTape() as tape:
            logits, pixel_logits = models.split_outputs(self.model(x, training=True))
            loss = tf.reduce_mean(bce_loss(y, logits))
            if targets is not None:
                loss += self.pixel_weight * scale * pixel_loss_sum(targets, pixel_logits)
            total = loss + tf.add_n(self.model.losses) if self.model.losses else loss
            if self.loss_scaling:
                total = self.optimizer.get_scaled_loss(total)
        grads = tape.gradient(total, self.model.trainable_variables)
        if self.loss_scaling:
            grads = self.optimizer.get_unscaled_gradients(grads)
        return loss, grads

    def _train(self, images, labels, pixels, seed, stop):
        # The pixel count is summed over ranks outside the XLA cluster (no Horovod kernels).
        scale = None if pixels is None else self._pixel_scale(pixels, seed)
        loss, grads = self._gradients_fn(images, labels, pixels, seed, scale)
        return self._exchange(loss, grads, stop)

    def _accumulate(self, images, labels, pixels, seed, stop):
        scale = None if pixels is None else self._pixel_scale(pixels, seed)
        loss, grads = self._gradients_fn(images, labels, pixels, seed, scale)
        return self._add_up(loss, grads, stop)

    def xla_compiled_calls(self, images, labels, maps=None, has_map=None) -> int:
        """How many calls in the graph of the default training step must be compiled by
        XLA (its traced graph, inspected): 1 with ``--xla``, 0 without."""
        seed, stop = tf.constant([0, 0], tf.int64), tf.constant(0.0)
        pixels = self._pixels(maps, has_map)
        graph = self._train_fn.get_concrete_function(images, labels, pixels, seed, stop).graph
        return sum(
            1
            for op in graph.get_operations()
            if op.type in ("PartitionedCall", "StatefulPartitionedCall")
            and op.node_def.attr["_XlaMustCompile"].b
        )

    def _exchange(self, loss, grads, stop):
        """Average the gradients over ranks, apply them, agree on loss and stop. With
        ``--gns`` the output also carries the mean over ranks and micro-batches of the local
        squared gradient norm (a scalar in the allreduce the step makes anyway) and the
        squared norm of the allreduced gradient."""
        passes = self.cfg.backward_passes_per_step
        if self.cfg.gns:  # this (micro-)batch's norm, before anything is averaged into it
            small_sq = (_squared_norm(grads) + self._micro_sq) / passes
            self._micro_sq.assign(0.0)
        if passes > 1:  # local aggregation: this batch plus the passes-1 accumulated ones
            grads = [(g + a) / passes for g, a in zip(grads, self._accumulated)]
        grads = distributed.allreduce_gradients(
            grads, fp16=self.cfg.fp16_allreduce, grouped=self.cfg.grouped_allreduce
        )
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        for a in self._accumulated:
            a.assign(tf.zeros_like(a))
        if not self.cfg.gns:
            return distributed.allreduce_mean(tf.stack([loss, stop]), name="loss_and_stop")
        agreed = distributed.allreduce_mean(tf.stack([loss, stop, small_sq]), name="loss_and_stop")
        return tf.concat([agreed, [_squared_norm(grads)]], axis=0)

    def _add_up(self, loss, grads, stop):
        for a, g in zip(self._accumulated, grads):
            a.assign_add(g)
        if self.cfg.gns:
            self._micro_sq.assign_add(_squared_norm(grads))
        return distributed.allreduce_mean(tf.stack([loss, stop]), name="loss_and_stop")

    def _evaluate(self, images, labels, pixels, threshold):
        x, y, targets = self._prepare(images, labels, pixels, None, training=False)
        logits, pixel_logits = models.split_outputs(self.model(x, training=False))
        loss_sum = tf.reduce_sum(bce_loss(y, logits))
        scores = tf.sigmoid(tf.cast(logits, tf.float32))
        out = (loss_sum, metrics.tf_class_counts(y, logits, threshold), scores)
        if targets is None:
            return out
        return out + (
            pixel_loss_sum(targets, pixel_logits),
            targets.weight_sum(),
            tf_pixel_confusion(targets.first, pixel_logits),
        )


def _squared_norm(tensors: list[tf.Tensor]) -> tf.Tensor:
    """sum of squares over all tensors, in float32 (gradients may come back as float16)."""
    return tf.add_n([tf.reduce_sum(tf.square(tf.cast(t, tf.float32))) for t in tensors])
