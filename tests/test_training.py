"""train.py: sharding, learning, resume, requeue, bad input, and a true 2-rank Horovod run."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import REPO, TINY_RECIPE, error_lines, horovodrun, preprocess

import train
from bigearthnet import distributed
from bigearthnet.config import TrainConfig
from bigearthnet.data import RankData
from bigearthnet.partition import rank_range, split_batches, steps_per_epoch
from bigearthnet.shards import read_manifest


def history(run: Path) -> list[dict]:
    with open(run / "history.csv", newline="") as f:
        return list(csv.DictReader(f))


def chance_micro_f1(labels: np.ndarray) -> float:
    """micro-F1 of predicting every class for every sample (recall 1): the no-skill bar."""
    precision = labels.sum() / labels.size
    return 2 * precision / (1 + precision)


# --------------------------------------------------------------------------- sharding


@pytest.mark.parametrize("total, size", [(10, 3), (7, 7), (100, 8), (5, 2)])
def test_rank_ranges_cover_every_sample_once(total: int, size: int) -> None:
    covered = np.concatenate([np.arange(*rank_range(total, r, size)) for r in range(size)])
    assert np.array_equal(covered, np.arange(total))
    lengths = [np.subtract(*rank_range(total, r, size)[::-1]) for r in range(size)]
    assert max(lengths) - min(lengths) <= 1


def test_batches_are_equal_in_number_and_nearly_in_size() -> None:
    steps = steps_per_epoch(total=101, size=4, batch_size=8)  # parts of 25 and 26
    for part in (25, 26):
        batches = split_batches(np.arange(part), steps)
        assert len(batches) == steps and min(map(len, batches)) >= 1
        assert max(map(len, batches)) <= 8 and np.array_equal(np.sort(np.concatenate(batches)),
                                                               np.arange(part))  # fmt: skip


@pytest.mark.parametrize("cache", ["memory", "none"])
def test_ranks_see_every_training_sample_once_per_epoch(shards_v1: Path, cache: str) -> None:
    manifest = read_manifest(shards_v1)
    size, batch = 3, 7
    parts = [
        RankData(shards_v1, manifest, "train", labels=19, rank=r, size=size, cache=cache)
        for r in range(size)
    ]
    steps = steps_per_epoch(parts[0].total, size, batch)
    seen_by_epoch = []
    for epoch in range(2):
        names = []
        for part in parts:
            batches = list(part.batches(steps, epoch=epoch, seed=1, shuffle=True))
            assert len(batches) == steps
            all_names = part.names()
            for images, _labels in batches:
                assert images.dtype == np.uint16 and images.shape[1:] == (120, 120, 12)
                names += [_name_of(part, all_names, img) for img in images]
        assert sorted(names) == sorted(n for p in parts for n in p.names())
        assert len(set(names)) == manifest.count("train")
        seen_by_epoch.append(names)
    assert seen_by_epoch[0] != seen_by_epoch[1]  # a new shuffle each epoch


def _name_of(part: RankData, names: list[str], image: np.ndarray) -> str:
    if not hasattr(part, "_lookup"):
        images = part._read_rows("images", part.start, part.stop)
        part._lookup = {img.tobytes(): n for img, n in zip(images, names)}
    return part._lookup[image.tobytes()]


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
        assert [len(images) for images, _ in batches] == [batch] * steps
    assert not np.array_equal(epochs[0][0][0], epochs[1][0][0])  # other samples next epoch
    tensors = list(part.dataset(steps, epoch=0, seed=5, shuffle=True, limit=steps * batch))
    assert all(np.array_equal(a[0], b[0].numpy()) for a, b in zip(epochs[0], tensors))


def test_cache_problem_only_when_the_node_lacks_memory(tmp_path: Path) -> None:
    from bigearthnet.data import SAMPLE_BYTES, cache_problem, memory_available

    assert SAMPLE_BYTES == 120 * 120 * 12 * 2
    gb = 1024**3
    assert cache_problem(1000, 4, 100 * gb) is None
    assert cache_problem(10**6, 4, None) is None  # unknown: do not guess
    problem = cache_problem(275_000, 4, 64 * gb)  # v1 train split on one 4-GPU node
    assert problem.startswith("--cache memory needs 354.1 GB on this node (4 rank(s) x ")
    assert "64.0 GB are available; use --cache none" in problem
    assert memory_available() > 0  # psutil: the node's MemAvailable


def test_a_cache_that_cannot_fit_stops_with_one_line(
    tmp_path: Path, shards_v1: Path, monkeypatch, rank_log
) -> None:
    from bigearthnet import training

    monkeypatch.setattr(training, "memory_available", lambda: 10 * 2**20)  # 10 MB free
    argv = ["--data", str(shards_v1), "--run-dir", str(tmp_path / "run"), "--no-eval-test",
            *TINY_RECIPE, "--epochs", "1", "--cache", "memory"]  # fmt: skip
    assert train.main(argv) == 2
    errors = [r.getMessage() for r in rank_log.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "--cache memory needs" in errors[0], errors
    assert "use --cache none" in errors[0] and "\n" not in errors[0]
    assert train.main([*argv, "--cache", "none"]) == 0  # streaming needs no room


# --------------------------------------------------------------------------- training


def test_single_process_learns_the_synthetic_rule(trained_run: Path, shards_v1: Path) -> None:
    rows = history(trained_run)
    assert [int(r["epoch"]) for r in rows] == list(range(1, 7))
    labels = RankData(shards_v1, read_manifest(shards_v1), "val", labels=19, cache="none").labels
    bar = max(0.45, chance_micro_f1(labels) + 0.2)  # chance is ~0.2 here
    assert float(rows[-1]["val_micro_f1"]) > bar
    assert float(rows[-1]["loss"]) < float(rows[0]["loss"])
    config = yaml.safe_load((trained_run / "config.yaml").read_text())
    assert config["model"] == "tiny" and config["epochs"] == 6
    best = json.loads((trained_run / "checkpoints" / "best.json").read_text())
    assert best["val_micro_f1"] == max(float(r["val_micro_f1"]) for r in rows)
    assert list((trained_run / "tensorboard").iterdir())
    report = json.loads((trained_run / "efficiency.json").read_text())
    assert report["per_rank"][0]["samples"] == read_manifest(shards_v1).count("train")


def test_options_yaml_then_flags(tmp_path: Path, shards_v1: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model: tiny\nepochs: 1\nbatch_size: 16\nlr: 0.5\nmax_steps_per_epoch: 2\n")
    run = tmp_path / "run"
    argv = ["--config", str(recipe), "--data", str(shards_v1), "--run-dir", str(run), "--lr",
            "0.001", "--no-eval-test", "--no-progress", "--threads", "1"]  # fmt: skip
    assert train.main(argv) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert (saved["batch_size"], saved["lr"], saved["epochs"]) == (16, 0.001, 1)
    report = json.loads((run / "efficiency.json").read_text())
    assert report["per_rank"][0]["samples"] == 2 * 16  # max_steps_per_epoch 2 batches of 16
    assert saved["momentum"] == TrainConfig().momentum  # untouched default
    bad = tmp_path / "bad.yaml"
    bad.write_text("modle: tiny\n")
    assert train.main(["--config", str(bad), "--data", "x", "--run-dir", "y"]) == 2


def test_accumulation_and_fp16_allreduce_run(tmp_path: Path, shards_v1: Path) -> None:
    run = tmp_path / "run"
    argv = ["--data", str(shards_v1), "--run-dir", str(run), "--epochs", "1", "--no-eval-test",
            "--backward-passes-per-step", "2", "--fp16-allreduce", "--cache", "none"]  # fmt: skip
    assert train.main(argv + TINY_RECIPE) == 0
    assert len(history(run)) == 1


def _train_cmd(data: Path, run: Path, epochs: int, *extra: str) -> list[str]:
    return [sys.executable, "train.py", "--data", str(data), "--run-dir", str(run), "--epochs",
            str(epochs), "--no-eval-test", *TINY_RECIPE, *extra]  # fmt: skip


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, "training ended before the expected checkpoint"
        assert time.time() < deadline, f"timed out waiting for {path}"
        time.sleep(0.05)


def test_killed_run_resumes_to_the_requested_epochs(tmp_path: Path, shards_v1: Path) -> None:
    run = tmp_path / "run"
    proc = subprocess.Popen(_train_cmd(shards_v1, run, 30), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    _wait_for(run / "checkpoints" / "latest.json", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = json.loads((run / "checkpoints" / "latest.json").read_text())["epoch"]
    assert 1 <= done < 30
    # Fewer epochs keep the test short: the run ends at the requested count, history continues.
    target = done + 2
    result = subprocess.run(_train_cmd(shards_v1, run, target), cwd=REPO, capture_output=True,
                            text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"resumed from latest-e{done:04d}" in result.stderr
    assert [int(r["epoch"]) for r in history(run)] == list(range(1, target + 1))
    assert json.loads((run / "checkpoints" / "latest.json").read_text())["epoch"] == target


def test_sigusr1_checkpoints_mid_epoch_and_exits_3(tmp_path: Path, shards_v1: Path) -> None:
    run = tmp_path / "run"
    cmd = _train_cmd(shards_v1, run, 40, "--batch-size", "2")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    _wait_for(run / "checkpoints" / "latest.json", proc)
    proc.send_signal(signal.SIGUSR1)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == train.EXIT_REQUEUE, stderr[-2000:]
    pointer = json.loads((run / "checkpoints" / "latest.json").read_text())
    assert pointer["step"] >= 1 and pointer["folder"].endswith(f"-s{pointer['step']:06d}")
    # The losses of the done steps travel along: the resumed epoch's mean covers all steps.
    assert pointer["loss_steps"] == pointer["step"] and pointer["loss_sum"] > 0
    epochs_done = pointer["epoch"]
    assert len(history(run)) == epochs_done  # the partial epoch is not in the history
    result = subprocess.run(_train_cmd(shards_v1, run, epochs_done + 1, "--batch-size", "2"),
                            cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"step {pointer['step']}" in result.stderr
    assert [int(r["epoch"]) for r in history(run)] == list(range(1, epochs_done + 2))


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path, shards_v1) -> None:
    run = tmp_path / "run"
    base = ["--data", str(shards_v1), "--run-dir", str(run), "--no-eval-test", "--model",
            "tiny", "--optimizer", "sgd", "--warmup-epochs", "0", "--no-progress",
            "--threads", "1"]  # fmt: skip
    assert train.main(base + ["--epochs", "1", "--lr", "0.01"]) == 0
    good = (run / "checkpoints" / "latest.json").read_text()
    assert train.main(base + ["--epochs", "3", "--lr", "1e30"]) == 1
    assert (run / "checkpoints" / "latest.json").read_text() == good


# --------------------------------------------------------------------------- bad input


@pytest.fixture(scope="module")
def shards_v2(synth_v2: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("shards") / "v2"
    assert preprocess(synth_v2, out) == 0
    return out


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing data", "data folder does not exist"),
        ("no manifest", "no manifest"),
        ("corrupt shard", "differs from the manifest"),
        ("labels 43 on v2", "19-class labels only"),
        ("unknown model", "unknown model 'resnet9000'"),
        ("batch size 0", "--batch-size must be a positive integer"),
        ("epochs 0", "--epochs must be a positive integer"),
        ("other model in run dir", "holds a run with model=tiny"),
    ],
)
def test_bad_input_is_one_line_exit_2(case, message, tmp_path, shards_v1, shards_v2,
                                      trained_run) -> None:  # fmt: skip
    data, run, extra = shards_v1, tmp_path / "run", []
    if case == "missing data":
        data = tmp_path / "nowhere"
    elif case == "no manifest":
        data = tmp_path / "empty"
        data.mkdir()
    elif case == "corrupt shard":
        data = tmp_path / "copy"
        shutil.copytree(shards_v1, data)
        victim = sorted(data.glob("train-*.h5"))[0]
        blob = bytearray(victim.read_bytes())
        blob[-100] ^= 0xFF
        victim.write_bytes(bytes(blob))
    elif case == "labels 43 on v2":
        data, extra = shards_v2, ["--labels", "43"]
    elif case == "unknown model":
        extra = ["--model", "resnet9000"]
    elif case == "batch size 0":
        extra = ["--batch-size", "0"]
    elif case == "epochs 0":
        extra = ["--epochs", "0"]
    elif case == "other model in run dir":
        run = tmp_path / "copied-run"
        shutil.copytree(trained_run, run)
        extra = ["--model", "resnet18"]
    cmd = [sys.executable, "train.py", "--data", str(data), "--run-dir", str(run), "--epochs",
           "1", "--model", "tiny", "--no-progress", *extra]  # fmt: skip
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = error_lines(result.stderr)
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in result.stderr
    assert not (run / "checkpoints").exists() or case == "other model in run dir"


def test_world_size_mismatch_is_loud() -> None:
    distributed.init()
    env = {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4"}
    with pytest.raises(distributed.DistributedError, match="SLURM_STEP_NUM_TASKS=4"):
        distributed.check_world_size(env)
    distributed.check_world_size({"SLURM_NTASKS": "4"})  # a batch script is not a step
    distributed.check_world_size({})


def test_help_explains_every_option() -> None:
    text = train.build_parser().format_help()
    for flag in ("--data", "--run-dir", "--config", "--model", "--labels", "--epochs",
                 "--batch-size", "--lr", "--warmup-epochs", "--schedule", "--mixup-alpha",
                 "--optimizer", "--seed", "--amp", "--xla", "--cache", "--no-resume",
                 "--fp16-allreduce", "--backward-passes-per-step", "--horovod-timeline",
                 "--grouped-allreduce"):  # fmt: skip
        assert flag in text, flag


def test_every_flag_passes_through_horovodrun(monkeypatch) -> None:
    """horovodrun parses its whole command line: a train.py or evaluate.py flag that is an
    ambiguous abbreviation of its own options (``--timeline``) would stop it."""
    from horovod.runner import launch

    import evaluate

    for parser in (train.build_parser(), evaluate.build_parser()):
        flags = [o for action in parser._actions for o in action.option_strings if o[:2] == "--"]
        assert len(flags) > 5
        for flag in flags:
            command = ["python", parser.prog, flag, "value"]
            monkeypatch.setattr(sys, "argv", ["horovodrun", "-np", "2", *command])
            assert launch.parse_args().command == command, flag


# --------------------------------------------------------------------------- 2 ranks


@pytest.mark.horovod
def test_two_ranks_learn_with_identical_replicas(tmp_path: Path, shards_v1: Path) -> None:
    run = tmp_path / "run"
    result = horovodrun(2, "tests/replica_digest.py", "--data", str(shards_v1), "--run-dir",
                        str(run), "--epochs", "6", *TINY_RECIPE)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    digests = {(run / f"weights-rank{r}.sha256").read_text() for r in range(2)}
    assert len(digests) == 1, "replicas diverged"
    rows = history(run)
    assert {r["world_size"] for r in rows} == {"2"}
    labels = RankData(shards_v1, read_manifest(shards_v1), "val", labels=19, cache="none").labels
    assert float(rows[-1]["val_micro_f1"]) > max(0.45, chance_micro_f1(labels) + 0.2)
    report = json.loads((run / "efficiency.json").read_text())
    per_rank = [r["samples"] for r in report["per_rank"]]
    assert sum(per_rank) == read_manifest(shards_v1).count("train")  # each sample once
    assert abs(per_rank[0] - per_rank[1]) <= 1
    assert "peak LR 0.02" in result.stdout + result.stderr  # 0.01 x 2 ranks
    assert os.path.isfile(run / "checkpoints" / "best.json")


def test_stop_signal_is_remembered_then_ignored_after_training() -> None:
    from bigearthnet.signals import STOP

    previous = signal.getsignal(signal.SIGUSR1)
    with STOP.handling():
        os.kill(os.getpid(), signal.SIGUSR1)  # e.g. during start-up: remembered
        assert STOP.requested
        STOP.requested, STOP.training_over = False, True
        os.kill(os.getpid(), signal.SIGTERM)  # during the final evaluation: ignored
        assert not STOP.requested
    assert signal.getsignal(signal.SIGUSR1) is previous  # the caller's handlers are back


def test_a_warning_after_training_stopped_does_not_kill_the_process(tmp_path: Path) -> None:
    """The job script passes SIGUSR1 to the ranks one after another: a rank that already
    stopped and left the training must still exit with its code (3), not die of it (138)."""
    code = (
        "import os, signal, sys, train\n"
        f"rc = train.{{}}(['--data', '{tmp_path / 'missing'}', '--run-dir', '{tmp_path}/r'])\n"
        "os.kill(os.getpid(), signal.SIGUSR1)\n"
        "sys.exit(rc)\n"
    )
    for entry, expected in (("cli", 2), ("main", -signal.SIGUSR1)):  # main: in-process use
        result = subprocess.run([sys.executable, "-c", code.format(entry)], cwd=REPO,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        assert result.returncode == expected, (entry, result.stderr[-2000:])


def test_a_warning_during_start_up_stops_training_at_its_first_step(
    tmp_path: Path, shards_v1: Path
) -> None:
    """A SIGUSR1 that comes before train.py's handlers exist (interpreter and argument
    parsing) is remembered: training stops at its first step, checkpoints, and exits 3."""
    argv = ["--data", str(shards_v1), "--run-dir", str(tmp_path / "run"), "--epochs", "2",
            "--no-eval-test", *TINY_RECIPE]  # fmt: skip
    code = (
        "import os, signal, sys, train\n"
        "from bigearthnet.signals import remember_warnings\n"
        "remember_warnings()  # what train.cli does first\n"
        "os.kill(os.getpid(), signal.SIGUSR1)\n"
        f"sys.exit(train.main({argv!r}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert result.returncode == train.EXIT_REQUEUE, result.stderr[-2000:]
    assert "SIGUSR1 during start-up" in result.stderr
    pointer = json.loads((tmp_path / "run" / "checkpoints" / "latest.json").read_text())
    assert (pointer["epoch"], pointer["step"]) == (0, 1)


def test_stop_on_the_last_step_finishes_the_epoch_first(tmp_path, shards_v1) -> None:
    from bigearthnet import training
    from bigearthnet.config import resolve
    from bigearthnet.signals import STOP

    run = tmp_path / "run"
    argv = ["--data", str(shards_v1), "--run-dir", str(run), "--epochs", "3", "--no-eval-test",
            *TINY_RECIPE, "--batch-size", "200"]  # fmt: skip  # one step per epoch
    cfg = resolve(train.build_parser().parse_args(argv))
    distributed.init(threads=1)  # as train.main does (other tests may not have run first)
    with STOP.handling():
        trainer = training.Trainer(cfg)
        assert trainer.steps == 1
        STOP.requested = True  # the vote lands on the epoch's last (only) step
        with pytest.raises(training.RequeueRequested, match="after epoch 1"):
            trainer.run()
    pointer = json.loads((run / "checkpoints" / "latest.json").read_text())
    assert (pointer["epoch"], pointer["step"]) == (1, 0)  # a whole epoch, not "step 1 of 1"
    rows = history(run)
    assert len(rows) == 1 and np.isfinite(float(rows[0]["loss"]))
