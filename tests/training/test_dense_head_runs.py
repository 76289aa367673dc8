"""The dense head in training: a run on shards with maps trains it and records it, resumes
with it, and 2 ranks (a true horovodrun) train exactly what 1 rank trains on the whole
batch: the pixel loss is the global batch's mean over its labelled pixels."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import REPO, TINY_RECIPE, elastic_command, horovodrun, python_script, train_argv

import train
from bigearthnet.core.config import load_run_config
from bigearthnet.core.options import DEFAULT_PIXEL_LOSS_WEIGHT
from bigearthnet.formats import checkpoints
from bigearthnet.formats.history import read_history


def test_a_run_on_shards_with_maps_trains_and_records_the_dense_head(trained_head_run) -> None:
    assert load_run_config(trained_head_run).pixel_loss_weight == DEFAULT_PIXEL_LOSS_WEIGHT
    for tag in ("best", "latest"):
        assert checkpoints.read_pointer(trained_head_run, tag).dense_head
    rows = read_history(trained_head_run)
    assert all(0 <= r.val_pixel_accuracy <= 1 and 0 <= r.val_pixel_miou <= 1 for r in rows)
    # learned where the classes are: 19 classes, chance is ~0.05
    assert rows[-1].val_pixel_accuracy > 0.3, [r.val_pixel_accuracy for r in rows]


def test_a_resumed_run_continues_with_its_dense_head(trained_head_run, shards_v2, tmp_path):
    """The checkpoint holds the decoder (restoring checks every object), and the resumed
    epochs keep training it."""
    run = tmp_path / "run"
    shutil.copytree(trained_head_run, run)
    assert train.main(train_argv(shards_v2, run, 5)) == 0
    rows = read_history(run)
    assert len(rows) == 5 and rows[-1].val_pixel_accuracy is not None
    assert rows[:4] == read_history(trained_head_run)


@pytest.mark.slow  # two horovodrun launches and a 1-rank script: ~40 s
@pytest.mark.horovod
def test_two_ranks_average_the_pixel_loss_over_the_global_batch(tmp_path: Path) -> None:
    """The same global batch of 8 as 2 ranks x 4 and as 1 rank x 8, its two halves with very
    different numbers of labelled pixels: the same losses and weights, because each rank
    divides its pixel-loss sum by the global batch's labelled pixels (a mean of the ranks'
    means would weigh a pixel of the sparse half several times more)."""
    results = {}
    for ranks in (1, 2):
        out = tmp_path / f"{ranks}.json"
        probe = ["tests/pixel_probe.py", str(out)]
        run = horovodrun(ranks, *probe) if ranks > 1 else python_script(*probe)
        assert run.returncode == 0, run.stderr[-3000:]
        results[ranks] = json.loads(out.read_text())
    (sum_0, count_0), (sum_1, count_1) = results[2]["parts"]
    assert count_0 > 2 * count_1 > 0  # the halves differ: a test that can fail
    global_mean = (sum_0 + sum_1) / (count_0 + count_1)
    mean_of_means = (sum_0 / count_0 + sum_1 / count_1) / 2
    assert abs(mean_of_means - global_mean) > 0.01 * global_mean
    assert results[1]["parts"][0] == pytest.approx([sum_0 + sum_1, count_0 + count_1], rel=1e-5)
    assert results[2]["losses"] == pytest.approx(results[1]["losses"], rel=1e-5)
    for two, one in zip(results[2]["weights"], results[1]["weights"]):
        assert two == pytest.approx(one, rel=1e-4, abs=1e-6)


@pytest.mark.slow  # a 2-rank horovodrun of train.py: ~60 s
@pytest.mark.horovod
def test_two_ranks_train_the_dense_head_with_identical_replicas(
    tmp_path: Path, shards_v2: Path
) -> None:
    run = tmp_path / "run"
    result = horovodrun(2, "tests/replica_digest.py", "--data", str(shards_v2), "--run-dir",
                        str(run), "--epochs", "3", *TINY_RECIPE, "--batch-size", "4")  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    digests = {(run / f"weights-rank{r}.sha256").read_text() for r in range(2)}
    assert len(digests) == 1, "replicas diverged"
    rows = read_history(run)
    assert {r.world_size for r in rows} == {2}
    assert all(r.val_pixel_accuracy is not None for r in rows)
    assert checkpoints.read_pointer(run, "latest").dense_head


@pytest.mark.slow  # an elastic horovodrun: ~40 s
@pytest.mark.horovod
def test_an_elastic_run_trains_the_dense_head(tmp_path: Path, shards_v2: Path) -> None:
    """The elastic source takes its rows by position (the global order): the maps come
    along, and the run records its head like a fixed-size one."""
    run, hosts = tmp_path / "run", tmp_path / "hosts"
    hosts.mkdir()
    (hosts / "one.hosts").write_text("localhost:1\n")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1", "ELASTIC_HOSTS_DIR": str(hosts)}
    done = subprocess.run(elastic_command(shards_v2, run, 1, 2), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_history(run)
    assert len(rows) == 2 and all(r.val_pixel_accuracy is not None for r in rows)
    pointer = checkpoints.read_pointer(run, "latest")
    assert pointer.dense_head and pointer.order == "global"
