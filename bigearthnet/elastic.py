"""Malleable training with Elastic Horovod: the world grows and shrinks while training.

``train.py --elastic`` under ``horovodrun --min-np A --max-np B --host-discovery-script S``
(Gloo). Workers may join (the discovery script lists more slots) or leave (a holder job
ends, a node dies); Horovod then interrupts every worker at the next commit or
collective, re-initialises with the new set, and re-enters :meth:`ElasticTrainer._loop`.

What makes a resize exact:

* **One global order per epoch.** The epoch visits a permutation of the whole train
  split, seeded by (seed, epoch) only, so it does not depend on the world size. The state
  records how many samples of it were consumed; each step takes the next ``batch x size``
  samples and every rank trains on its slice. After a resize the next step simply cuts the
  rest of the order for the new size: within the epoch no sample is skipped or repeated.
  Hence every worker can read any sample: it opens the whole split (cached in RAM with
  ``--cache memory``, else read by sorted runs from the shards).
* **State = model + optimizer + (epoch, consumed, batch)**, committed every
  ``--commit-every`` batches and at each epoch end. A lost worker rolls every survivor
  back to the last commit; a new worker receives the state by broadcast.
* **LR for the new size.** The schedule is rebuilt for the new world size (peak LR = base
  LR x size, warm-up in epochs) and the optimizer's step counter is moved to the same
  point of the epoch, so the LR continues smoothly in epoch terms.
* **No collective before** ``hvd.elastic.run``: set-up is local; rank 0 alone restores a
  checkpoint, and the first sync broadcasts it.
* **Stopping on a warning.** SIGUSR1 to any worker (Slurm's ``--signal`` warning, passed
  on by the job script) is voted on in the step's loss allreduce, so every worker stops
  after the same step; rank 0 checkpoints the position in the epoch's order (consumed
  samples, loss so far) and all exit 3. The next run resumes at that sample, on any
  number of workers.

Every resize is logged with the old and new sizes and appended to
``RUN/elastic_events.csv``; rank-0 checkpoints continue as in normal training.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from bigearthnet import checkpoints, distributed
from bigearthnet.data import RankData, rank_range
from bigearthnet.schedules import WarmupSchedule, with_world_size
from bigearthnet.signals import STOP
from bigearthnet.training import (
    SPLITS_USED,
    EpochTimes,
    RequeueRequested,
    Trainer,
    TrainingError,
)
from bigearthnet.util import atomic_write_text

log = distributed.log
EVENTS = "elastic_events.csv"
EVENT_FIELDS = ("time", "old_size", "new_size", "epoch", "consumed", "batch")
# The position inside an epoch that a mid-epoch checkpoint records (pointer key "elastic").
POSITION = ("consumed", "batch", "loss_sum", "loss_steps")


def global_step_take(remaining: int, batch_size: int, size: int) -> int:
    """Samples the next step takes from the epoch's order (all ranks together).

    Normally ``batch_size x size``. A last step too small to give every rank a sample is
    merged into this one instead, so no rank ever trains on an empty batch.
    """
    take = min(batch_size * size, remaining)
    if 0 < remaining - take < size:
        take = remaining
    return take


def step_slices(order: np.ndarray, consumed: int, batch_size: int, size: int):
    """(samples taken, one position array per rank) for the step after ``consumed``."""
    take = global_step_take(len(order) - consumed, batch_size, size)
    return take, np.array_split(order[consumed : consumed + take], size)


class ElasticTrainer(Trainer):
    """The training loop of :class:`Trainer`, re-entrant across world-size changes."""

    def _setup_data(self) -> None:
        cfg = self.cfg
        # Every worker opens whole splits: after a resize it may need any sample. (No
        # collective may run before hvd.elastic.run: a worker that does not fit raises.)
        self.check_cache_fits(sum(self.manifest.count(split) for split in SPLITS_USED))
        self.train_data, self.val_data = (
            RankData(
                cfg.data,
                self.manifest,
                split,
                labels=cfg.labels,
                cache=cfg.cache,
                verify=cfg.verify_data,
            )
            for split in SPLITS_USED
        )
        if len(self.train_data) < distributed.size():
            raise ValueError(f"{len(self.train_data)} training samples for more workers")
        self.steps = self._steps_for(distributed.size())
        self._world_size = distributed.size()

    def _steps_for(self, size: int) -> int:
        return math.ceil(len(self.train_data) / (self.cfg.batch_size * size))

    # ------------------------------------------------------------------ run

    def run(self) -> dict:
        position = self._restore_on_root()
        # loss_sum/loss_steps: a rollback to a commit must not lose the epoch's mean loss.
        state = distributed.elastic_state(self.model, self.optimizer, **position)
        state.register_reset_callbacks([lambda: self._on_reset(state)])
        return distributed.elastic_run(self._loop)(state)

    def _restore_on_root(self) -> dict:
        """Rank 0 prepares the run dir and restores the latest checkpoint (local I/O only);
        returns where training continues: epoch and position in it (the first sync
        broadcasts rank 0's values)."""
        position = {"epoch": 0, **dict.fromkeys(POSITION, 0)}
        if not distributed.is_root():
            return position
        record = self._prepare_run_dir()
        if record is None:
            return position
        checkpoints.restore(self.run_dir, "latest", self.trackables())
        # Mid-epoch saves of elastic runs carry the position in the epoch's global order;
        # those of fixed-size runs (a per-rank step) cannot be mapped: that epoch restarts.
        if record.elastic is not None:
            position.update(dataclasses.asdict(record.elastic))
        position["epoch"] = int(self.epoch_var.numpy())
        log.info(
            "resumed from %s: epoch %d of %d, %d samples of it done",
            record.folder, position["epoch"] + 1, self.cfg.epochs, position["consumed"],
        )  # fmt: skip
        return position

    def _loop(self, state) -> dict:
        """Entered after the first sync and after every reset, with the state in sync."""
        self._fit_world(state)
        row: dict = {}
        while state.epoch < self.cfg.epochs:
            started = time.perf_counter()
            loss, times = self._train_epoch_elastic(state)
            distributed.average_in_place(self.model.non_trainable_variables, "bn_stats")
            val = self.validate()
            row = self._history_row(state.epoch, loss, val, times, time.perf_counter() - started)
            self.epoch_var.assign(state.epoch + 1)
            if distributed.is_root():
                self._write_epoch(state.epoch, row)
            self._log_efficiency(state.epoch, times, time.perf_counter() - started)
            state.epoch, state.consumed, state.batch = state.epoch + 1, 0, 0
            state.loss_sum, state.loss_steps = 0.0, 0
            state.commit()
            if self._stop_after_epoch and state.epoch < self.cfg.epochs:
                distributed.barrier()  # rank 0's epoch checkpoint is on disk
                raise RequeueRequested(f"stopped after epoch {state.epoch}; rerun resumes")
        return row

    def _train_epoch_elastic(self, state) -> tuple[float, EpochTimes]:
        cfg, total = self.cfg, len(self.train_data)
        order = np.random.default_rng([cfg.seed, state.epoch]).permutation(total)
        times = EpochTimes()
        while state.consumed < total:
            size, rank = distributed.size(), distributed.rank()
            take, parts = step_slices(order, state.consumed, cfg.batch_size, size)
            mine = parts[rank]
            if len(mine) == 0:
                # The world grew with fewer samples left than ranks: rather than an empty
                # batch (a NaN mean loss), re-use one sample of rank 0's slice.
                mine = parts[0][:1]
            t0 = time.perf_counter()
            images, labels = self.train_data.take(np.sort(mine))
            t1 = time.perf_counter()
            seed = tf.constant([cfg.seed * 1000 + rank, state.epoch * 100_000 + state.batch],
                               dtype=tf.int64)  # fmt: skip
            stop = tf.constant(1.0 if STOP.requested else 0.0)
            loss, stop_votes = self.train_step(images, labels, seed, stop).numpy()
            times.wait += t1 - t0
            times.step += time.perf_counter() - t1
            times.samples += len(mine)
            if not math.isfinite(loss):
                raise TrainingError(f"non-finite loss {loss} at epoch {state.epoch + 1}")
            state.loss_sum += float(loss)
            state.loss_steps += 1
            state.consumed += take
            state.batch += 1
            if stop_votes > 0 and state.consumed < total:
                self._stop_in_epoch(state)
            elif stop_votes > 0:  # the epoch is complete: validate and save it, then stop
                self._stop_after_epoch = True
            if state.batch % cfg.commit_every == 0:
                state.commit()  # may raise HostsUpdatedInterrupt: resize at this point
        return state.loss_sum / max(state.loss_steps, 1), times

    def _stop_in_epoch(self, state) -> None:
        """Every worker agreed to stop after this step: rank 0 saves the position, raise."""
        if distributed.is_root():
            self.step_var.assign(0)  # a fixed-size run resuming this restarts the epoch
            where = checkpoints.ElasticPosition(**{key: getattr(state, key) for key in POSITION})
            meta = self._meta(state.epoch, state.batch, elastic=where)
            checkpoints.save(self.run_dir, "latest", self.trackables(), meta)
            log.info("checkpointed epoch %d at sample %d of %d", state.epoch + 1,
                     state.consumed, len(self.train_data))  # fmt: skip
        distributed.barrier()  # nobody exits before rank 0's checkpoint is on disk
        raise RequeueRequested(
            f"stopped in epoch {state.epoch + 1} at sample {state.consumed}; rerun resumes"
        )

    def _val_batches(self):
        """This rank's slice of the validation split for the current world size."""
        start, stop = rank_range(len(self.val_data), distributed.rank(), distributed.size())
        for lo in range(start, stop, self.cfg.batch_size):
            yield self.val_data.take(np.arange(lo, min(lo + self.cfg.batch_size, stop)))

    # ------------------------------------------------------------------ resizes

    def _fit_world(self, state) -> None:
        """LR schedule and step counter for the current world size and epoch position."""
        size = distributed.size()
        self.steps = self._steps_for(size)
        self.schedule = with_world_size(self.schedule, size, self.steps)
        self.optimizer.learning_rate = WarmupSchedule(self.schedule)
        done = state.epoch * self.steps + state.consumed // (self.cfg.batch_size * size)
        self.optimizer.iterations.assign(done)
        self.epoch_var.assign(state.epoch)
        self._compile_steps()  # the step functions captured the previous schedule

    def _on_reset(self, state) -> None:
        """Runs on every worker after Horovod re-initialised with the new world."""
        old, new = self._world_size, distributed.size()
        self._world_size = new
        log.warning("elastic reset: world size %d -> %d at epoch %d, %d/%d samples of it "
                    "done (from the last commit)", old, new, state.epoch + 1, state.consumed,
                    len(self.train_data))  # fmt: skip
        if distributed.is_root():
            _append_event(self.run_dir / EVENTS, {
                "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "old_size": old, "new_size": new,
                "epoch": state.epoch + 1, "consumed": state.consumed, "batch": state.batch,
            })  # fmt: skip

    def _write_epoch(self, epoch: int, row: dict) -> None:
        """Rank 0's epoch outputs; history is re-read from disk because rank 0 may be a
        different process than the one that wrote the earlier rows."""
        history = self._load_history(epoch) + [row]
        best = max((float(r["val_micro_f1"]) for r in history[:-1]), default=-1.0)
        self._save_epoch(epoch, row, history, best)


def _append_event(path: Path, event: dict) -> None:
    rows = []
    if path.is_file():
        rows = list(csv.DictReader(path.open(encoding="utf-8")))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=EVENT_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows + [event])
    atomic_write_text(path, buf.getvalue())
