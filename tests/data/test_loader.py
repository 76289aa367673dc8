"""bigearthnet.data.cache: the cache choice, the loader threads, the row gather; and the device
cache, threaded gather and bf16 as a run sees them."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from helpers import TINY_RECIPE, train_argv

import train
from bigearthnet.core.config import TrainConfig, add_arguments, load_run_config, resolve
from bigearthnet.core.errors import ConfigError
from bigearthnet.data.cache import choose_cache
from bigearthnet.data.loader import RowGather, aligned_empty, loader_threads
from bigearthnet.data.rank_data import RankData
from bigearthnet.formats.history import read_history
from bigearthnet.formats.manifest import read_manifest

GB = 1024**3
GPU = "/device:GPU:0"


def _choose(requested: str, **kwargs):
    given = {"part_bytes": 10 * GB, "host_problem": None, "device": GPU, "device_free": 40 * GB}
    return choose_cache(requested, **{**given, **kwargs})


def test_auto_takes_the_accelerator_where_the_part_fits() -> None:
    choice = _choose("auto")
    assert (choice.kind, choice.device, choice.fell_back) == ("device", GPU, False)
    assert "10.0 GB of images, 40.0 GB free" in choice.reason


def test_auto_without_an_accelerator_keeps_the_host_memory_cache() -> None:
    choice = _choose("auto", device=None, device_free=None)
    assert (choice.kind, choice.device) == ("memory", "/CPU:0")
    assert "no accelerator" in choice.reason


def test_device_that_does_not_fit_falls_back_with_the_sizes_or_fails_when_forced() -> None:
    choice = _choose("device", device_free=12 * GB)  # 70 % of 12 GB < 10 GB
    assert (choice.kind, choice.fell_back) == ("memory", True)
    assert "10.0 GB of images, 12.0 GB free" in choice.reason and "falling back" in choice.reason
    with pytest.raises(ConfigError, match=r"--cache device!: does not fit: 10.0 GB"):
        _choose("device!", device_free=12 * GB)
    assert _choose("auto", device_free=12 * GB).kind == "memory"  # auto: no warning needed
    assert not _choose("auto", device_free=12 * GB).fell_back


def test_unknown_free_memory_is_not_guessed() -> None:
    assert _choose("auto", device_free=None).kind == "memory"
    with pytest.raises(ConfigError, match="unknown"):
        _choose("device!", device_free=None)


def test_on_the_cpu_the_device_cache_lives_in_host_memory() -> None:
    choice = _choose("device", device=None, device_free=None)
    assert (choice.kind, choice.device) == ("device", "/CPU:0")
    with pytest.raises(ConfigError, match="needs 99 GB"):
        _choose("device", device=None, host_problem="--cache memory needs 99 GB")
    with pytest.raises(ConfigError, match="needs 99 GB"):
        _choose("memory", host_problem="--cache memory needs 99 GB")
    assert _choose("none", host_problem="--cache memory needs 99 GB").kind == "none"


def test_loader_threads_checked_against_the_ranks_cores(monkeypatch) -> None:
    cores = len(os.sched_getaffinity(0))
    assert loader_threads(cores, ranks_on_node=1) == cores
    for bad in (0, cores + 1):
        with pytest.raises(ConfigError, match=f"between 1 and this rank's {cores} core"):
            loader_threads(bad, ranks_on_node=1)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "12")
    assert loader_threads(None, ranks_on_node=4) == 6  # half the share: TF needs the rest
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "64")
    assert loader_threads(None, ranks_on_node=1) == 8  # capped: memory bandwidth limits
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    assert loader_threads(None, ranks_on_node=cores * 4) == 1


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_row_gather_copies_exactly_the_rows_asked_for(threads: int) -> None:
    images = np.random.default_rng(0).integers(0, 2**16, (50, 4, 4, 3), dtype=np.uint16)
    gather = RowGather(images, threads=threads, empty=aligned_empty)
    for idx in (np.array([3]), np.arange(50), np.array([0, 7, 7, 49, 12, 30, 31])):
        out = gather(idx)
        assert out.ctypes.data % 64 == 0
        np.testing.assert_array_equal(out, images[idx])
    gather.close()


@pytest.mark.parametrize("cache", ["device", "memory"])
def test_tensor_batches_equal_the_numpy_batches(shards_v1: Path, cache: str) -> None:
    part = RankData(shards_v1, read_manifest(shards_v1), "train", labels=19, cache=cache, threads=2)
    as_numpy = list(part.batches(3, epoch=1, seed=5, shuffle=True))
    as_tensors = list(part.dataset(3, epoch=1, seed=5, shuffle=True))
    assert len(as_numpy) == len(as_tensors) == 3
    for batch, tensors in zip(as_numpy, as_tensors):
        assert batch.maps is None and tensors.maps is None  # opened without maps
        np.testing.assert_array_equal(batch.images, tensors.images.numpy())
        np.testing.assert_array_equal(batch.labels, tensors.labels.numpy())


def _train(shards: Path, run: Path, *extra: str) -> list[float]:
    assert train.main(train_argv(shards, run, 2, "--max-steps-per-epoch", "4", *extra)) == 0
    return [row.loss for row in read_history(run)]


def test_device_cache_and_loader_threads_train_exactly_like_the_memory_cache(
    tmp_path: Path, shards_v1: Path, rank_log
) -> None:
    reference = _train(shards_v1, tmp_path / "memory", "--cache", "memory")
    on_device = _train(shards_v1, tmp_path / "device", "--cache", "device")
    threaded = _train(shards_v1, tmp_path / "threads", "--cache", "memory", "--loader-threads", "2")
    assert on_device == reference and threaded == reference
    lines = [r.getMessage() for r in rank_log.records]
    assert any(line.startswith("cache: device on /CPU:0 (no accelerator") for line in lines)


def test_bf16_trains_with_float32_loss_and_is_saved_in_the_run(
    tmp_path: Path, shards_v1: Path
) -> None:
    losses = _train(shards_v1, tmp_path / "bf16", "--amp", "bf16")
    assert all(np.isfinite(losses))
    assert load_run_config(tmp_path / "bf16").amp == "bf16"


def test_amp_flag_alone_and_old_yaml_values_mean_fp16(tmp_path: Path) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    bare = resolve(parser.parse_args(["--data", "d", "--run-dir", "r", "--amp"]))
    assert bare.amp == "fp16"
    old = tmp_path / "old.yaml"
    old.write_text("amp: true\n")
    from_yaml = resolve(parser.parse_args(["--config", str(old), "--data", "d", "--run-dir", "r"]))
    assert from_yaml.amp == "fp16" and TrainConfig(data="d", run_dir="r", amp=False).amp == "off"


@pytest.mark.parametrize("threads", ["0", str(len(os.sched_getaffinity(0)) + 1)])
def test_bad_loader_threads_is_one_line_exit_2(
    threads: str, tmp_path: Path, shards_v1: Path, reported_errors
) -> None:
    run = tmp_path / "run"
    argv = ["--data", str(shards_v1), "--run-dir", str(run), *TINY_RECIPE, "--loader-threads"]
    assert train.main([*argv, threads]) == 2
    errors = reported_errors()
    # 0: refused as the flag is parsed; more than the cores: when the loader is sized
    assert len(errors) == 1 and "--loader-threads" in errors[0] and "must be" in errors[0], errors
    assert not (run / "checkpoints").exists()
