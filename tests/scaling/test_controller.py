"""bigearthnet.scaling.controller and ``bigearthnet-elastic follow --local``: the follow loops
on a run folder that a writer thread fills epoch by epoch as a training would, resizing
through real localhost entries; and the bad input that must resize nothing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from helpers import history_row, hold_run_folder

from bigearthnet.cli import elastic as cli
from bigearthnet.core.config import RUN_CONFIG, TrainConfig, save_yaml
from bigearthnet.core.util import read_csv
from bigearthnet.formats.elastic_log import DECISIONS
from bigearthnet.formats.history import write_history
from bigearthnet.formats.run_status import RunStatus, write_status

PER_WORKER = 8


def train_in_background(
    run: Path, epochs: list[tuple[int, float, float]], pace: float, in_step: bool = False
):
    """A thread that writes one history row per (world, B_simple, val F1) every ``pace``
    seconds, then the run's end, as rank 0 of a training does. ``in_step``: each next row
    (and the end) waits until the follower has decided on the last one, so that a loaded
    machine cannot let the run end before the follower read its last epoch."""

    def write() -> None:
        rows = []
        for epoch, (world, noise, f1) in enumerate(epochs, start=1):
            time.sleep(pace)
            rows.append(
                history_row(
                    epoch,
                    world_size=world,
                    global_batch=world * PER_WORKER,
                    gns_b_simple=noise,
                    val_micro_f1=f1,
                )
            )
            write_history(run, rows)
            if in_step:
                _await_decisions(run, epoch)
        time.sleep(pace)
        write_status(run, RunStatus("finished", len(epochs), f"{len(epochs)} epochs done"))

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def _await_decisions(run: Path, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (run / DECISIONS).is_file() and len(read_csv(run / DECISIONS)) >= count:
            return
        time.sleep(0.02)


def follow(hosts: Path, run: Path, *extra: str) -> int:
    return cli.main(
        ["--hosts-dir", str(hosts), "follow", "--run-dir", str(run), "--poll", "0.02", *extra]
    )


POLICY = ["--policy", "gns", "--max-workers", "4", "--local", "1", "--dwell-epochs", "2"]


def test_follow_local_grows_on_the_noise_scale_and_shrinks_on_a_plateau(
    tmp_path: Path, capsys
) -> None:
    hosts, run = tmp_path / "hosts", tmp_path / "run"
    hosts.mkdir()
    run.mkdir()
    (hosts / "start.hosts").write_text("localhost:2\n")
    epochs = [  # (world size, B_simple, val micro-F1); the writer does not resize itself
        (2, 10.0, 0.50),  # 2 x 8 = 16 now; smoothed B_simple 10 < 32 at 4 workers: stay
        (2, 30.0, 0.60),  # (10 + 30) / 2 = 20 < 24 at 3 workers: stay
        (2, 70.0, 0.70),  # (30 + 70) / 2 = 50 >= 32: grow to 4
        (4, 80.0, 0.75),  # dwell
        (4, 90.0, 0.751),  # B_simple 85 vs 32: stay
        (4, 95.0, 0.752),  # plateau: +0.002 < 0.01 over 2 epochs: shrink to 2
        (2, 95.0, 0.752),  # dwell, then the run ends
    ]
    writer = train_in_background(run, epochs, pace=0.25, in_step=True)
    extra = ["--plateau-epochs", "2", "--plateau-delta", "0.01"]
    assert follow(hosts, run, *POLICY, *extra) == 0
    writer.join()
    decisions = read_csv(run / DECISIONS)
    assert [(d["epoch"], d["verb"]) for d in decisions] == [
        ("1", "stay"),
        ("2", "stay"),
        ("3", "grow"),
        ("4", "stay"),
        ("5", "stay"),
        ("6", "shrink"),
        ("7", "stay"),
    ]
    assert decisions[2]["b_simple"] == "50.0" and decisions[2]["global_batch_after"] == "32"
    assert "wrote local-001.hosts, local-002.hosts" in decisions[2]["outcome"]
    assert "plateaued" in decisions[5]["reason"]
    assert "removed local-002.hosts, local-001.hosts" in decisions[5]["outcome"]
    assert sorted(p.name for p in hosts.glob("*.hosts")) == ["start.hosts"]
    out = capsys.readouterr().out
    assert "the run ended after epoch 7 (7 epochs done): stop following" in out


def test_follow_local_resizes_nothing_at_the_runs_last_epoch(tmp_path: Path) -> None:
    """A decision on the run's last epoch (its RUN/config.yaml --epochs) would resize a world
    that is ending: the follower stays out of it (a shrink there left one resize fewer than
    decisions in the malleable loop)."""
    hosts, run = tmp_path / "hosts", tmp_path / "run"
    hosts.mkdir()
    run.mkdir()
    (hosts / "start.hosts").write_text("localhost:2\n")
    save_yaml(
        TrainConfig(data=str(tmp_path / "shards"), run_dir=str(run), epochs=6), run / RUN_CONFIG
    )
    epochs = [(2, 10.0, 0.50), (2, 30.0, 0.60), (2, 70.0, 0.70), (4, 80.0, 0.75),
              (4, 90.0, 0.751), (4, 95.0, 0.752)]  # fmt: skip
    writer = train_in_background(run, epochs, pace=0.25)
    assert follow(hosts, run, *POLICY, "--plateau-epochs", "2", "--plateau-delta", "0.01") == 0
    writer.join()
    decisions = read_csv(run / DECISIONS)
    assert [(d["epoch"], d["verb"]) for d in decisions][-1] == ("5", "stay")
    assert sorted(p.name for p in hosts.glob("local-*.hosts")) == ["local-001.hosts",
                                                                    "local-002.hosts"]  # fmt: skip


def test_follow_schedule_stops_when_the_run_ends(tmp_path: Path, capsys) -> None:
    hosts, run = tmp_path / "hosts", tmp_path / "run"
    hosts.mkdir()
    run.mkdir()
    schedule = tmp_path / "ramp.txt"
    schedule.write_text("epoch 1: grow to 3 workers\nepoch 9: shrink to 1 worker\n")
    writer = train_in_background(run, [(1, 0.0, 0.5), (3, 0.0, 0.6)], pace=0.2)
    assert follow(hosts, run, "--schedule", str(schedule), "--local", "1") == 0
    writer.join()
    out = capsys.readouterr().out
    assert "grow to 3: 0 slots: wrote local-001.hosts, local-002.hosts, local-003.hosts" in out
    assert "the run ended after epoch 2 (2 epochs done); 1 action(s) never applied" in out


@pytest.mark.parametrize(
    ("global_flags", "follow_flags", "phrase"),
    [
        (["--slots", "2"], [], "--local resizes without Slurm: drop --slots"),
        (["--sbatch-arg=-A=proj"], [], "--local resizes without Slurm: drop --sbatch-arg"),
        ([], ["--min-workers", "8"], "--min-workers must not exceed --max-workers"),
    ],
)
def test_bad_options_resize_nothing(
    tmp_path: Path,
    reported_errors,
    global_flags: list[str],
    follow_flags: list[str],
    phrase: str,
) -> None:
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    argv = ["--hosts-dir", str(hosts), *global_flags, "follow", "--run-dir", str(tmp_path)]
    assert cli.main([*argv, *POLICY, *follow_flags]) == 2
    errors = reported_errors()
    assert len(errors) == 1 and phrase in errors[0], errors
    assert list(hosts.iterdir()) == []  # not even claimed


def test_a_run_folder_that_never_writes_a_history_is_given_up(
    tmp_path: Path, reported_errors
) -> None:
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    started = time.monotonic()
    assert follow(hosts, tmp_path / "typo", *POLICY, "--history-timeout", "0.5") == 2
    assert time.monotonic() - started < 10
    errors = reported_errors()
    assert len(errors) == 1, errors
    assert (
        f"{tmp_path / 'typo'}: no epoch in history.csv after 0.5 s (--history-timeout)"
        in (errors[0])
    )
    assert list(hosts.glob("*.hosts")) == []
    assert follow(hosts, tmp_path / "no" / "run", *POLICY) == 2  # its parent is missing too
    assert "does not exist" in reported_errors()[-1]


def test_a_run_that_goes_quiet_fails_following(tmp_path: Path, reported_errors) -> None:
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    write_history(tmp_path, [history_row(1, world_size=2, global_batch=16, gns_b_simple=1.0)])
    assert follow(hosts, tmp_path, *POLICY, "--history-timeout", "0.3") == 1
    assert "no new epoch after epoch 1 for 0.3 s" in reported_errors()[0]


def test_a_hosts_folder_followed_by_another_controller_is_refused(
    tmp_path: Path, reported_errors
) -> None:
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    other = hold_run_folder(hosts)
    try:
        assert follow(hosts, tmp_path, *POLICY) == 2
    finally:
        other.kill()
        other.wait()
    errors = reported_errors()
    assert len(errors) == 1 and "follows this hosts folder; one controller per run" in errors[0]
    assert list(hosts.glob("*.hosts")) == []


def test_following_a_folder_where_an_earlier_run_ended_waits_for_the_new_run(
    tmp_path: Path, capsys
) -> None:
    """A follower started beside a training that has not yet cleared the folder of its
    predecessor (--no-resume) must neither stop at once on the old status.json nor decide on
    the old history."""
    hosts, run = tmp_path / "hosts", tmp_path / "run"
    hosts.mkdir()
    run.mkdir()
    old = [history_row(e, world_size=2, global_batch=16, gns_b_simple=1e3) for e in (1, 2, 3)]
    write_history(run, old)
    write_status(run, RunStatus("finished", 3, "3 epochs done"))
    writer = train_in_background(run, [(2, 20.0, 0.5), (2, 20.0, 0.6)], pace=0.3)  # stay
    assert follow(hosts, run, *POLICY) == 0
    writer.join()
    out = capsys.readouterr().out
    assert "a run there ended after epoch 3" in out
    assert "the run ended after epoch 2 (2 epochs done)" in out
    decisions = read_csv(run / DECISIONS)
    assert [d["epoch"] for d in decisions] == ["1", "2"]  # none on the old run's epoch 3
    assert list(hosts.glob("*.hosts")) == []
