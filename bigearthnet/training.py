"""The data-parallel training loop: one replica per rank, gradients averaged every step.

Per step: the batch (uint16 from the rank's pipeline) is converted, normalised and
augmented on the device, the replica computes its gradients, Horovod averages each over
all ranks as soon as backprop makes it (``--grouped-allreduce``: all at once after the
backward pass), and every replica applies the same update. The loss is
averaged the same way, so all ranks take the same decisions (a non-finite loss stops
every rank at the same step; no rank is left waiting in a collective).

Per epoch: validation over all ranks from summed TP/FP/FN counts, then rank 0 writes
the latest checkpoint (and the best by validation micro-F1), ``history.csv``,
TensorBoard scalars and ``efficiency.json``. A run directory with checkpoints resumes:
model, optimizer (so the LR schedule position), epoch and history all continue.
"""

from __future__ import annotations

import csv
import io
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf

import models
from bigearthnet import checkpoints, distributed
from bigearthnet import metrics as M
from bigearthnet.augment import mixup, random_dihedral
from bigearthnet.config import ConfigError, TrainConfig, save_yaml
from bigearthnet.data import (
    RankData,
    band_stats,
    cache_problem,
    memory_available,
    normalize,
    steps_per_epoch,
)
from bigearthnet.schedules import LRSchedule, WarmupSchedule
from bigearthnet.shards import IMAGE_SHAPE, ShardError, read_manifest
from bigearthnet.signals import STOP
from bigearthnet.util import atomic_write_json, atomic_write_text

log = distributed.log
SPLITS_USED = ("train", "val")  # what training reads (test: the final evaluation)
HISTORY_FIELDS = (
    "epoch", "lr", "loss", "val_loss", "val_micro_f1", "val_macro_f1",
    "samples_per_s", "data_wait_fraction", "seconds", "world_size",
)  # fmt: skip
COMPATIBLE_KEYS = ("model", "labels")  # a run dir cannot switch these and resume


class TrainingError(RuntimeError):
    """Training cannot go on (non-finite loss); the last good checkpoint is kept."""


class RequeueRequested(RuntimeError):
    """SIGUSR1/SIGTERM arrived: every rank stopped at the same step, rank 0 checkpointed.

    train.py exits with EXIT_REQUEUE so a batch script can requeue the job; the next
    run resumes at the saved step of the saved epoch.
    """


@dataclass
class EpochTimes:
    """Wall-clock split of one epoch on this rank (seconds)."""

    wait: float = 0.0  # waiting for the next batch from the input pipeline
    step: float = 0.0  # forward, backward, allreduce and update
    samples: int = 0
    # With --comm-timing, step = compute + comm, each measured (else both stay 0):
    compute: float = 0.0  # forward and backward (this rank's useful work)
    comm: float = 0.0  # gradient allreduce (incl. waiting for the slowest rank) + update


class Trainer:
    """Builds the replica, its data and optimizer; runs epochs; saves on rank 0."""

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        self.manifest = read_manifest(cfg.data)
        self.num_classes = cfg.labels
        self.mean, self.std = (tf.constant(v) for v in band_stats(self.manifest))
        self._setup_data()
        self._build()

    # ------------------------------------------------------------------ set-up

    def _setup_data(self) -> None:
        """This rank's fixed part of train and val; the same number of steps on every rank."""
        cfg, rank, size = self.cfg, distributed.rank(), distributed.size()
        error = None
        try:
            self.check_cache_fits(
                sum(math.ceil(self.manifest.count(s) / size) for s in SPLITS_USED)
            )
            self.train_data, self.val_data = (
                RankData(cfg.data, self.manifest, split, labels=cfg.labels, rank=rank,
                         size=size, cache=cfg.cache, verify=cfg.verify_data)
                for split in SPLITS_USED
            )  # fmt: skip
        except (ConfigError, ShardError, OSError) as err:
            error = err
        distributed.raise_if_any_failed(error, "loading data")
        self.steps = steps_per_epoch(self.train_data.total, size, cfg.batch_size)
        self.epoch_samples = None  # per rank; None: the whole part
        if cfg.max_steps_per_epoch and cfg.max_steps_per_epoch < self.steps:
            # A capped epoch trains on the first steps x batch samples of its shuffled
            # order (other samples each epoch), in batches of the usual size.
            self.steps = cfg.max_steps_per_epoch
            self.epoch_samples = self.steps * cfg.batch_size
        if len(self.train_data) < self.steps:
            raise ConfigError(
                f"rank {rank} holds {len(self.train_data)} training samples but an epoch has "
                f"{self.steps} steps; use a larger --batch-size or fewer ranks"
            )

    def check_cache_fits(self, samples_per_rank: int) -> None:
        """ConfigError when ``--cache memory`` would not fit in this node's memory."""
        if self.cfg.cache != "memory":
            return
        problem = cache_problem(samples_per_rank, distributed.local_size(), memory_available())
        if problem:
            raise ConfigError(problem)

    def _build(self) -> None:
        cfg = self.cfg
        if cfg.amp:
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
        tf.keras.utils.set_random_seed(cfg.seed)
        self.model = models.get_model(
            cfg.model, IMAGE_SHAPE, self.num_classes, weight_decay=cfg.weight_decay
        )
        self.schedule = LRSchedule(
            base_lr=cfg.lr,
            world_size=distributed.size(),
            steps_per_epoch=math.ceil(self.steps / cfg.backward_passes_per_step),
            total_epochs=cfg.epochs,
            warmup_epochs=cfg.effective_warmup_epochs,
            kind=cfg.schedule,
            min_lr=cfg.min_lr,
            step_epochs=tuple(cfg.step_epochs) if cfg.step_epochs else None,
            gamma=cfg.gamma,
        )
        self.optimizer = _make_optimizer(cfg, WarmupSchedule(self.schedule))
        self.epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self._stop_after_epoch = False
        self._resumed_loss = (0.0, 0)  # (sum, steps) of a resumed epoch's done steps
        self.accum = (
            [tf.Variable(tf.zeros_like(v), trainable=False) for v in self.model.trainable_variables]
            if cfg.backward_passes_per_step > 1
            else []
        )
        self._create_optimizer_state()
        self._compile_steps()
        log.info(
            "model %s: %s parameters; %d classes; optimizer %s; peak LR %.4g",
            cfg.model,
            f"{models.count_parameters(self.model):,}",
            self.num_classes,
            cfg.optimizer,
            self.schedule.peak_lr,
        )

    def _create_optimizer_state(self) -> None:
        """Create the optimizer's slots now (a zero update), so they can be restored and
        broadcast before the first real step; then reset the step counter."""
        variables = self.model.trainable_variables
        self.optimizer.apply_gradients(zip([tf.zeros_like(v) for v in variables], variables))
        self.optimizer.iterations.assign(0)

    def _compile_steps(self) -> None:
        cfg = self.cfg
        grad_fn = tf.function(self._gradients, jit_compile=cfg.xla or None, reduce_retracing=True)
        self._grad_fn = grad_fn
        self.train_step = tf.function(self._train_step, reduce_retracing=True)
        self.accumulate_step = tf.function(self._accumulate_step, reduce_retracing=True)
        # --comm-timing: the same steps cut in two, the gradients first, then the rest.
        self.exchange_fn = tf.function(self._exchange, reduce_retracing=True)
        self.accumulate_fn = tf.function(self._accumulate, reduce_retracing=True)
        self.eval_step = tf.function(self._eval_step, reduce_retracing=True)

    # ------------------------------------------------------------------ steps

    def prepare(self, images, labels, seed, training: bool):
        """uint16 batch -> normalised float32 (augmented when training), float labels."""
        x = normalize(images, self.mean, self.std)
        y = tf.cast(labels, tf.float32)
        if training and self.cfg.augment:
            x = random_dihedral(x, seed)  # commutes with the per-band normalisation
        if training and self.cfg.mixup_alpha > 0:
            x, y = mixup(x, y, self.cfg.mixup_alpha, seed + 1)
        return x, y

    def _gradients(self, images, labels, seed):
        x, y = self.prepare(images, labels, seed, training=True)
        with tf.GradientTape() as tape:
            logits = self.model(x, training=True)
            loss = _bce(y, logits)
            total = loss + tf.add_n(self.model.losses) if self.model.losses else loss
            if self.cfg.amp:
                total = self.optimizer.get_scaled_loss(total)
        grads = tape.gradient(total, self.model.trainable_variables)
        if self.cfg.amp:
            grads = self.optimizer.get_unscaled_gradients(grads)
        return loss, grads

    def _train_step(self, images, labels, seed, stop):
        loss, grads = self._grad_fn(images, labels, seed)
        return self._exchange(loss, grads, stop)

    def _exchange(self, loss, grads, stop):
        """Average the gradients over ranks, apply them, agree on loss and stop."""
        k = self.cfg.backward_passes_per_step
        if k > 1:  # local aggregation: this batch plus the k-1 accumulated ones
            grads = [(g + a) / k for g, a in zip(grads, self.accum)]
        grads = distributed.allreduce_gradients(
            grads, self.cfg.fp16_allreduce, self.cfg.grouped_allreduce
        )
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        for a in self.accum:
            a.assign(tf.zeros_like(a))
        # One small allreduce carries the loss and the stop flag: all ranks decide alike.
        return distributed.allreduce_mean(tf.stack([loss, stop]), name="loss_and_stop")

    def _accumulate_step(self, images, labels, seed, stop):
        loss, grads = self._grad_fn(images, labels, seed)
        return self._accumulate(loss, grads, stop)

    def _accumulate(self, loss, grads, stop):
        for a, g in zip(self.accum, grads):
            a.assign_add(g)
        return distributed.allreduce_mean(tf.stack([loss, stop]), name="loss_and_stop")

    def _eval_step(self, images, labels, threshold):
        x, y = self.prepare(images, labels, None, training=False)
        logits = self.model(x, training=False)
        loss_sum = tf.reduce_sum(
            tf.reduce_mean(
                tf.nn.sigmoid_cross_entropy_with_logits(y, tf.cast(logits, tf.float32)), axis=-1
            )
        )
        return loss_sum, M.tf_class_counts(y, logits, threshold)

    # ------------------------------------------------------------------ loop

    def run(self) -> dict:
        """Train to ``cfg.epochs`` (resuming if possible); returns the last history row."""
        start_epoch, start_step = self._resume_or_start()
        history = self._load_history(start_epoch)
        best = max((float(r["val_micro_f1"]) for r in history), default=-1.0)
        row: dict = history[-1] if history else {}
        for epoch in range(start_epoch, self.cfg.epochs):
            started = time.perf_counter()
            loss, times = self._train_epoch(epoch, start_step if epoch == start_epoch else 0)
            distributed.average_in_place(self.model.non_trainable_variables, "bn_stats")
            val = self.validate()
            row = self._history_row(epoch, loss, val, times, time.perf_counter() - started)
            history.append(row)
            self.epoch_var.assign(epoch + 1)
            self.step_var.assign(0)
            if distributed.is_root():
                best = self._save_epoch(epoch, row, history, best)
            self._log_efficiency(epoch, times, time.perf_counter() - started)
            if self._stop_after_epoch and epoch + 1 < self.cfg.epochs:
                distributed.barrier()  # rank 0's epoch checkpoint is on disk
                raise RequeueRequested(f"stopped after epoch {epoch + 1}; rerun resumes")
        return row

    def _stop_at(self, epoch: int, steps_done: int, losses: list[float]) -> None:
        """Every rank agreed to stop after ``steps_done`` steps of ``epoch``: save, raise."""
        self.step_var.assign(steps_done)
        if distributed.is_root():
            # The epoch's losses so far, so that the resumed run reports the whole epoch's mean.
            meta = self._meta(
                epoch, steps_done, loss_sum=float(np.sum(losses)), loss_steps=len(losses)
            )
            checkpoints.save(self.run_dir, "latest", self.trackables(), meta)
            log.info("checkpointed epoch %d step %d/%d", epoch + 1, steps_done, self.steps)
        distributed.barrier()  # nobody exits before rank 0's checkpoint is on disk
        raise RequeueRequested(f"stopped at epoch {epoch + 1} step {steps_done}; rerun resumes")

    def _train_epoch(self, epoch: int, start_step: int = 0) -> tuple[float, EpochTimes]:
        cfg, k = self.cfg, self.cfg.backward_passes_per_step
        dataset = self.train_data.dataset(
            self.steps,
            epoch=epoch,
            seed=cfg.seed,
            shuffle=True,
            start_step=start_step,
            limit=self.epoch_samples,
        )
        batches = iter(dataset)
        times, losses = EpochTimes(), self._losses_before(start_step)
        bar = self._progress(epoch, start_step)
        for step in range(start_step, self.steps):
            t0 = time.perf_counter()
            images, labels = next(batches)
            t1 = time.perf_counter()
            seed = tf.constant(
                [cfg.seed * 1000 + distributed.rank(), epoch * self.steps + step], dtype=tf.int64
            )
            apply = (step + 1) % k == 0 or step == self.steps - 1
            stop = tf.constant(1.0 if apply and STOP.requested else 0.0)
            loss, stop_votes = self._step(apply, images, labels, seed, stop, times)
            times.wait += t1 - t0
            times.step += time.perf_counter() - t1
            times.samples += int(images.shape[0])
            if not math.isfinite(loss):
                raise TrainingError(
                    f"non-finite loss {loss} at epoch {epoch + 1} step {step + 1}; "
                    "stopping, the last good checkpoint is kept (lower --lr?)"
                )
            losses.append(loss)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            if stop_votes > 0 and step + 1 < self.steps:
                if bar is not None:
                    bar.close()
                self._stop_at(epoch, step + 1, losses)
            elif stop_votes > 0:  # the epoch is complete: validate and save it, then stop
                self._stop_after_epoch = True
        if bar is not None:
            bar.close()
        return float(np.mean(losses)), times

    def _losses_before(self, start_step: int) -> list[float]:
        """Losses of the steps a resumed epoch already did (their mean, once per step)."""
        loss_sum, loss_steps = self._resumed_loss
        if not start_step or not loss_steps:
            return []
        return [loss_sum / loss_steps] * loss_steps

    def _step(self, apply: bool, images, labels, seed, stop, times: EpochTimes) -> np.ndarray:
        """One training step -> [mean loss, stop votes]; waits for it to finish.

        With --comm-timing it runs as two functions, gradients then allreduce + update,
        with a host sync in between, so that ``times`` gets compute and communication apart.
        """
        exchange = apply or not self.accum
        if not self.cfg.comm_timing:
            fn = self.train_step if exchange else self.accumulate_step
            return fn(images, labels, seed, stop).numpy()
        t0 = time.perf_counter()
        loss, grads = self._grad_fn(images, labels, seed)
        # The first layer's gradient is the last that backprop makes: waiting for it waits
        # for the whole backward pass (on CPU every call is synchronous anyway).
        grads[0].numpy()
        t1 = time.perf_counter()
        fn = self.exchange_fn if exchange else self.accumulate_fn
        out = fn(loss, grads, stop).numpy()
        times.compute += t1 - t0
        times.comm += time.perf_counter() - t1
        return out

    def validate(self, threshold: float | None = None) -> dict:
        """Loss and micro/macro F1 on the validation split over all ranks (summed counts)."""
        threshold = self.cfg.threshold if threshold is None else threshold
        loss_sum, counts, seen = 0.0, np.zeros((3, self.num_classes)), 0
        for images, labels in self._val_batches():
            seen += len(images)
            batch_loss, batch_counts = self.eval_step(images, labels, threshold)
            loss_sum += float(batch_loss)
            counts += batch_counts.numpy()
        packed = np.concatenate([[loss_sum, seen], counts.ravel()])
        total = distributed.allreduce_sum(packed, name="val_counts")
        scores = M.f1_from_counts(total[2:].reshape(3, self.num_classes))
        return {"loss": total[0] / max(total[1], 1), **scores}

    def _val_batches(self):
        """This rank's validation batches (its fixed part of the split)."""
        steps = math.ceil(len(self.val_data) / self.cfg.batch_size)
        return self.val_data.batches(steps, epoch=0, seed=0, shuffle=False) if steps else []

    # ------------------------------------------------------------------ state

    def _resume_or_start(self) -> tuple[int, int]:
        """Rank 0 picks the checkpoint (if any); every rank ends with rank 0's state."""
        record = None
        if distributed.is_root():
            record = self._prepare_run_dir()
        record = distributed.broadcast_object(record, name="resume_record")
        trackables = self.trackables()
        if record is not None and distributed.is_root():
            checkpoints.restore(self.run_dir, "latest", trackables)
        state = [self.epoch_var, self.step_var]
        distributed.broadcast_variables(
            self.model.variables + _optimizer_variables(self.optimizer) + state
        )
        start, step = int(self.epoch_var.numpy()), int(self.step_var.numpy())
        if step and record.loss_steps:
            self._resumed_loss = (float(record.loss_sum or 0.0), int(record.loss_steps))
        if step and record.steps_per_epoch != self.steps:
            # Another world size or batch size: the saved position in the epoch means
            # nothing in the new partition, so that epoch starts over.
            log.warning(
                "steps per epoch changed (%s -> %d): epoch %d starts over",
                record.steps_per_epoch,
                self.steps,
                start + 1,
            )
            step = 0
        if record is not None:
            log.info(
                "resumed from %s at epoch %d step %d (of %d epochs)",
                record.folder,
                start,
                step,
                self.cfg.epochs,
            )
        return start, step

    def _prepare_run_dir(self) -> checkpoints.CheckpointRecord | None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not self.cfg.resume:
            checkpoints.clear(self.run_dir)
            for name in ("history.csv", "efficiency.json"):
                (self.run_dir / name).unlink(missing_ok=True)
        record = checkpoints.read_pointer(self.run_dir, "latest") if self.cfg.resume else None
        if record is not None:
            _check_compatible(record, self.cfg, self.run_dir)
        save_yaml(self.cfg, self.run_dir / "config.yaml")
        return record

    def trackables(self) -> dict:
        return {
            "model": self.model,
            "optimizer": self.optimizer,
            "epoch": self.epoch_var,
            "step": self.step_var,
        }

    def _meta(self, epochs_done: int, steps_done: int = 0, row: dict | None = None, **extra):
        """What the checkpoint pointer records besides the tensors."""
        scores = {}
        if row is not None:
            scores = dict(val_micro_f1=row["val_micro_f1"], val_macro_f1=row["val_macro_f1"])
        return checkpoints.CheckpointRecord(
            epoch=epochs_done,
            step=steps_done,
            steps_per_epoch=self.steps,
            world_size=distributed.size(),
            model=self.cfg.model,
            num_classes=self.num_classes,
            input_shape=IMAGE_SHAPE,
            **scores,
            **extra,
        )

    def _save_epoch(self, epoch: int, row: dict, history: list[dict], best: float) -> float:
        meta = self._meta(epoch + 1, 0, row)
        # History first: a kill before the checkpoint leaves a row the resume drops (it keeps
        # rows up to the checkpoint's epoch); the other order would lose a finished epoch.
        _write_history(self.run_dir / "history.csv", history)
        if row["val_micro_f1"] > best:
            best = row["val_micro_f1"]
            checkpoints.save(self.run_dir, "best", self.trackables(), meta)
        checkpoints.save(self.run_dir, "latest", self.trackables(), meta)
        self._tensorboard(epoch, row)
        log.info(
            "epoch %d/%d: loss %.4f val_loss %.4f val micro-F1 %.4f macro-F1 %.4f, "
            "%.0f samples/s, data wait %.1f%%, %.1f s",
            epoch + 1,
            self.cfg.epochs,
            row["loss"],
            row["val_loss"],
            row["val_micro_f1"],
            row["val_macro_f1"],
            row["samples_per_s"],
            100 * row["data_wait_fraction"],
            row["seconds"],
        )
        return best

    def _load_history(self, start_epoch: int) -> list[dict]:
        path = self.run_dir / "history.csv"
        if start_epoch == 0 or not path.is_file():
            return []
        rows = list(csv.DictReader(path.open(encoding="utf-8")))
        return [r for r in rows if int(r["epoch"]) <= start_epoch]

    def _history_row(self, epoch, loss, val, times: EpochTimes, seconds: float) -> dict:
        total_samples = distributed.allreduce_sum(np.array([times.samples]), "samples")[0]
        return {
            "epoch": epoch + 1,
            "lr": self.schedule.lr_at_epoch(epoch + 1),
            "loss": loss,
            "val_loss": val["loss"],
            "val_micro_f1": val["micro_f1"],
            "val_macro_f1": val["macro_f1"],
            "samples_per_s": total_samples / max(times.wait + times.step, 1e-9),
            "data_wait_fraction": times.wait / max(times.wait + times.step, 1e-9),
            "seconds": seconds,
            "world_size": distributed.size(),
        }

    def _tensorboard(self, epoch: int, row: dict) -> None:
        if not hasattr(self, "_writer"):
            self._writer = tf.summary.create_file_writer(str(self.run_dir / "tensorboard"))
        with self._writer.as_default():
            for key in HISTORY_FIELDS[1:-1]:
                tf.summary.scalar(key, float(row[key]), step=epoch + 1)
        self._writer.flush()

    def _log_efficiency(self, epoch: int, times: EpochTimes, seconds: float) -> None:
        """Per-rank time split gathered to rank 0 -> RUN/efficiency.json (POP metrics)."""
        mine = np.array(
            [[times.step, times.wait, times.samples, seconds, times.compute, times.comm]]
        )
        table = distributed.allgather(mine, name="efficiency")
        if distributed.is_root():
            report = efficiency_report(table, epoch + 1, measured_comm=self.cfg.comm_timing)
            atomic_write_json(self.run_dir / "efficiency.json", report)
            log.info("%s", efficiency_line(report))

    def _progress(self, epoch: int, start_step: int):
        if not (self.cfg.progress and distributed.is_root()):
            return None
        from tqdm import tqdm

        return tqdm(
            total=self.steps,
            initial=start_step,
            desc=f"epoch {epoch + 1}/{self.cfg.epochs}",
            unit="step",
            dynamic_ncols=True,
            leave=False,
        )


def efficiency_report(table: np.ndarray, epoch: int, measured_comm: bool = False) -> dict:
    """POP-style efficiencies of one epoch from per-rank rows
    ``(step_s, wait_s, samples, epoch_s[, compute_s, comm_s])``.

    Useful time is compute (forward + backward) when ``measured_comm`` (--comm-timing),
    else the whole step. With T = max over ranks of (step + data wait), the time the
    epoch's steps took:

    * load_balance = mean(useful) / max(useful)
    * communication_efficiency = max(useful) / max(step): allreduce, update and waiting
      for the slowest rank (null without --comm-timing: the step is not split)
    * input_efficiency = max(step) / T: time not spent waiting for the input pipeline
    * parallel_efficiency = mean(useful) / T = the product of the three
    """
    step, wait, samples, wall = table[:, 0], table[:, 1], table[:, 2], table[:, 3]
    compute = table[:, 4] if measured_comm and table.shape[1] > 5 else None
    comm = table[:, 5] if compute is not None else None
    useful = compute if compute is not None else step
    busy = step + wait
    longest = float(busy.max())
    load_balance = _ratio(useful.mean(), useful.max())
    comm_efficiency = _ratio(useful.max(), step.max()) if compute is not None else None
    input_efficiency = _ratio(step.max(), longest)
    total_rate = float(samples.sum() / longest) if longest > 0 else 0.0
    return {
        "epoch": epoch,
        "world_size": int(len(table)),
        "communication_measured": compute is not None,
        "per_rank": [
            {
                "rank": r,
                "step_s": float(step[r]),
                "compute_s": float(compute[r]) if compute is not None else None,
                "communication_s": float(comm[r]) if comm is not None else None,
                "data_wait_s": float(wait[r]),
                "samples": int(samples[r]),
                "samples_per_s": float(samples[r] / busy[r]) if busy[r] > 0 else 0.0,
            }
            for r in range(len(table))
        ],
        "load_balance": load_balance,
        "communication_efficiency": comm_efficiency,
        "input_efficiency": input_efficiency,
        "parallel_efficiency": _ratio(useful.mean(), longest),
        "data_wait_fraction": float(wait.sum() / busy.sum()) if busy.sum() > 0 else 0.0,
        "communication_fraction": float(comm.sum() / busy.sum())
        if comm is not None and busy.sum() > 0
        else None,
        "samples_per_s_total": total_rate,
        "samples_per_s_per_rank": total_rate / len(table),
        "epoch_seconds_max": float(wall.max()),
    }


def _ratio(a: float, b: float) -> float:
    return float(a / b) if b > 0 else 1.0


def efficiency_line(report: dict) -> str:
    """The report as one log line (max over ranks of each time)."""
    ranks = report["per_rank"]
    longest = {key: max(r[key] or 0.0 for r in ranks) for key in ("compute_s", "data_wait_s")}
    if report["communication_measured"]:
        comm = max(r["communication_s"] for r in ranks)
        split = f"compute {longest['compute_s']:.2f} s, communication {comm:.2f} s"
        comm_eff = f"{report['communication_efficiency']:.3f}"
    else:
        split = f"step {max(r['step_s'] for r in ranks):.2f} s (--comm-timing splits it)"
        comm_eff = "n/a"
    return (
        f"efficiency epoch {report['epoch']}: {split}, data wait {longest['data_wait_s']:.2f} s "
        f"(max over {report['world_size']} ranks); load balance {report['load_balance']:.3f}, "
        f"communication {comm_eff}, input {report['input_efficiency']:.3f}, parallel "
        f"{report['parallel_efficiency']:.3f}; {report['samples_per_s_total']:.1f} samples/s "
        f"total, {report['samples_per_s_per_rank']:.1f} per rank"
    )


def _bce(labels, logits):
    # Multi-label: an independent sigmoid per class, computed in float32 even under AMP.
    return tf.reduce_mean(
        tf.nn.sigmoid_cross_entropy_with_logits(labels, tf.cast(logits, tf.float32))
    )


def _make_optimizer(cfg: TrainConfig, lr):
    # Legacy Keras optimizers: Horovod 0.28's Keras integration and its examples target them.
    if cfg.optimizer == "sgd":
        opt = tf.keras.optimizers.legacy.SGD(learning_rate=lr, momentum=cfg.momentum)
    else:
        opt = tf.keras.optimizers.legacy.Adam(learning_rate=lr)
    if cfg.amp:
        opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
    return opt


def _optimizer_variables(optimizer) -> list:
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def _check_compatible(record: dict, cfg: TrainConfig, run_dir: Path) -> None:
    saved = {"model": record.model, "labels": record.num_classes}
    wanted = {"model": cfg.model, "labels": cfg.labels}
    for key in COMPATIBLE_KEYS:
        if saved[key] != wanted[key]:
            raise ConfigError(
                f"{run_dir}: holds a run with {key}={saved[key]}, not {wanted[key]}; "
                "use another --run-dir, or --no-resume to start this one over"
            )


def _write_history(path: Path, rows: list[dict]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=HISTORY_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: row[k] for k in HISTORY_FIELDS})
    atomic_write_text(path, buf.getvalue())


def train(cfg: TrainConfig) -> dict:
    """Train per ``cfg``; returns the final history row (on every rank)."""
    if cfg.elastic:
        from bigearthnet.elastic import ElasticTrainer  # elastic.py builds on this module

        # The world may change size until the last epoch; a final collective evaluation
        # outside Elastic Horovod's protection could hang, so evaluate.py does it after.
        return ElasticTrainer(cfg).run()
    trainer = Trainer(cfg)
    row = trainer.run()
    STOP.training_over = True  # a late signal must not kill the final evaluation
    test_count = trainer.manifest.count("test")
    del trainer  # free this rank's cached training data before the test split is loaded
    if cfg.eval_test and test_count:
        from bigearthnet.evaluation import evaluate_run  # evaluation imports training's deps

        # Every rank scores its part of the test split with the best checkpoint.
        metrics = evaluate_run(cfg.run_dir, cfg.data, split="test", checkpoint="best")
        row = {**row, "test_micro_f1": metrics["micro_f1"], "test_macro_f1": metrics["macro_f1"]}
    elif cfg.eval_test:
        log.warning("no test split in %s: skipping the final evaluation", cfg.data)
    return row
