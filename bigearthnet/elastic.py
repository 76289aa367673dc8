"""Malleable training with Elastic Horovod: the world grows and shrinks while training.

``train.py --elastic`` under ``horovodrun --min-np A --max-np B --host-discovery-script S``
(Gloo). Workers may join (the discovery script lists more slots) or leave (a holder job
ends, a node dies); Horovod then interrupts every worker at the next commit or collective,
re-initialises with the new set, and calls the training function again. As in Horovod's
elastic examples, elasticity is a thin wrapper around the same training: the replica, the
one epoch loop (:func:`bigearthnet.loop.train_epoch`) and the epoch end
(:class:`bigearthnet.training.EpochEnd`) are those of fixed-size runs; this module adds

* **the state** Horovod keeps: model, optimizer and the position in the epoch (epoch,
  samples of its global order consumed, batches, losses so far), committed every
  ``--commit-every`` batches and at each epoch end. A lost worker rolls every survivor back
  to the last commit; a new worker receives the state by broadcast;
* **the epoch's global order** (:class:`bigearthnet.batching.GlobalOrder`): after a resize
  the rest of the epoch is re-cut for the new size; no sample is skipped or repeated;
* **the LR for the new size**: the schedule is rebuilt (peak LR = base LR x size, warm-up in
  epochs) and the optimizer's update counter moved to the same point of the epoch. With
  ``--lr-scaling adascale`` the peak is instead the base LR x AdaScale's gain for the new
  size, from the noise-scale averages every worker takes from the state.

No collective runs before ``hvd.elastic.run``: set-up is local; rank 0 alone restores a
checkpoint, and the first sync broadcasts it - or rank 0's reason not to train (a run
folder held by another run), on which every worker exits 2. SIGUSR1 (Slurm's warning) is
voted on in the step's allreduce; rank 0 checkpoints the position and every worker exits
3; a rerun on any number of workers resumes at that sample. Every resize is logged and
written to ``RUN/elastic_events.csv``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from bigearthnet import distributed
from bigearthnet.batching import GlobalOrder, StepBatch, validation_slices
from bigearthnet.checkpoints import ElasticPosition
from bigearthnet.config import TrainConfig
from bigearthnet.data import band_stats
from bigearthnet.errors import InputError, RequeueRequested
from bigearthnet.history import HistoryRow
from bigearthnet.loop import train_epoch
from bigearthnet.replica import Replica, StepResult
from bigearthnet.run_outputs import RunOutputs
from bigearthnet.shards import read_manifest
from bigearthnet.training import (
    SPLITS_USED,
    EpochEnd,
    choose_rank_cache,
    make_schedule,
    open_splits,
    precise_bn_batches,
)
from bigearthnet.util import first_line

log = distributed.log
POSITION = tuple(f.name for f in dataclasses.fields(ElasticPosition))


class ElasticTrainer:
    """Fixed-size training's parts, re-entered after every change of the world."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        manifest = read_manifest(cfg.data)
        # Every worker opens whole splits: after a resize it may need any sample. (No
        # collective may run before hvd.elastic.run: a worker that does not fit raises.)
        whole = sum(manifest.count(s) for s in SPLITS_USED)
        cache = choose_rank_cache(cfg, samples_per_rank=whole)
        self.train_data, self.val_data = open_splits(cfg, manifest, rank=0, size=1, cache=cache)
        if len(self.train_data) < distributed.size():
            raise ValueError(f"{len(self.train_data)} training samples for more workers")
        self.order = GlobalOrder(self.train_data, batch_size=cfg.batch_size, seed=cfg.seed)
        self.world_size = distributed.size()
        mean, std = band_stats(manifest)
        schedule = make_schedule(
            cfg, world_size=self.world_size, updates_per_epoch=self.order.steps(self.world_size)
        )
        self.replica = Replica(
            cfg, num_classes=cfg.labels, band_mean=mean, band_std=std, schedule=schedule
        )
        self._outputs = RunOutputs(cfg, manifest.data_id)  # used by whichever worker is rank 0
        self.epoch_end = EpochEnd(cfg, self.replica, self.outputs)

    @property
    def outputs(self) -> RunOutputs | None:
        """The run's writer on rank 0 (which worker that is may change with a resize)."""
        return self._outputs if distributed.is_root() else None

    def run(self) -> HistoryRow | None:
        position = self._restore_on_root()
        # loss_sum/loss_steps: a rollback to a commit must not lose the epoch's mean loss.
        # noise: the monitor's averages, so that every worker (a new one too) computes the
        # same AdaScale gain after a resize.
        state = distributed.elastic_state(
            self.replica.model,
            self.replica.optimizer,
            noise=self.replica.noise.snapshot(),
            **position,
        )
        state.register_reset_callbacks([lambda: self._on_reset(state)])
        return distributed.elastic_run(self._train)(state)

    def _restore_on_root(self) -> dict[str, Any]:
        """Rank 0 prepares the run dir and restores the latest checkpoint (local I/O only);
        returns where training continues (the first sync broadcasts rank 0's values)."""
        position: dict[str, Any] = {
            "epoch": 0,
            **dataclasses.asdict(ElasticPosition()),
            "refused": "",  # rank 0's reason not to train (held folder, bad checkpoint)
        }
        if self.outputs is None:
            return position
        try:
            self.outputs.prepare()
            record = self.outputs.resume(self.replica.trackables)
        except (InputError, OSError) as err:
            # No collective may run before hvd.elastic.run, and a rank 0 that just exited
            # would leave the others with a traceback at the first sync: the reason travels
            # in the state that sync broadcasts, and every worker stops on it (_train).
            position["refused"] = first_line(err)
            return position
        if record is None:
            return position
        # Mid-epoch saves of elastic runs carry the position in the epoch's global order;
        # those of fixed-size runs (a per-rank step) cannot be mapped: that epoch restarts.
        if record.elastic is not None:
            position.update(dataclasses.asdict(record.elastic))
        position["epoch"] = int(self.replica.epoch.numpy())
        log.info(
            "resumed from %s: epoch %d of %d, %d samples of it done",
            record.folder,
            position["epoch"] + 1,
            self.cfg.epochs,
            position["consumed"],
        )
        return position

    def _train(self, state: Any) -> HistoryRow | None:
        """Entered after the first sync and after every reset, with the state in sync."""
        if state.refused:  # every worker now has rank 0's reason: all exit 2 with it
            raise InputError(state.refused)
        self._fit_world(state)
        size = distributed.size()
        self.epoch_end = EpochEnd(self.cfg, self.replica, self.outputs)
        row = None
        while state.epoch < self.cfg.epochs:
            started, epoch = time.perf_counter(), state.epoch
            losses_before = (
                [state.loss_sum / state.loss_steps] * state.loss_steps if state.loss_steps else None
            )
            batches = self.order.batches(
                epoch, consumed=state.consumed, step=state.batch, rank=distributed.rank(), size=size
            )
            outcome = train_epoch(
                self.replica,
                batches,
                epoch=epoch,
                seed=self.cfg.seed,
                losses_before=losses_before,
                after_step=lambda b, r: self._after_step(state, b, r),
            )
            if outcome.stopped_at is not None:
                self._stop_in_epoch(state)
            # Rank 0 may be another process than the one that wrote the earlier rows.
            history = self.outputs.history(through_epoch=epoch) if self.outputs else []
            row = self.epoch_end.finish(
                epoch=epoch,
                outcome=outcome,
                val_batches=self._val_batches(),
                bn_batches=precise_bn_batches(
                    self.train_data,
                    self.cfg,
                    epoch=epoch,
                    rank=distributed.rank(),
                    size=size,
                ),
                started=started,
                history=history,
                steps_per_epoch=self.order.steps(size),
                global_batch=self.cfg.batch_size * size,
            )
            state.epoch, state.consumed, state.batch = epoch + 1, 0, 0
            state.loss_sum, state.loss_steps = 0.0, 0
            state.noise = self.replica.noise.snapshot()
            distributed.commit(state, lambda removed: self._before_reset(state, removed))
            stop = outcome.stop_after or self.epoch_end.stop_voted  # last step, validation
            if stop and state.epoch < self.cfg.epochs:
                distributed.barrier()  # rank 0's epoch checkpoint is on disk
                raise RequeueRequested(f"stopped after epoch {state.epoch}; rerun resumes")
        return row

    def _after_step(self, state: Any, batch: StepBatch, result: StepResult) -> None:
        state.loss_sum += result.loss
        state.loss_steps += 1
        state.consumed += batch.taken
        state.batch += 1
        if state.batch % self.cfg.commit_every == 0 and not result.stop:
            state.noise = self.replica.noise.snapshot()
            # A change of hosts interrupts here: resize at this point.
            distributed.commit(state, lambda removed: self._before_reset(state, removed))

    def _stop_in_epoch(self, state: Any) -> None:
        """Every worker agreed to stop after this step: rank 0 saves the position, raise."""
        self._save_position(state)
        distributed.barrier()  # nobody exits before rank 0's checkpoint is on disk
        raise RequeueRequested(
            f"stopped in epoch {state.epoch + 1} at sample {state.consumed}; rerun resumes"
        )

    def _save_position(self, state: Any) -> None:
        """Rank 0 checkpoints the committed position inside the epoch (a no-op elsewhere,
        and at an epoch's start, whose checkpoint the epoch end wrote)."""
        if self.outputs is None or not (state.consumed or state.batch):
            return
        self.replica.step.assign(0)  # a fixed-size run resuming this restarts the epoch
        where = ElasticPosition(**{key: getattr(state, key) for key in POSITION})
        record = self.epoch_end.record(
            epochs_done=state.epoch,
            step=state.batch,
            steps_per_epoch=self.order.steps(distributed.size()),
            elastic=where,
        )
        self.outputs.save_mid_epoch(self.replica.trackables, record)
        log.info(
            "checkpointed epoch %d at sample %d of %d",
            state.epoch + 1,
            state.consumed,
            len(self.train_data),
        )

    def _before_reset(self, state: Any, removed: bool) -> None:
        """Hosts came or went (the discovery script's word): before Horovod's reset, which
        never returns if no host is left for the elastic timeout, rank 0 saves the committed
        position and records the event. The reset's own row follows if the world comes back."""
        what = "hosts removed" if removed else "hosts changed"
        log.warning(
            "elastic: %s at epoch %d, sample %d: checkpointing before the reset",
            what,
            state.epoch + 1,
            state.consumed,
        )
        if self.outputs is not None:
            self._save_position(state)
            self.outputs.append_event(
                event=what,
                old_size=distributed.size(),
                new_size=None,
                epoch=state.epoch + 1,
                consumed=state.consumed,
                batch=state.batch,
            )

    def _val_batches(self):
        """This rank's slice of the validation split for the current world size."""
        slices = validation_slices(
            len(self.val_data),
            batch_size=self.cfg.batch_size,
            rank=distributed.rank(),
            size=distributed.size(),
        )
        for positions in slices:
            yield self.val_data.take(positions)

    def _fit_world(self, state: Any) -> None:
        """LR schedule and update counter for the current world size and epoch position."""
        size = distributed.size()
        steps = self.order.steps(size)
        schedule = make_schedule(self.cfg, world_size=size, updates_per_epoch=steps)
        done = state.epoch * steps + state.consumed // (self.cfg.batch_size * size)
        self.replica.use_schedule(schedule, updates_done=done)
        self.replica.epoch.assign(state.epoch)
        self.replica.noise.restore(state.noise)  # rank 0's, or the last commit's
        self.replica.refresh_gain(base_batch=self.cfg.batch_size, scale=size)

    def _on_reset(self, state: Any) -> None:
        """Runs on every worker after Horovod re-initialised with the new world."""
        old, new = self.world_size, distributed.size()
        self.world_size = new
        log.warning(
            "elastic reset: world size %d -> %d at epoch %d, %d/%d samples of it "
            "done (from the last commit)",
            old,
            new,
            state.epoch + 1,
            state.consumed,
            len(self.train_data),
        )
        if self.outputs is not None:
            self.outputs.append_event(
                event="resize",
                old_size=old,
                new_size=new,
                epoch=state.epoch + 1,
                consumed=state.consumed,
                batch=state.batch,
            )
