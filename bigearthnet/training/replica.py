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
:meth:`Replica.eval_step` (one batch -> loss sum and TP/FP/FN counts), :meth:`Replica.
use_schedule` (a new LR schedule after an elastic resize) and the state to checkpoint or
broadcast. Large-batch optimizers and per-step gradient statistics plug in here.
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
from bigearthnet.data.augment import mixup, random_dihedral
from bigearthnet.data.normalization import normalize
from bigearthnet.evaluation import metrics
from bigearthnet.formats.model_inputs import ModelInputs
from bigearthnet.formats.shards import image_shape
from bigearthnet.training import optimizers
from bigearthnet.training.gns import NoiseSample, NoiseScaleMonitor, adascale_gain
from bigearthnet.training.initial import InitialWeights, start_from
from bigearthnet.training.precise_bn import PreciseBatchNorm
from bigearthnet.training.schedules import GainedSchedule, LRSchedule, WarmupSchedule

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


def bce_loss(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """Per-sample multi-label loss: an independent sigmoid per class, in float32 even under
    mixed precision. The one criterion of the training and evaluation steps."""
    per_class = tf.nn.sigmoid_cross_entropy_with_logits(labels, tf.cast(logits, tf.float32))
    return tf.reduce_mean(per_class, axis=-1)


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
        tf.keras.mixed_precision.set_global_policy(PRECISION_POLICY[cfg.amp])
        self.loss_scaling = cfg.amp == "fp16"  # bfloat16 has float32's range: no scaling
        tf.keras.utils.set_random_seed(cfg.seed)
        self.model = models.get_model(
            cfg.model,
            self.input_shape,
            num_classes,
            weight_decay=cfg.weight_decay if optimizers.decay_in_loss(cfg.optimizer) else 0.0,
            dropout=cfg.dropout,
        )
        # Before the optimizer: --freeze-backbone sets what trains.
        start_from(self.model, start, cfg)
        self.schedule = schedule
        # AdaScale's gain (--lr-scaling adascale), set after every update; 1 otherwise.
        self.lr_gain = tf.Variable(1.0, trainable=False, dtype=tf.float32, name="lr_gain")
        self.optimizer = _make_optimizer(cfg, self._lr(schedule))
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
            "model %s: %s parameters; %d classes; optimizer %s; peak LR %.4g%s",
            cfg.model,
            f"{models.count_parameters(self.model):,}",
            num_classes,
            cfg.optimizer,
            schedule.peak_lr,
            " x the AdaScale gain" if cfg.lr_scaling == "adascale" else "",
        )

    # ------------------------------------------------------------------ state

    @property
    def trackables(self) -> dict[str, Any]:
        """What a checkpoint holds: model and optimizer (slots, update count: the LR
        position). Where training stands is the checkpoint record's ``Position``."""
        return {"model": self.model, "optimizer": self.optimizer}

    def broadcast_state(self) -> None:
        """Every rank takes rank 0's weights and optimizer state."""
        distributed.broadcast_variables(self.model.variables + _optimizer_variables(self.optimizer))

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

    def recompute_batchnorm(self, batches: Iterable[tuple]) -> int:
        """Collective, precise BN: the BatchNorm statistics of ``batches`` (this rank's
        share of (images, labels) from the training split) with the current weights, the
        same on every rank. Returns the samples used over all ranks."""
        if self._precise_bn is None:
            self._precise_bn = PreciseBatchNorm(self.model)
        prepared = (
            normalize(tf.convert_to_tensor(images), self.mean, self.std) for images, _ in batches
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
    ) -> StepResult:
        """One batch: gradients, then (``apply``) the exchange and the update, else (gradient
        accumulation) the gradients are added up locally. Waits for the step to finish."""
        stop_flag = tf.constant(1.0 if stop else 0.0)
        exchange = apply or not self._accumulated
        if not self.cfg.comm_timing:
            fn = self._train_fn if exchange else self._accumulate_fn
            outputs = fn(images, labels, seed, stop_flag).numpy()
            return self._result(outputs, rows=int(images.shape[0]), exchange=exchange)
        # --comm-timing: the same step cut in two, gradients first, then the rest, with a
        # host sync in between so that compute and communication are timed apart.
        t0 = time.perf_counter()
        loss, grads = self._gradients_fn(images, labels, seed)
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

    def eval_step(
        self, images: tf.Tensor, labels: tf.Tensor, threshold: float
    ) -> tuple[float, np.ndarray, np.ndarray]:
        """One batch without augmentation: (sum of per-sample losses, TP/FP/FN counts,
        sigmoid scores)."""
        loss_sum, counts, scores = self._eval_fn(images, labels, tf.constant(threshold, tf.float32))
        return float(loss_sum), counts.numpy(), scores.numpy()

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

    def _prepare(self, images, labels, seed, *, training: bool):
        """uint16 batch -> normalised float32 (augmented when training), float labels."""
        x = normalize(images, self.mean, self.std)
        y = tf.cast(labels, tf.float32)
        if training and self.cfg.augment:
            x = random_dihedral(x, seed)  # commutes with the per-band normalisation
        if training and self.cfg.mixup_alpha > 0:
            x, y = mixup(x, y, self.cfg.mixup_alpha, seed + 1)
        return x, y

    def _gradients(self, images, labels, seed):
        x, y = self._prepare(images, labels, seed, training=True)
        with tf.GradientTape() as tape:
            logits = self.model(x, training=True)
            loss = tf.reduce_mean(bce_loss(y, logits))
            total = loss + tf.add_n(self.model.losses) if self.model.losses else loss
            if self.loss_scaling:
                total = self.optimizer.get_scaled_loss(total)
        grads = tape.gradient(total, self.model.trainable_variables)
        if self.loss_scaling:
            grads = self.optimizer.get_unscaled_gradients(grads)
        return loss, grads

    def _train(self, images, labels, seed, stop):
        loss, grads = self._gradients_fn(images, labels, seed)
        return self._exchange(loss, grads, stop)

    def _accumulate(self, images, labels, seed, stop):
        loss, grads = self._gradients_fn(images, labels, seed)
        return self._add_up(loss, grads, stop)

    def xla_compiled_calls(self, images, labels) -> int:
        """How many calls in the graph of the default training step must be compiled by
        XLA (its traced graph, inspected): 1 with ``--xla``, 0 without."""
        seed, stop = tf.constant([0, 0], tf.int64), tf.constant(0.0)
        graph = self._train_fn.get_concrete_function(images, labels, seed, stop).graph
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

    def _evaluate(self, images, labels, threshold):
        x, y = self._prepare(images, labels, None, training=False)
        logits = self.model(x, training=False)
        loss_sum = tf.reduce_sum(bce_loss(y, logits))
        scores = tf.sigmoid(tf.cast(logits, tf.float32))
        return loss_sum, metrics.tf_class_counts(y, logits, threshold), scores


def _make_optimizer(cfg: TrainConfig, lr: WarmupSchedule) -> tf.keras.optimizers.Optimizer:
    opt = optimizers.make(
        cfg.optimizer,
        learning_rate=lr,
        momentum=cfg.momentum,
        weight_decay=cfg.weight_decay,
        trust_coefficient=cfg.trust_coefficient,
    )
    if cfg.amp == "fp16":  # float16 gradients underflow without a loss scale
        opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
    return opt


def _squared_norm(tensors: list[tf.Tensor]) -> tf.Tensor:
    """sum of squares over all tensors, in float32 (gradients may come back as float16)."""
    return tf.add_n([tf.reduce_sum(tf.square(tf.cast(t, tf.float32))) for t in tensors])


def _optimizer_variables(optimizer: tf.keras.optimizers.Optimizer) -> list:
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)
