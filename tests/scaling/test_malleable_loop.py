"""The malleable loop closed on one machine: a real elastic training (horovodrun, Gloo on
loopback, hosts from jobs/elastic/discover_hosts.sh) started on 2 ranks, and
``bigearthnet-elastic follow --policy gns --local 1`` following it. The policy must grow the
run once the measured B_simple admits the larger world's batch, shrink it once validation
F1 plateaus, and the run must finish; what happened (``elastic_events.csv``), why
(``elastic_decisions.csv``) and what was measured (``history.csv``) must agree epoch by
epoch. The 2-core machine runs 4 ranks oversubscribed: slow, but the same loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import DISCOVER, REPO, preprocess

from bigearthnet.core.util import read_csv
from bigearthnet.formats.elastic_log import DECISIONS
from bigearthnet.formats.history import read_history

PATCHES = 800  # train 480: epochs long enough for the follower to act inside the next one
EPOCHS = 12
FOLLOWER = str(Path(sys.executable).with_name("bigearthnet-elastic"))


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    from bigearthnet.synthetic.archive import ArchiveSpec, generate_archive

    root = tmp_path_factory.mktemp("malleable")
    generate_archive(
        root / "archive", ArchiveSpec(PATCHES, layout="v1", seed=0, difficulty="simple")
    )
    assert preprocess(root / "archive", root / "shards", "--shard-size", "100") == 0
    return root / "shards"


def training(shards: Path, run: Path) -> list[str]:
    return [
        str(Path(sys.executable).with_name("horovodrun")),
        *("-np", "2", "--min-np", "1", "--max-np", "4"),
        *("--host-discovery-script", str(DISCOVER), "--network-interface", "lo", "--gloo"),
        sys.executable,
        "train.py",
        "--elastic",
        *("--data", str(shards), "--run-dir", str(run), "--epochs", str(EPOCHS)),
        *("--model", "tiny", "--optimizer", "adam", "--lr", "0.005", "--batch-size", "4"),
        *("--warmup-epochs", "0", "--threads", "1", "--no-progress", "--commit-every", "4"),
    ]


def follower(hosts: Path, run: Path) -> list[str]:
    return [
        FOLLOWER,
        *("--hosts-dir", str(hosts), "follow", "--run-dir", str(run)),
        *("--policy", "gns", "--local", "1", "--max-workers", "4", "--margin", "4"),
        *("--min-workers", "2", "--dwell-epochs", "2"),
        *("--plateau-epochs", "2", "--plateau-delta", "0.04"),
        *("--poll", "0.5", "--history-timeout", "300"),
    ]


@pytest.mark.slow
@pytest.mark.horovod
def test_the_noise_scale_policy_grows_then_shrinks_a_real_training(
    shards: Path, tmp_path: Path
) -> None:
    hosts, run = tmp_path / "hosts", tmp_path / "run"
    hosts.mkdir()
    (hosts / "start.hosts").write_text("localhost:2\n")
    env = {**os.environ, "ELASTIC_HOSTS_DIR": str(hosts), "TF_CPP_MIN_LOG_LEVEL": "2"}
    log = (tmp_path / "train.log").open("w")
    train = subprocess.Popen(training(shards, run), cwd=REPO, env=env, stdout=log, stderr=log)
    try:
        follow = subprocess.run(
            follower(hosts, run), cwd=REPO, env=env, capture_output=True, text=True, timeout=900
        )
        assert train.wait(timeout=300) == 0, (tmp_path / "train.log").read_text()[-3000:]
    finally:
        train.kill()
    assert follow.returncode == 0, follow.stdout + follow.stderr
    assert f"the run ended after epoch {EPOCHS} ({EPOCHS} epochs done)" in follow.stdout
    assert json.loads((run / "status.json").read_text())["state"] == "finished"

    history = read_history(run)
    decisions = read_csv(run / DECISIONS)
    resizes = [e for e in read_csv(run / "elastic_events.csv") if e["event"] == "resize"]
    assert [r.epoch for r in history] == list(range(1, EPOCHS + 1))

    # Why: every decision stands on the B_simple the run measured up to its epoch (the mean
    # of the last two epochs, as the policy smooths it) and on the world that epoch ran on.
    for decision in decisions:
        epoch = int(decision["epoch"])
        measured = [r.gns_b_simple for r in history[:epoch] if r.gns_b_simple is not None]
        smoothed = sum(measured[-2:]) / len(measured[-2:])
        assert float(decision["b_simple"]) == pytest.approx(smoothed, abs=0.06)
        assert int(decision["workers_before"]) == history[epoch - 1].world_size
    changes = [d for d in decisions if d["verb"] != "stay"]
    verbs = [d["verb"] for d in changes]
    assert verbs[:2] == ["grow", "shrink"], follow.stdout
    grow, shrink = changes[0], changes[1]
    assert int(grow["workers_after"]) > 2 and "larger batches still pay" in grow["reason"]
    assert 4 * int(grow["global_batch_after"]) <= float(grow["b_simple"])  # the margin held
    assert "plateaued" in shrink["reason"]

    # What happened: one resize per change, to the size decided, after the decision.
    assert len(resizes) == len(changes), (resizes, changes)
    for decision, resize in zip(changes, resizes, strict=True):
        assert int(resize["new_size"]) == int(decision["workers_after"])
        assert int(resize["epoch"]) >= int(decision["epoch"])
    # What was measured afterwards: epochs that started after a resize ran on its size.
    for resize in resizes:
        first_full = int(resize["epoch"]) + (1 if int(resize["consumed"]) else 0)
        later = [r for r in history if r.epoch >= first_full]
        following = [e for e in resizes if int(e["epoch"]) > int(resize["epoch"])]
        until = int(following[0]["epoch"]) if following else EPOCHS + 1
        assert {r.world_size for r in later if r.epoch < until} <= {int(resize["new_size"])}
    # The hosts folder holds the run's own 2 slots plus one entry per worker the last
    # change left (a plateau that ends lets B_simple grow the run again).
    entries = sorted(p.name for p in hosts.glob("local-*.hosts"))
    assert len(entries) == int(changes[-1]["workers_after"]) - 2, entries
