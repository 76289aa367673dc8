"""Malleable training with Elastic Horovod: the world grows and shrinks while training.

``train.py --elastic`` under ``horovodrun --min-np A --max-np B --host-discovery-script S``
(Gloo). Workers may join (the discovery script lists more slots) or leave (a holder job
ends, a node dies); Horovod then interrupts every worker at the next commit or collective,
re-initialises with the new set, and calls the training function again. As in Horovod's
elastic examples, elasticity is a thin wrapper around the same training call: the replica
and the one epoch driver (:mod:`bigearthnet.training.driver`) are those of fixed-size runs,
fed by the global order (:class:`~bigearthnet.training.sources.GlobalOrderSource`); this
module adds

* **the state** Horovod keeps: model, optimizer, the :class:`~bigearthnet.formats.
  position.Position` and the noise monitor's averages, committed every
  ``--commit-every`` steps and at each epoch end (the driver's hooks). A lost worker rolls
  every survivor back to the last commit; a new worker receives the state by broadcast;
* **the LR for the new size**: the schedule is rebuilt (peak LR = base LR x size, warm-up in
  epochs) and the optimizer's update counter moved to the same point of the epoch. With
  ``--lr-scaling adascale`` the peak is instead the base LR x AdaScale's gain for the new
  size, from the noise-scale averages every worker takes from the state;
* **the record of resizes**: before a reset rank 0 checkpoints the committed position (a
  world that never comes back has saved), after it the new size goes to
  ``RUN/elastic_events.csv``.

No collective runs before ``hvd.elastic.run``: set-up is local; rank 0 alone restores a
checkpoint, and the first sync broadcasts it - or rank 0's reason not to train (a run
folder held by another run), on which every worker exits 2.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bigearthnet.core import distributed
from bigearthnet.core.config import TrainConfig
from bigearthnet.core.dense_head import with_pixel_head
from bigearthnet.core.errors import InputError
from bigearthnet.core.util import first_line
from bigearthnet.formats.history import HistoryRow
from bigearthnet.formats.manifest import read_manifest
from bigearthnet.formats.model_inputs import ModelInputs
from bigearthnet.formats.position import Position
from bigearthnet.training.driver import EpochDriver, RunHooks
from bigearthnet.training.initial import keep_start
from bigearthnet.training.outputs import RunOutputs
from bigearthnet.training.replica import StepResult
from bigearthnet.training.sources import GlobalOrderSource
from bigearthnet.training.trainer import build_replica, length_note, make_schedule

log = distributed.log


@dataclass(frozen=True)
class Start:
    """What rank 0 found before the first sync: where training continues, or why it cannot."""

    position: Position = Position()
    refused: str = ""  # rank 0's reason not to train (held folder, bad checkpoint)
    inputs: ModelInputs | None = None  # the resumed checkpoint's normalisation


class ElasticTrainer(RunHooks):
    """The fixed-size driver, wrapped in Horovod's elastic state, commit and reset."""

    def __init__(
        self,
        cfg: TrainConfig,
        command: list[str] | None = None,
        *,
        then: Callable[[], None] = lambda: None,
    ) -> None:
        manifest = read_manifest(cfg.data)
        self.cfg = cfg = with_pixel_head(keep_start(cfg), manifest.map_count("train"))
        # Collective work after the last epoch (the test evaluation), run inside the elastic
        # function: a worker lost during it resets the world, which then runs it again.
        self.then = then
        self.source = GlobalOrderSource(cfg, manifest)
        self.replica = build_replica(cfg, manifest, self.source)
        self.world_size = distributed.size()
        # used by whichever worker is rank 0
        self._outputs = RunOutputs(cfg, manifest.data_id, command, manifest.bands)
        self.driver = EpochDriver(cfg, self.replica, self.source, self.outputs, hooks=self)
        start = self._start_on_root()
        # Rank 0's values reach every worker with the first sync.
        self.state = distributed.elastic_state(
            self.replica.model,
            self.replica.optimizer,
            position=start.position,
            refused=start.refused,
            inputs=start.inputs,
            ended=False,
            noise=self.replica.noise.snapshot(),
        )

    def outputs(self) -> RunOutputs | None:
        """The run's writer on rank 0 (which worker that is may change with a resize)."""
        return self._outputs if distributed.is_root() else None

    def run(self) -> HistoryRow | None:
        self.state.register_reset_callbacks([self._on_reset])
        return distributed.elastic_run(self._train)(self.state)

    def _start_on_root(self) -> Start:
        """Rank 0 prepares the run dir and restores the latest checkpoint (local I/O only);
        the first sync broadcasts what it found."""
        outputs = self.outputs()
        if outputs is None:
            return Start()
        try:
            outputs.prepare()
            record = outputs.resume(self.replica.trackables)
        except (InputError, OSError) as err:
            # No collective may run before hvd.elastic.run, and a rank 0 that just exited
            # would leave the others with a traceback at the first sync: the reason travels
            # in the state that sync broadcasts, and every worker stops on it (_train).
            return Start(refused=first_line(err))
        position = self.source.resume_at(record)
        if record is not None:
            log.info(
                "resumed from %s: epoch %d of %d, %d samples of it done",
                record.folder,
                position.epoch + 1,
                self.cfg.epochs,
                position.consumed,
            )
            note = length_note(self.cfg, outputs.past, position, self.source)
            if note:
                log.warning("%s", note)
        return Start(position=position, inputs=record.inputs if record is not None else None)

    def _train(self, state) -> HistoryRow | None:
        """Entered after the first sync and after every reset, with the state in sync."""
        if state.refused:  # every worker now has rank 0's reason: all exit 2 with it
            raise InputError(state.refused)
        if state.inputs is not None:
            self.replica.use_inputs(state.inputs)
        last = None
        if not state.ended:  # else training ended at the commit that brought this reset
            self._fit_world(state.position)
            last = self.driver.run(state.position)
        self.then()
        return last

    # ------------------------------------------------------------------ the driver's hooks

    def after_step(self, position: Position, result: StepResult) -> None:
        self.state.position = position
        if position.step % self.cfg.commit_every == 0 and not result.stop:
            self._commit()  # a change of hosts interrupts here: resize at this point

    def after_epoch(self, position: Position, *, ended: bool) -> None:
        self.state.position = position
        # In the state: a reset at this commit must not train on (every worker, a new one
        # too, gets it with the sync), though the position has epochs left.
        self.state.ended = ended
        self._commit()

    def _commit(self) -> None:
        self.state.noise = self.replica.noise.snapshot()
        distributed.commit(self.state, self._before_reset)

    # ------------------------------------------------------------------ resizes

    def _fit_world(self, position: Position) -> None:
        """LR schedule and update counter for the current world size and epoch position."""
        size = distributed.size()
        steps = self.source.steps_per_epoch()
        schedule = make_schedule(self.cfg, world_size=size, updates_per_epoch=steps)
        plan = self.cfg.batch_plan(size)
        done = position.epoch * steps + position.consumed // plan.global_batch
        self.replica.use_schedule(schedule, updates_done=done)
        self.replica.noise.restore(self.state.noise)  # rank 0's, or the last commit's
        self.replica.refresh_gain(base_batch=plan.per_rank, scale=plan.scale)

    def _before_reset(self, removed: bool) -> None:
        """Hosts came or went (the discovery script's word): before Horovod's reset, which
        never returns if no host is left for the elastic timeout, rank 0 saves the committed
        position and records the event. The reset's own row follows if the world comes back."""
        what = "hosts removed" if removed else "hosts changed"
        position = self.state.position
        log.warning(
            "elastic: %s at epoch %d, sample %d: checkpointing before the reset",
            what,
            position.epoch + 1,
            position.consumed,
        )
        self.driver.save_position(position)
        self._record_event(what, old_size=distributed.size(), new_size=None)

    def _on_reset(self) -> None:
        """Runs on every worker after Horovod re-initialised with the new world."""
        old, new = self.world_size, distributed.size()
        self.world_size = new
        position = self.state.position
        log.warning(
            "elastic reset: world size %d -> %d at epoch %d, %d/%d samples of it "
            "done (from the last commit)",
            old,
            new,
            position.epoch + 1,
            position.consumed,
            len(self.source.train),
        )
        self._record_event("resize", old_size=old, new_size=new)

    def _record_event(self, event: str, *, old_size: int, new_size: int | None) -> None:
        outputs = self.outputs()
        if outputs is None:
            return
        position = self.state.position
        outputs.append_event(
            event=event,
            old_size=old_size,
            new_size=new_size,
            epoch=position.epoch + 1,
            consumed=position.consumed,
            batch=position.step,
        )
