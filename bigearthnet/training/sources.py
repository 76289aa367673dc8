"""Where an epoch's batches come from: the one thing fixed-size and elastic runs do differently
inside the epoch driver (:mod:`bigearthnet.training.driver`).

* :class:`PartitionSource` (fixed-size runs): every rank trains on, validates and draws its
  precise-BN samples from its own fixed part of each split (:class:`~bigearthnet.data.
  batching.RankPartition`); a position inside an epoch is a step count, meaningful only for
  the same world and batch size.
* :class:`GlobalOrderSource` (elastic runs): every worker holds the whole splits; an epoch
  is one global order cut for the world size of the moment (:class:`~bigearthnet.data.
  batching.GlobalOrder`); a position is the samples of that order consumed, meaningful at
  any world size.

Both answer the same questions, so the driver has one loop and one epoch end.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator

from bigearthnet.core import distributed
from bigearthnet.core.config import TrainConfig
from bigearthnet.core.dense_head import has_dense_head
from bigearthnet.core.errors import ConfigError
from bigearthnet.data.batching import GlobalOrder, RankPartition, StepBatch, validation_slices
from bigearthnet.data.cache import choose_rank_cache
from bigearthnet.data.loader import loader_threads
from bigearthnet.data.rank_data import Batch, RankData
from bigearthnet.formats.checkpoints import CheckpointRecord
from bigearthnet.formats.manifest import Manifest
from bigearthnet.formats.position import Position
from bigearthnet.formats.shards import ShardError
from bigearthnet.training.precise_bn import per_rank, sample_positions

log = distributed.log
SPLITS_USED = ("train", "val")  # what training reads (test: the final evaluation)


def open_splits(
    cfg: TrainConfig, manifest: Manifest, *, rank: int, size: int, samples: int
) -> tuple[RankData, RankData]:
    """This rank's part of the train and val splits (``size`` 1: the whole splits), cached
    where ``--cache`` says for ``samples`` images (with their reference maps when the dense
    head trains)."""
    maps = has_dense_head(cfg)
    cache = choose_rank_cache(
        cfg.cache, samples_per_rank=samples, channels=len(manifest.bands), maps=maps
    )
    threads = loader_threads(cfg.loader_threads, ranks_on_node=distributed.local_size())
    train, val = (
        RankData(
            cfg.data,
            manifest,
            split,
            labels=cfg.labels,
            rank=rank,
            size=size,
            cache=cache.kind,
            device=cache.device,
            threads=threads,
            verify=cfg.verify_data,
            maps=maps,
        )
        for split in SPLITS_USED
    )
    return train, val


def check_sizes(cfg: TrainConfig, manifest: Manifest) -> None:
    """ConfigError, before a shard is read, when the splits of ``manifest`` cannot give the
    epochs asked for: a global batch larger than the train split, or no validation split
    (every epoch validates: the best checkpoint, --target-f1 and early stopping need it)."""
    too_large = cfg.batch_plan(distributed.size()).too_large_for(manifest.count("train"))
    if too_large:
        raise ConfigError(
            f"--data {cfg.data}: {too_large}; lower --batch-size (or the ranks, "
            "--backward-passes-per-step)"
        )
    if not manifest.count("val"):
        raise ConfigError(
            f"--data {cfg.data}: no validation split (0 val samples), and every epoch "
            "validates; preprocess it with one (--split-ratios with a val share)"
        )


class EpochSource(ABC):
    """An epoch's training batches, validation batches and precise-BN samples for this rank
    in the current world."""

    order = ""  # CheckpointRecord.order of the positions this source gives

    def __init__(self, cfg: TrainConfig, train: RankData, val: RankData) -> None:
        self.cfg, self.train, self.val = cfg, train, val

    @abstractmethod
    def steps_per_epoch(self) -> int: ...

    @abstractmethod
    def updates_per_epoch(self) -> int: ...

    @abstractmethod
    def batches(self, position: Position) -> Iterable[StepBatch]:
        """The steps of ``position``'s epoch after it."""

    @abstractmethod
    def val_batches(self) -> Iterable[Batch]:
        """This rank's share of the validation split; all ranks' shares cover it once."""

    @abstractmethod
    def _bn_deal(self) -> tuple[int, int]:
        """(rank, size) by which this rank's precise-BN samples are dealt from ``train``."""

    def global_batch(self) -> int:
        """Samples per optimizer update over all ranks."""
        return self.cfg.batch_plan(distributed.size()).global_batch

    def bn_batches(self, epoch: int) -> Iterator[Batch]:
        """This rank's share of ``--precise-bn-samples`` training samples, in batches, drawn
        for ``epoch`` from what :meth:`_bn_deal` says this rank holds."""
        rank, size = self._bn_deal()
        positions = sample_positions(
            len(self.train),
            per_rank=per_rank(self.cfg.precise_bn_samples, size=distributed.size()),
            rank=rank,
            size=size,
            seed=self.cfg.seed,
            epoch=epoch,
        )
        for start in range(0, len(positions), self.cfg.batch_size):
            yield self.train.take(positions[start : start + self.cfg.batch_size])

    def resume_at(self, record: CheckpointRecord | None) -> Position:
        """Where training continues from ``record``: its position if this source can map
        it, else the start of its epoch (logged)."""
        if record is None:
            return Position()
        position = record.position
        if position.mid_epoch and not self._can_continue(record):
            log.warning(
                "the checkpoint stopped inside epoch %d of a run cut otherwise (%s, %s steps "
                "of %s ranks): the epoch starts over",
                position.epoch + 1,
                record.order,
                record.steps_per_epoch,
                record.world_size,
            )
            position = position.epoch_start()
        return position

    def _can_continue(self, record: CheckpointRecord) -> bool:
        return record.order == self.order


class PartitionSource(EpochSource):
    """A fixed-size run: each rank its own part of the splits."""

    order = "partition"

    def __init__(self, cfg: TrainConfig, manifest: Manifest) -> None:
        rank, size = distributed.rank(), distributed.size()
        train = val = None
        error = None
        try:
            check_sizes(cfg, manifest)
            part = sum(math.ceil(manifest.count(s) / size) for s in SPLITS_USED)
            train, val = open_splits(cfg, manifest, rank=rank, size=size, samples=part)
        except (ConfigError, ShardError, OSError) as err:
            error = err
        distributed.raise_if_any_failed(error, "loading data")
        assert train is not None and val is not None  # else raise_if_any_failed raised
        super().__init__(cfg, train, val)
        self.plan = RankPartition(
            train, cfg.batch_plan(size), seed=cfg.seed, max_steps=cfg.max_steps_per_epoch
        )

    def steps_per_epoch(self) -> int:
        return self.plan.steps

    def updates_per_epoch(self) -> int:
        return self.plan.updates_per_epoch

    def batches(self, position: Position) -> Iterable[StepBatch]:
        return self.plan.batches(position.epoch, start_step=position.step)

    def val_batches(self) -> Iterable[Batch]:
        steps = math.ceil(len(self.val) / self.cfg.batch_size)
        if not steps:
            return []
        return self.val.batches(steps, epoch=0, seed=0, shuffle=False)

    def _bn_deal(self) -> tuple[int, int]:
        return 0, 1  # the whole of this rank's own part

    def _can_continue(self, record: CheckpointRecord) -> bool:
        # A step count means the same samples only in the same partition.
        return (
            super()._can_continue(record)
            and record.steps_per_epoch == self.plan.steps
            and record.world_size in (None, distributed.size())
        )


class GlobalOrderSource(EpochSource):
    """An elastic run: whole splits on every worker, cut for the world of the moment. No
    collective here: Horovod's elastic run has not started when it is built."""

    order = "global"

    def __init__(self, cfg: TrainConfig, manifest: Manifest) -> None:
        check_sizes(cfg, manifest)  # in the world of the start (not again at a resize)
        # Every worker opens whole splits: after a resize it may need any sample.
        whole = sum(manifest.count(s) for s in SPLITS_USED)
        train, val = open_splits(cfg, manifest, rank=0, size=1, samples=whole)
        super().__init__(cfg, train, val)
        self.plan = GlobalOrder(train, batch_size=cfg.batch_size, seed=cfg.seed)

    def steps_per_epoch(self) -> int:
        return self.plan.steps(distributed.size())

    def updates_per_epoch(self) -> int:
        return self.steps_per_epoch()  # elastic runs refuse gradient accumulation

    def batches(self, position: Position) -> Iterable[StepBatch]:
        return self.plan.batches(
            position.epoch,
            consumed=position.consumed,
            step=position.step,
            rank=distributed.rank(),
            size=distributed.size(),
        )

    def val_batches(self) -> Iterable[Batch]:
        slices = validation_slices(
            len(self.val),
            batch_size=self.cfg.batch_size,
            rank=distributed.rank(),
            size=distributed.size(),
        )
        return (self.val.take(positions) for positions in slices)

    def _bn_deal(self) -> tuple[int, int]:
        return distributed.rank(), distributed.size()  # this worker's deal of the whole
