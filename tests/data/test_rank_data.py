"""bigearthnet.data.rank_data and bigearthnet.data.partition: each rank's part of a split, the
steps of an
epoch, the caches."""

from __future__ import annotations

import weakref
from pathlib import Path

import numpy as np
import pytest
from helpers import TINY_RECIPE

import train
from bigearthnet.core.batch import BatchPlan
from bigearthnet.data.partition import partition_takes, rank_range, split_batches
from bigearthnet.data.rank_data import RankData
from bigearthnet.formats.manifest import read_manifest
from bigearthnet.formats.shard_maps import HAS_MAP_KEY, MAP_KEY
from bigearthnet.formats.shards import read_rows


@pytest.mark.parametrize("total, size", [(10, 3), (7, 7), (100, 8), (5, 2)])
def test_rank_ranges_cover_every_sample_once(total: int, size: int) -> None:
    covered = np.concatenate([np.arange(*rank_range(total, r, size)) for r in range(size)])
    assert np.array_equal(covered, np.arange(total))
    lengths = [np.subtract(*rank_range(total, r, size)[::-1]) for r in range(size)]
    assert max(lengths) - min(lengths) <= 1


def test_batches_are_the_batch_size_but_the_last() -> None:
    plan = BatchPlan(8, world_size=4)
    steps = plan.steps(101)  # parts of 25 and 26
    assert steps == 4
    for part in (25, 26):
        batches = split_batches(np.arange(part), steps, plan.per_rank)
        assert [len(b) for b in batches[:-1]] == [8, 8, 8] and 1 <= len(batches[-1]) <= 8
        assert np.array_equal(np.concatenate(batches), np.arange(part))
    assert sum(partition_takes(101, plan, steps)) == 101


@pytest.mark.parametrize(
    "total, size, batch, passes", [(2000, 2, 64, 1), (1001, 2, 50, 1), (101, 4, 8, 2), (7, 3, 4, 1)]
)
def test_one_batch_plan_for_fixed_and_elastic_epochs(total, size, batch, passes) -> None:
    """The plan's steps are what both cuts run, every step but the last takes the per-rank
    batch on every rank, and an epoch's samples add up to the split."""
    plan = BatchPlan(batch, world_size=size, passes=passes)
    assert plan.global_batch == batch * size * passes and plan.scale == size * passes
    steps = plan.steps(total)
    takes = partition_takes(total, plan, steps)
    assert len(takes) == steps and sum(takes) == total == plan.epoch_samples(total)
    assert all(t >= size for t in takes) and all(t == plan.per_step for t in takes[:-2])
    for rank in range(size):
        count = np.subtract(*rank_range(total, rank, size)[::-1])
        sizes = [len(b) for b in split_batches(np.arange(count), steps, batch)]
        assert min(sizes) >= 1 and sizes[: max(steps - 2, 0)] == [batch] * max(steps - 2, 0)
    # The elastic global order: batch x size per step, a remainder under size merged.
    consumed, elastic_steps = 0, 0
    while consumed < total:
        consumed += BatchPlan(batch, size).step_take(total - consumed)
        elastic_steps += 1
    assert elastic_steps == steps


@pytest.mark.parametrize("cache", ["memory", "none"])
def test_ranks_see_every_training_sample_once_per_epoch(shards_v1: Path, cache: str) -> None:
    manifest = read_manifest(shards_v1)
    size, batch = 3, 7
    parts = [
        RankData(shards_v1, manifest, "train", labels=19, rank=r, size=size, cache=cache)
        for r in range(size)
    ]
    steps = BatchPlan(batch, size).steps(parts[0].total)
    seen_by_epoch = []
    for epoch in range(2):
        names = []
        for part in parts:
            batches = list(part.batches(steps, epoch=epoch, seed=1, shuffle=True, batch_size=batch))
            assert len(batches) == steps
            all_names = part.names()
            for images, *_ in batches:
                assert images.dtype == np.uint16 and images.shape[1:] == (120, 120, 12)
                names += [_name_of(part, all_names, img) for img in images]
        assert sorted(names) == sorted(n for p in parts for n in p.names())
        assert len(set(names)) == manifest.count("train")
        seen_by_epoch.append(names)
    assert seen_by_epoch[0] != seen_by_epoch[1]  # a new shuffle each epoch


# part -> image bytes -> patch name (weak: a collected part's id may be reused by a new one)
_LOOKUPS: weakref.WeakKeyDictionary[RankData, dict[bytes, str]] = weakref.WeakKeyDictionary()


def _name_of(part: RankData, names: list[str], image: np.ndarray) -> str:
    if part not in _LOOKUPS:
        images = part.take(np.arange(len(part))).images
        _LOOKUPS[part] = {img.tobytes(): n for img, n in zip(images, names)}
    return _LOOKUPS[part][image.tobytes()]


def test_resumed_epoch_skips_exactly_the_done_steps(shards_v1: Path) -> None:
    part = RankData(shards_v1, read_manifest(shards_v1), "train", labels=19, cache="none")
    full = list(part.batches(10, epoch=3, seed=5, shuffle=True))
    tail = list(part.batches(10, epoch=3, seed=5, shuffle=True, start_step=6))
    assert len(tail) == 4
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(full[6:], tail))


@pytest.mark.parametrize("cache", ["memory", "none"])
def test_a_capped_epoch_keeps_the_batch_size_and_varies_its_samples(
    shards_v1: Path, cache: str
) -> None:
    part = RankData(shards_v1, read_manifest(shards_v1), "train", labels=19, cache=cache)
    steps, batch = 3, 8
    assert len(part) > 2 * steps * batch
    epochs = [
        list(part.batches(steps, epoch=e, seed=5, shuffle=True, limit=steps * batch))
        for e in (0, 1)
    ]
    for batches in epochs:
        assert [len(images) for images, *_ in batches] == [batch] * steps
    assert not np.array_equal(epochs[0][0][0], epochs[1][0][0])  # other samples next epoch
    tensors = list(part.dataset(steps, epoch=0, seed=5, shuffle=True, limit=steps * batch))
    assert all(np.array_equal(a[0], b[0].numpy()) for a, b in zip(epochs[0], tensors))


@pytest.mark.parametrize("cache", ["device", "memory", "none"])
def test_maps_travel_with_their_rows(shards_v2: Path, cache: str) -> None:
    """Every batch, shuffled or taken at random positions, carries each row's own reference
    map and has_map, as the shard holds them; a part without maps carries none."""
    manifest = read_manifest(shards_v2)
    (entry,) = manifest.split_shards("train")
    stored = {key: read_rows(entry.path(shards_v2), key, 0, entry.count)
              for key in ("images", MAP_KEY, HAS_MAP_KEY)}  # fmt: skip
    row_of = {image.tobytes(): row for row, image in enumerate(stored["images"])}
    part = RankData(shards_v2, manifest, "train", labels=19, cache=cache, maps=True, threads=2)
    batches = [*part.dataset(3, epoch=1, seed=5, shuffle=True), part.take(np.array([9, 2, 30]))]
    seen = 0
    for batch in batches:
        images, maps, has_map = (np.asarray(v) for v in (batch.images, batch.maps, batch.has_map))
        assert maps.dtype == np.uint8 and maps.shape == (len(images), 120, 120)
        rows = [row_of[image.tobytes()] for image in images]
        np.testing.assert_array_equal(maps, stored[MAP_KEY][rows])
        np.testing.assert_array_equal(has_map, stored[HAS_MAP_KEY][rows])
        seen += len(rows)
    assert seen == len(part) + 3
    assert len(np.unique(stored[MAP_KEY].reshape(len(part), -1), axis=0)) > 1  # rows differ
    plain = RankData(shards_v2, manifest, "train", labels=19, cache=cache)
    assert plain.take(np.array([0])).maps is None


def test_cache_problem_only_when_the_node_lacks_memory(tmp_path: Path) -> None:
    from bigearthnet.data.cache import cache_problem, memory_available, sample_bytes

    assert sample_bytes(12) == 120 * 120 * 12 * 2 and sample_bytes(2) == 120 * 120 * 2 * 2
    assert sample_bytes(12, maps=True) - sample_bytes(12) == 120 * 120 + 1  # map19, has_map
    assert "x 1,000 patches with maps of 0.36 MB" in cache_problem(1000, 1, 10**6, 12, True)
    gb = 1024**3
    assert cache_problem(1000, 4, 100 * gb, 12) is None
    assert cache_problem(10**6, 4, None, 12) is None  # unknown: do not guess
    problem = cache_problem(275_000, 4, 64 * gb, 12)  # v1 train split on one 4-GPU node
    assert problem.startswith("--cache memory needs 354.1 GB on this node (4 rank(s) x ")
    assert "64.0 GB are available; use --cache none" in problem
    assert memory_available() > 0  # psutil: the node's MemAvailable


def test_a_cache_that_cannot_fit_stops_with_one_line(
    tmp_path: Path, shards_v1: Path, monkeypatch, rank_log
) -> None:
    from bigearthnet.data import cache

    monkeypatch.setattr(cache, "memory_available", lambda: 10 * 2**20)  # 10 MB free
    argv = [
        "--data",
        str(shards_v1),
        "--run-dir",
        str(tmp_path / "run"),
        "--no-eval-test",
        *TINY_RECIPE,
        "--epochs",
        "1",
        "--cache",
        "memory",
    ]
    assert train.main(argv) == 2
    errors = [r.getMessage() for r in rank_log.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "--cache memory needs" in errors[0], errors
    assert "use --cache none" in errors[0] and "\n" not in errors[0]
    # streaming needs no room (2 steps show it train)
    assert train.main([*argv, "--cache", "none", "--max-steps-per-epoch", "2"]) == 0
