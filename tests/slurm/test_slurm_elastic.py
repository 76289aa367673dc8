"""Malleable training under Slurm: jobs/elastic/ submitted for real to the test cluster.

The driver job (``jobs/elastic/train_elastic.sbatch``, one worker, registered as
``localhost``) trains; ``bigearthnet-elastic grow 1`` submits a holder job that registers this
machine's short hostname, a second host to Horovod, and the training grows to 2 workers;
``bigearthnet-elastic shrink 1`` cancels the holder and the training shrinks back to 1; a
time-limit warning then stops it mid-epoch, the driver requeues itself and the next run
finishes. A driver that finishes ends the holders still registered (and ``shrink`` cancels a
holder still pending). The runs ask for far more epochs than can run (a YAML config the
test lowers before the warning), so they last as long as the test needs on any machine.
Then bad input: a holder without its hosts folder, a driver with a bad site variable, and a
driver that never gets ELASTIC_MIN_NP slots and must stop after ELASTIC_TIMEOUT. The single
test node has 2 CPUs (``CR_CPU``): a 1-CPU driver and a 1-CPU holder run side by side. The
cluster and job helpers are those of test_slurm_jobs.py.
"""

from __future__ import annotations

import csv
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import history_row, preprocess
from slurm_cluster import (
    Job,
    SlurmCluster,
)
from test_slurm_jobs import (
    ENDLESS_EPOCHS,
    EPOCHS_AFTER_WARNING,
    JOB_TIMEOUT,
    JOBS,
    PATCHES,
    SHARD_SIZE,
    STOPPED,
    TINY,
    assert_completed,
    assert_failed_clearly,
    epochs_done,
    history,
    job_env,
    latest_checkpoint,
    run_seconds,
    wait_while_running,
)

# One Slurm test cluster per test run: every test that submits to it runs in one xdist worker.
pytestmark = pytest.mark.xdist_group("slurm")

CONTROLLER = str(Path(sys.executable).with_name("bigearthnet-elastic"))
ELASTIC = [*TINY, "--batch-size", "2", "--commit-every", "2"]
RESIZE_TIMEOUT = 180  # seconds for one grow or shrink to show in the driver's log


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """DATA_ROOT with the shards of a small synthetic archive, and logs/ to submit from."""
    from bigearthnet.synthetic.archive import ArchiveSpec, generate_archive

    root = tmp_path_factory.mktemp("slurm-elastic")
    (root / "logs").mkdir()
    generate_archive(
        root / "archive", ArchiveSpec(PATCHES, layout="v1", seed=0, difficulty="simple")
    )
    assert preprocess(root / "archive", root / "shards", "--shard-size", str(SHARD_SIZE)) == 0
    return root


def controller(
    cluster: SlurmCluster, workspace: Path, hosts: Path, *args: str
) -> subprocess.CompletedProcess:
    """``bigearthnet-elastic --hosts-dir HOSTS ARGS`` from the submission folder."""
    return subprocess.run(
        [CONTROLLER, "--hosts-dir", str(hosts), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=workspace,
        env=cluster.env(),
    )


def submit_driver(
    cluster: SlurmCluster, workspace: Path, experiment: str, *args: str, **env: str
) -> int:
    """The driver with one worker (one CPU), leaving the node's other CPU to a holder."""
    return cluster.submit(
        "elastic/train_elastic",
        "--ntasks-per-node=1",
        "--",
        *ELASTIC,
        *args,
        cwd=workspace,
        env=job_env(cluster, workspace, EXPERIMENT=experiment, **env),
    )


def start_following(
    cluster: SlurmCluster, workspace: Path, cmd: list[str]
) -> tuple[subprocess.Popen, str]:
    """``bigearthnet-elastic ... follow`` running in the background, and its first line."""
    follow = subprocess.Popen(
        cmd,
        cwd=workspace,
        env=cluster.env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    return follow, follow.stdout.readline() if follow.stdout else ""


def log_says(text: str):
    return lambda job: text in job.log()


def registered(hosts: Path) -> list[str]:
    return sorted(p.name for p in hosts.glob("*.hosts"))


@pytest.mark.slow
@pytest.mark.horovod
def test_holder_jobs_grow_and_shrink_the_training_then_a_warning_requeues_it(
    slurm_cluster: SlurmCluster, workspace: Path
) -> None:
    """However fast this machine trains, the run must outlast a grow and a shrink: its
    epochs come from a YAML config asking for far more than can run. After the shrink the
    test lowers them and sends the driver's shell what ``--signal=B:USR1@600`` sends
    before a time limit (``scancel --batch --signal=USR1``): the workers stop after the
    same step, rank 0 checkpoints the position in the epoch, the job requeues itself, and
    the next run reads the lowered count and finishes."""
    run = workspace / "runs" / "elastic"
    hosts = run / "hosts"
    config = workspace / "elastic.yaml"
    config.write_text(f"epochs: {ENDLESS_EPOCHS}\n")
    driver = submit_driver(slurm_cluster, workspace, "elastic", TRAIN_CONFIG=str(config))
    wait_while_running(
        slurm_cluster, driver, lambda _: epochs_done(run) >= 2, 240, "training on 1 worker"
    )
    assert registered(hosts) == [f"{driver}.hosts"]

    grown = controller(slurm_cluster, workspace, hosts, "grow", "1")
    assert grown.returncode == 0, grown.stderr
    holder = int(grown.stdout.split()[-1])  # "submitted holder jobs: <id>"
    wait_while_running(
        slurm_cluster, driver, log_says("world size 1 -> 2"), RESIZE_TIMEOUT, "growth to 2 workers"
    )
    wait_while_running(
        slurm_cluster, driver, log_says("[rank 0/2] epoch"), RESIZE_TIMEOUT, "an epoch on 2 workers"
    )
    status = controller(slurm_cluster, workspace, hosts, "status")
    assert f"holder {holder} RUNNING" in status.stdout, status.stdout + status.stderr
    assert "total 2 slot(s) on 2 host(s)" in status.stdout, status.stdout

    shrunk = controller(slurm_cluster, workspace, hosts, "shrink", "1")
    assert shrunk.returncode == 0 and str(holder) in shrunk.stdout, shrunk.stderr
    wait_while_running(
        slurm_cluster,
        driver,
        log_says("world size 2 -> 1"),
        RESIZE_TIMEOUT,
        "shrinking to 1 worker",
    )

    epochs = epochs_done(run) + 1 + EPOCHS_AFTER_WARNING  # the stop comes within an epoch
    config.write_text(f"epochs: {epochs}\n")
    slurm_cluster.run("scancel", "--batch", "--signal=USR1", str(driver))
    job = slurm_cluster.wait(driver, 600)
    assert_completed(job)
    assert job.restarts == 1, job.describe()
    log = job.log()  # --open-mode=append: both runs
    assert "--min-np 1 --max-np 2 --elastic-timeout 60 --network-interface lo" in log, log
    assert f"registered localhost:1 in {hosts}/{driver}.hosts" in log
    for needle in (
        "SIGUSR1: time limit near",
        STOPPED,
        f"requeueing job {driver} to resume (restart 1)",
        "resumed from",
        "training finished",
    ):
        assert needle in log, f"{needle!r} missing\n{job.describe()}"
    holder_job = slurm_cluster.wait(holder, JOB_TIMEOUT)
    assert_completed(holder_job)  # left on SIGTERM: a normal end
    me = socket.gethostname().split(".")[0]
    assert f"registered {me}:1 in {hosts}/{holder}.hosts" in holder_job.log()
    assert "leaving the elastic run" in holder_job.log(), holder_job.describe()
    assert registered(hosts) == []  # both jobs removed their registration

    with (run / "elastic_events.csv").open(newline="") as f:
        resizes = [r for r in csv.DictReader(f) if r["event"] == "resize"]
        events = [(int(r["old_size"]), int(r["new_size"])) for r in resizes]
    assert events == [(1, 2), (2, 1)], events
    rows = history(run)
    assert [int(r["epoch"]) for r in rows] == list(range(1, epochs + 1))
    assert {r["world_size"] for r in rows} == {"1", "2"}
    assert latest_checkpoint(run)["epoch"] == epochs


@pytest.mark.slow
@pytest.mark.horovod
def test_driver_ends_the_holders_left_when_training_is_over(
    slurm_cluster: SlurmCluster, workspace: Path
) -> None:
    """... and ``shrink`` cancels a holder still pending (a pending job takes no signal)."""
    hosts = workspace / "runs" / "release" / "hosts"
    config = workspace / "release.yaml"  # endless until lowered: outlasts the holders' start
    config.write_text(f"epochs: {ENDLESS_EPOCHS}\n")
    driver = submit_driver(slurm_cluster, workspace, "release", TRAIN_CONFIG=str(config))
    wait_while_running(slurm_cluster, driver, lambda _: hosts.is_dir(), 120, "registration")
    first = int(controller(slurm_cluster, workspace, hosts, "grow", "1").stdout.split()[-1])
    wait_while_running(
        slurm_cluster,
        driver,
        lambda _: (hosts / f"{first}.hosts").exists(),
        60,
        "the holder's registration",
    )
    second = int(controller(slurm_cluster, workspace, hosts, "grow", "1").stdout.split()[-1])
    status = controller(slurm_cluster, workspace, hosts, "status").stdout
    assert f"holder {second} PENDING" in status, status  # the node's 2 CPUs are taken
    shrunk = controller(slurm_cluster, workspace, hosts, "shrink", "1")
    assert shrunk.stdout.split()[-1] == str(second), shrunk.stdout + shrunk.stderr
    assert slurm_cluster.wait(second, 60).state == "CANCELLED"

    # Training ends: a warning stops this run (the requeued one reads the lowered count).
    config.write_text(f"epochs: {epochs_done(workspace / 'runs' / 'release') + 2}\n")
    slurm_cluster.run("scancel", "--batch", "--signal=USR1", str(driver))
    assert_completed(slurm_cluster.wait(driver, JOB_TIMEOUT))
    assert_completed(slurm_cluster.wait(first, JOB_TIMEOUT))  # not idle until its time limit
    assert f"ending holder job(s) {first}" in slurm_cluster.job(driver).log()
    assert registered(hosts) == []


@pytest.mark.slow
def test_follow_applies_a_schedule_as_epochs_finish(
    slurm_cluster: SlurmCluster, workspace: Path
) -> None:
    """``follow --schedule`` acts on RUN/history.csv: nothing before the epoch, a holder job
    once it finished; actions of epochs the run never reaches are reported, not applied."""
    from bigearthnet.formats.history import write_history

    hosts, run = workspace / "follow" / "hosts", workspace / "follow" / "run"
    hosts.mkdir(parents=True)
    run.mkdir()
    schedule = workspace / "follow" / "ramp.txt"
    schedule.write_text("# ramp\nepoch 1: grow to 1 worker\nepoch 9: grow to 3 workers\n")

    def finish(epochs: int) -> None:
        write_history(run, [history_row(e) for e in range(1, epochs + 1)])

    finish(1)
    cmd = [
        CONTROLLER,
        "--hosts-dir",
        str(hosts),
        "--name",
        "follow",
        "follow",
        "--run-dir",
        str(run),
        "--schedule",
        str(schedule),
        "--epochs",
        "2",
        "--poll",
        "0.2",
    ]
    follow, first = start_following(slurm_cluster, workspace, cmd)
    assert "epoch 1 (ramp.txt:2): grow to 1: 0 slots (+0 pending): submitted holders" in first
    assert follow.poll() is None  # epoch 9's action is still to come: it keeps following
    finish(2)  # the run reaches its last epoch: following ends
    rest, errors = follow.communicate(timeout=60)
    assert follow.returncode == 0, errors
    assert "epoch 2 of 2 done; 1 action(s) never applied" in rest
    status = controller(slurm_cluster, workspace, hosts, "--name", "follow", "status").stdout
    assert status.count("holder ") == 1, status
    shrunk = controller(slurm_cluster, workspace, hosts, "--name", "follow", "shrink", "1")
    job = int(shrunk.stdout.split()[-1])
    assert slurm_cluster.wait(job, JOB_TIMEOUT).state in ("CANCELLED", "COMPLETED")


# --------------------------------------------------------------------------- bad input
# (garbage in the hosts files: tests/test_elastic.py)


@pytest.mark.slow
def test_holder_without_its_hosts_folder_fails_with_one_clear_line(
    slurm_cluster: SlurmCluster, workspace: Path
) -> None:
    missing = workspace / "runs" / "nowhere" / "hosts"
    refused = controller(slurm_cluster, workspace, missing, "grow", "1")
    assert refused.returncode == 2
    assert (
        refused.stderr.strip()
        == f"bigearthnet-elastic: error: {missing}: hosts folder does not exist"
    )
    # Submitted by hand, the holder stops at once and says why.
    env = slurm_cluster.env(
        ELASTIC_HOSTS_DIR=str(missing), ELASTIC_SLOTS="1", BEN_REPO=str(JOBS.parent)
    )
    job_id = slurm_cluster.sbatch(str(JOBS / "elastic" / "holder.sbatch"), cwd=workspace, env=env)
    assert_failed_clearly(
        slurm_cluster.wait(job_id, JOB_TIMEOUT), f"ELASTIC_HOSTS_DIR={missing}: no such folder"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variable", "value", "phrase"),
    [
        ("ELASTIC_IFACE", "", "ELASTIC_IFACE is not set: set it in jobs/sites/local.env"),
        ("ELASTIC_MIN_NP", "two", "ELASTIC_MIN_NP=two: expected a whole number >= 1"),
    ],
)
def test_driver_with_a_bad_site_variable_fails_with_one_clear_line(
    slurm_cluster: SlurmCluster, workspace: Path, variable: str, value: str, phrase: str
) -> None:
    job_id = submit_driver(slurm_cluster, workspace, "bad-variable", **{variable: value})
    assert_failed_clearly(slurm_cluster.wait(job_id, JOB_TIMEOUT), phrase)
    assert not (workspace / "runs" / "bad-variable").exists()  # nothing registered or run


@pytest.mark.slow
@pytest.mark.horovod
def test_driver_without_enough_slots_stops_after_the_elastic_timeout(
    slurm_cluster: SlurmCluster, workspace: Path
) -> None:
    timeout = 15
    run = workspace / "runs" / "too-few"
    job_id = submit_driver(
        slurm_cluster,
        workspace,
        "too-few",
        "--epochs",
        "2",
        ELASTIC_MIN_NP="2",
        ELASTIC_TIMEOUT=str(timeout),
    )
    job: Job = slurm_cluster.wait(job_id, JOB_TIMEOUT)
    assert (job.state, job.exit_code) == ("FAILED", "1:0"), job.describe()
    errors = [line for line in job.log().splitlines() if "ERROR:" in line]
    assert len(errors) == 1, job.describe()
    assert "fewer than ELASTIC_MIN_NP=2 worker slots for ELASTIC_TIMEOUT=15 s" in errors[0]
    assert timeout <= run_seconds(job) < timeout + 45, job.describe()  # ended, did not hang
    assert registered(run / "hosts") == []


@pytest.mark.slow
def test_follow_policy_submits_holders_on_the_noise_scale_and_cancels_them_on_a_plateau(
    slurm_cluster: SlurmCluster, workspace: Path
) -> None:
    """``follow --policy gns`` reads B_simple from RUN/history.csv: it stays while the next
    world's batch would exceed it, submits holders (with its --sbatch-arg) once it does not,
    and cancels one once validation F1 plateaus; each decision recorded. The policy loop on
    a real training: tests/scaling/test_malleable_loop.py; holder jobs resizing a real
    training under Slurm: test_holder_jobs_grow_and_shrink_the_training_then_a_warning_
    requeues_it."""
    from bigearthnet.core.util import read_csv
    from bigearthnet.formats.elastic_log import DECISIONS
    from bigearthnet.formats.history import write_history

    hosts, run = workspace / "policy" / "hosts", workspace / "policy" / "run"
    hosts.mkdir(parents=True)
    run.mkdir()

    def finish(*epochs: tuple[float, int]) -> None:  # (B_simple, workers), batch 64 a worker
        rows = [
            history_row(
                e,
                val_micro_f1=0.5 + e / 100,
                world_size=workers,
                global_batch=64 * workers,
                gns_b_simple=noise,
            )
            for e, (noise, workers) in enumerate(epochs, start=1)
        ]
        write_history(run, rows)

    finish((40.0, 1))  # B_simple below the 2-worker batch of 128: stay
    cmd = [
        CONTROLLER,
        *("--hosts-dir", str(hosts), "--name", "policy", "--sbatch-arg=--time=7", "follow"),
        *("--run-dir", str(run), "--policy", "gns", "--max-workers", "2"),
        *("--dwell-epochs", "1", "--plateau-epochs", "2", "--plateau-delta", "0.04"),
        *("--epochs", "3", "--poll", "0.2"),
    ]
    follow, first = start_following(slurm_cluster, workspace, cmd)
    assert "epoch 1: stay 1 -> 1 workers" in first, first
    try:
        finish((40.0, 1), (400.0, 1))  # smoothed B_simple 220 >= 128: grow to 2
        # No holder had registered (the synthetic run's worker is not in the hosts
        # folder), so reaching 2 workers' slots takes 2 holders; both run (2 CPUs).
        deadline = time.monotonic() + 120
        while len(registered(hosts)) < 2:
            assert time.monotonic() < deadline, f"holders not registered: {registered(hosts)}"
            time.sleep(0.5)
        # F1 gained 0.02 < 0.04 over the last 2 epochs: give one worker back.
        finish((40.0, 1), (400.0, 1), (400.0, 2))
        rest, errors = follow.communicate(timeout=60)
        assert follow.returncode == 0, errors
        assert "epoch 2: grow 1 -> 2 workers" in rest and "submitted holders" in rest, rest
        assert "epoch 3: shrink 2 -> 1 workers" in rest and "cancelled holders" in rest, rest
        decisions = read_csv(run / DECISIONS)
        assert [d["verb"] for d in decisions] == ["stay", "grow", "shrink"]
        assert decisions[1]["b_simple"] == "220.0" and decisions[1]["global_batch_after"] == "128"
        assert "plateaued" in decisions[2]["reason"], decisions[2]
        submitted = decisions[1]["outcome"].rsplit("submitted holders ", 1)[1].split(", ")
        cancelled = decisions[2]["outcome"].rsplit("cancelled holders ", 1)[1].split(", ")
        assert len(submitted) == 2 and cancelled == submitted[-1:], decisions  # the newest
        limits = {slurm_cluster.job(int(j)).fields["TimeLimit"] for j in submitted}
        assert limits == {"00:07:00"}  # --sbatch-arg reached sbatch
        slurm_cluster.wait(int(cancelled[0]), JOB_TIMEOUT)
        status = controller(slurm_cluster, workspace, hosts, "--name", "policy", "status").stdout
        assert status.count("holder ") == 1 and f"holder {submitted[0]} RUNNING" in status, status
        assert registered(hosts) == [f"{submitted[0]}.hosts"]
    finally:
        follow.kill()
        # Its holders would hold the node's CPUs until their time limit: give them back.
        slurm_cluster.run("scancel", "--name", "policy-holder")
