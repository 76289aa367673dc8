"""The job scripts in jobs/, submitted for real to a throw-away single-node Slurm.

The slow tests run the whole chain with ``SITE=local`` on a 40-patch synthetic archive:
preprocessing (2 tasks + a join step), training (2 ranks, ``srun --mpi=pmix``), the Gloo
variant resuming the same run, parallel evaluation, two kinds of bad input, a time-limited
training that checkpoints on Slurm's SIGUSR1 warning, requeues itself and finishes, and the
same warning passed through horovodrun. Each job is waited for through ``scontrol show job``
(the test cluster has no accounting) and judged by its state, exit code, log and outputs.
The cluster comes from ``tests/slurm_cluster.py``; the tests skip where this machine cannot
run one (or fail, with BEN_REQUIRE_SLURM=1). CI: ``pytest -m slow -k slurm``.

The fast tests run ``bash -n`` and shellcheck over every script in jobs/ and check the
``#SBATCH`` lines.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import REPO
from slurm_cluster import (
    FINAL_STATES,
    Job,
    SlurmCluster,
)

# One Slurm test cluster per test run: every test that submits to it runs in one xdist worker.
pytestmark = pytest.mark.xdist_group("slurm")

JOBS = REPO / "jobs"
SCRIPTS = sorted([*JOBS.glob("**/*.sbatch"), *JOBS.glob("**/*.sh")])
PROFILES = sorted((JOBS / "sites").glob("*.env"))
PATCHES = 40  # 24 train / 8 val / 8 test with the default 0.6/0.2/0.2 split
SHARD_SIZE = 8  # -> 5 shards, so each of the 2 preprocessing tasks has some
TINY = [
    "--model",
    "tiny",
    "--batch-size",
    "4",
    "--warmup-epochs",
    "0",
    "--threads",
    "1",
    "--no-eval-test",
]
JOB_TIMEOUT = 300  # seconds for any one ordinary job (they take 10-30 s here)


# --------------------------------------------------------------------------- fast


def test_job_scripts_pass_bash_n_and_shellcheck() -> None:
    assert {p.name for p in SCRIPTS} >= {
        "common.sh",
        "submit.sh",
        "preprocess.sbatch",
        "train.sbatch",
        "train_gloo.sbatch",
        "evaluate.sbatch",
        "batch_study.sbatch",
        "map_scene.sbatch",
        "map_region.sbatch",
        "train_elastic.sbatch",
        "holder.sbatch",
        "discover_hosts.sh",
    }
    assert {p.stem for p in PROFILES} >= {"local", "juwels-booster", "lumi-g"}
    for path in [*SCRIPTS, *PROFILES]:
        result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert result.returncode == 0, f"bash -n {path.name}: {result.stderr}"
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (Debian: apt-get install shellcheck)")
    # -x: follow `source jobs/common.sh`; profiles are sourced fragments, so -s bash.
    result = subprocess.run(
        ["shellcheck", "-x", "-s", "bash", *map(str, [*SCRIPTS, *PROFILES])],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_submit_help_prints_its_usage_not_a_job_name(flag: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SITE"}  # help needs no site
    done = subprocess.run(["bash", str(JOBS / "submit.sh"), flag], capture_output=True,
                          text=True, env=env, cwd=REPO)  # fmt: skip
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert done.stdout.startswith("usage: SITE=<profile> jobs/submit.sh ")
    steps = done.stdout.split()[3].split("|")
    assert steps == [*sorted(p.stem for p in JOBS.glob("*.sbatch")), "elastic/train_elastic"]
    assert "local" in done.stdout and "examples:" in done.stdout


def test_sbatch_lines_carry_comments_and_log_to_logs() -> None:
    for path in JOBS.glob("**/*.sbatch"):
        lines = [ln for ln in path.read_text().splitlines() if ln.startswith("#SBATCH")]
        assert "#SBATCH --output=logs/%x-%j.out" in " ".join(lines), path.name
        bare = [ln for ln in lines if "#" not in ln[len("#SBATCH") :]]
        assert not bare, f"{path.name}: #SBATCH lines without a comment: {bare}"


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """DATA_ROOT of the jobs (archive/, shards/, runs/) and their submission folder (logs/)."""
    from bigearthnet.synthetic.archive import ArchiveSpec, generate_archive

    root = tmp_path_factory.mktemp("slurm-jobs")
    (root / "logs").mkdir()  # jobs/submit.sh makes it too; plain sbatch needs it
    generate_archive(
        root / "archive", ArchiveSpec(PATCHES, layout="v1", seed=0, difficulty="simple")
    )
    return root


def job_env(cluster: SlurmCluster, workspace: Path, **extra: str) -> dict[str, str]:
    """What a user exports before submitting: the site, where the data is, the venv."""
    values = {"SITE": "local", "DATA_ROOT": str(workspace), "VENV": sys.prefix, **extra}
    return cluster.env(**values)


def assert_completed(job: Job) -> None:
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), job.describe()


def assert_failed_clearly(job: Job, *phrases: str) -> None:
    assert (job.state, job.exit_code) == ("FAILED", "2:0"), job.describe()
    errors = [ln for ln in job.log().splitlines() if "ERROR:" in ln]
    assert len(errors) == 1, job.describe()
    for phrase in phrases:
        assert phrase in errors[0], job.describe()


def assert_logs_context(job: Job, host: str) -> None:
    """Every job says where and what it ran: hosts, GPUs, git revision, resolved config."""
    log = job.log()
    for needle in (f"hosts: {host}", "GPUs on", "git revision: ", "config: DATA_DIR="):
        assert needle in log, f"{needle!r} missing\n{job.describe()}"


def history(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "history.csv").open() as f:
        return list(csv.DictReader(f))


def epochs_done(run_dir: Path) -> int:
    return len(history(run_dir)) if (run_dir / "history.csv").is_file() else 0


def latest_checkpoint(run_dir: Path) -> dict:
    return json.loads((run_dir / "checkpoints" / "latest.json").read_text())


# --------------------------------------------------------------------------- the chain


@pytest.fixture(scope="module")
def preprocess_job(slurm_cluster: SlurmCluster, workspace: Path) -> Job:
    env = job_env(slurm_cluster, workspace)
    job_id = slurm_cluster.submit(
        "preprocess", "--", "--shard-size", str(SHARD_SIZE), cwd=workspace, env=env
    )
    return slurm_cluster.wait(job_id, JOB_TIMEOUT)


@pytest.fixture(scope="module")
def shards(preprocess_job: Job, workspace: Path) -> Path:
    if not (workspace / "shards" / "manifest.json").is_file():
        pytest.fail(f"no shards: the preprocessing job failed\n{preprocess_job.describe()}")
    return workspace / "shards"


@pytest.fixture(scope="module")
def train_job(slurm_cluster: SlurmCluster, workspace: Path, shards: Path) -> Job:
    env = job_env(slurm_cluster, workspace, EXPERIMENT="tiny")
    job_id = slurm_cluster.submit("train", "--", *TINY, "--epochs", "2", cwd=workspace, env=env)
    return slurm_cluster.wait(job_id, JOB_TIMEOUT)


@pytest.fixture(scope="module")
def gloo_job(slurm_cluster: SlurmCluster, workspace: Path, train_job: Job) -> Job:
    # The same EXPERIMENT, one more epoch: the Gloo launcher resumes the MPI run's folder.
    env = job_env(slurm_cluster, workspace, EXPERIMENT="tiny")
    job_id = slurm_cluster.submit(
        "train_gloo", "--", *TINY, "--epochs", "3", cwd=workspace, env=env
    )
    return slurm_cluster.wait(job_id, JOB_TIMEOUT)


@pytest.fixture(scope="module")
def evaluate_job(slurm_cluster: SlurmCluster, workspace: Path, gloo_job: Job) -> Job:
    env = job_env(slurm_cluster, workspace, EXPERIMENT="tiny")
    job_id = slurm_cluster.submit("evaluate", cwd=workspace, env=env)
    return slurm_cluster.wait(job_id, JOB_TIMEOUT)


@pytest.mark.slow
def test_preprocess_job_splits_the_archive_and_joins(
    preprocess_job: Job, workspace: Path, slurm_cluster: SlurmCluster
) -> None:
    assert_completed(preprocess_job)
    log = preprocess_job.log()
    assert "task 1/2" in log and "task 2/2" in log, preprocess_job.describe()
    assert "joining the shards" in log
    assert_logs_context(preprocess_job, slurm_cluster.host)
    out = workspace / "shards"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["summary"]["written"] == PATCHES
    assert sum(manifest["counts"].values()) == PATCHES
    files = sorted(p.name for p in out.glob("*.h5"))
    assert files == sorted(s["file"] for s in manifest["shards"])
    assert len(files) == 5
    assert (
        preprocess_job.log_path
        == workspace / "logs" / f"ben-preprocess-{preprocess_job.job_id}.out"
    )


@pytest.mark.slow
def test_train_job_runs_two_ranks_through_srun_pmix(
    train_job: Job, workspace: Path, slurm_cluster: SlurmCluster
) -> None:
    assert_completed(train_job)
    log = train_job.log()
    assert "srun --kill-on-bad-exit=1 --mpi=pmix python" in log
    assert "[rank 1/2]" in log, train_job.describe()
    assert "training finished" in log
    assert "resolved training config" in log and "model: tiny" in log
    assert_logs_context(train_job, slurm_cluster.host)
    run = workspace / "runs" / "tiny"
    rows = history(run)
    assert [r["epoch"] for r in rows] == ["1", "2"]
    assert {r["world_size"] for r in rows} == {"2"}
    assert latest_checkpoint(run)["epoch"] == 2


@pytest.mark.slow
def test_gloo_job_resumes_the_run_with_horovodrun(
    gloo_job: Job, workspace: Path, slurm_cluster: SlurmCluster
) -> None:
    assert_completed(gloo_job)
    log = gloo_job.log()
    assert f"horovodrun --gloo -np 2 -H {slurm_cluster.host}:2" in log
    assert "resumed from latest-e0002" in log, gloo_job.describe()
    run = workspace / "runs" / "tiny"
    rows = history(run)
    assert [r["epoch"] for r in rows] == ["1", "2", "3"]
    assert rows[-1]["world_size"] == "2"
    assert latest_checkpoint(run)["epoch"] == 3


@pytest.mark.slow
def test_evaluate_job_scores_the_test_split_in_parallel(evaluate_job: Job, workspace: Path) -> None:
    assert_completed(evaluate_job)
    assert "[rank 0/2]" in evaluate_job.log(), evaluate_job.describe()
    metrics = json.loads((workspace / "runs" / "tiny" / "eval-test" / "metrics.json").read_text())
    assert metrics["count"] == 8  # every test patch scored once, over both ranks
    assert 0.0 <= metrics["micro_f1"] <= 1.0


@pytest.mark.slow
def test_map_scene_job_maps_a_scene_on_two_ranks(
    slurm_cluster: SlurmCluster, workspace: Path, gloo_job: Job
) -> None:
    from bigearthnet.synthetic.scene import SceneTruth, write_scene

    scene = workspace / "scene"
    write_scene(
        scene,
        SceneTruth(size=480, block=240, border=0, classes=((1, 4), (7, 9))),
        difficulty="simple",
    )
    out = workspace / "maps" / "scene.tif"
    env = job_env(slurm_cluster, workspace, EXPERIMENT="tiny", SCENE=str(scene), MAP_OUT=str(out))
    job_id = slurm_cluster.submit("map_scene", "--hold", cwd=workspace, env=env)
    # The PMIx folder of the job's first step is already there, as a killed step leaves it:
    # srun cannot start that step (and exits 0); the job script starts a new one.
    (slurm_cluster.tmp_fs / f"spmix_appdir_{os.getuid()}_{job_id}.0").mkdir()
    slurm_cluster.run("scontrol", "release", str(job_id))
    job = slurm_cluster.wait(job_id, JOB_TIMEOUT)
    assert_completed(job)
    log = job.log()
    assert "could not start the step's tasks (try 1 of 2): a new step" in log, job.describe()
    assert f"scene map {out}" in log and "on 2 rank(s)" in log, job.describe()
    import rasterio

    with rasterio.open(out) as src:
        assert src.shape == (8, 8) and (src.read(1) < 19).all()  # every cell mapped


def rank_pid(run: Path, rank: int) -> int:
    """PID of the training task of Slurm rank ``rank`` working on ``run``."""
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        mine = str(run).encode() in cmdline and b"train.py" in cmdline
        if mine and f"SLURM_PROCID={rank}".encode() in environ:
            return int(entry.name)
    pytest.fail(f"no rank {rank} training {run}")


@pytest.mark.fault
@pytest.mark.slow
def test_a_killed_rank_ends_the_step_and_leaves_the_epochs_checkpointed(
    slurm_cluster: SlurmCluster, workspace: Path, shards: Path, fault_row
) -> None:
    """A rank SIGKILLed under srun ends the job; what a resubmission resumes from is there.
    (A job resuming a run's folder: test_gloo_job_resumes_the_run_with_horovodrun; a rerun
    after a killed rank resuming: tests/faults/test_faults.py::test_killed_rank_ends_the_
    run_and_the_rerun_resumes. Each resubmission here cost a job's start and an epoch.)"""
    run = workspace / "runs" / "rankkill"
    env = job_env(slurm_cluster, workspace, EXPERIMENT="rankkill")
    job_id = slurm_cluster.submit("train", "--", *TINY, "--epochs", "500", cwd=workspace, env=env)
    checkpointed = lambda _: (run / "checkpoints" / "latest.json").is_file()  # noqa: E731
    wait_while_running(slurm_cluster, job_id, checkpointed, 300, "an epoch's checkpoint")
    os.kill(rank_pid(run, 1), signal.SIGKILL)
    killed = time.monotonic()
    job = slurm_cluster.wait(job_id, 120)
    seconds = time.monotonic() - killed
    assert job.state == "FAILED", job.describe()
    assert "training failed" in job.log() or "Killed" in job.log(), job.describe()
    assert "training finished" not in job.log(), job.describe()
    done = epochs_done(run)  # the kill may come between an epoch's row and its checkpoint
    assert 1 <= latest_checkpoint(run)["epoch"] <= done < 500, job.describe()
    fault_row(
        "rank 1 of 2 SIGKILLed mid-run under Slurm (srun --mpi=pmix)",
        data_lost="the epoch in progress (its epochs checkpointed: a resubmission resumes)",
        detect_s=seconds,
    )


@pytest.mark.fault
@pytest.mark.slow
def test_a_step_srun_cannot_start_fails_the_job_instead_of_completing_it(
    slurm_cluster: SlurmCluster, workspace: Path, shards: Path, fault_row
) -> None:
    # The PMIx plugin cannot make its client folder, so every step's launch fails; srun
    # itself still exits 0 (Slurm 22.05), which once ended such a job COMPLETED.
    env = job_env(
        slurm_cluster, workspace, EXPERIMENT="nolaunch", SLURM_PMIX_TMPDIR=str(workspace / "none")
    )
    job_id = slurm_cluster.submit("train", "--", *TINY, "--epochs", "1", cwd=workspace, env=env)
    job = slurm_cluster.wait(job_id, JOB_TIMEOUT)
    assert (job.state, job.exit_code) == ("FAILED", "1:0"), job.describe()
    log = job.log()
    assert "could not start the step's tasks (try 2 of 2)" in log, job.describe()
    errors = [line for line in log.splitlines() if "ERROR:" in line]
    assert len(errors) == 1 and "training failed with exit code 1" in errors[0], job.describe()
    assert "training finished" not in log, job.describe()
    fault_row(
        "srun cannot start a step's tasks (the node's PMIx plugin fails) and exits 0",
        runs=1,
        data_lost="none (a second step tried; then the job FAILED, exit 1, not COMPLETED)",
        detect_s=None,
    )


# --------------------------------------------------------------------------- bad input


@pytest.mark.slow
def test_missing_site_profile_fails_the_job_with_one_clear_line(
    slurm_cluster: SlurmCluster, workspace: Path
) -> None:
    env = job_env(slurm_cluster, workspace, SITE="atlantis", BEN_REPO=str(REPO))
    # jobs/submit.sh refuses before anything is queued ...
    submit = subprocess.run(
        ["bash", str(JOBS / "submit.sh"), "train"],
        capture_output=True,
        text=True,
        env=env,
        cwd=workspace,
    )
    assert submit.returncode == 2
    assert "site profile" in submit.stderr and "atlantis.env not found" in submit.stderr
    # ... and a job submitted with plain sbatch stops at once, saying why.
    job_id = slurm_cluster.sbatch(
        "--ntasks-per-node=1",
        "--cpus-per-task=1",
        str(JOBS / "train.sbatch"),
        cwd=workspace,
        env=env,
    )
    job = slurm_cluster.wait(job_id, JOB_TIMEOUT)
    assert_failed_clearly(job, "atlantis.env not found", "profiles: ")


@pytest.mark.slow
def test_missing_data_fails_the_job_with_one_clear_line(
    slurm_cluster: SlurmCluster, workspace: Path
) -> None:
    missing = workspace / "no-such-shards"
    env = job_env(slurm_cluster, workspace, DATA_DIR=str(missing), EXPERIMENT="nodata")
    job_id = slurm_cluster.submit("train", cwd=workspace, env=env)
    job = slurm_cluster.wait(job_id, JOB_TIMEOUT)
    assert_failed_clearly(job, f"DATA_DIR={missing}: no such folder")
    assert not (workspace / "runs" / "nodata").exists()


# --------------------------------------------------------------------------- time limit

# Slurm sends the --signal warning at the first tick of slurmctld's 30-second timer after
# limit - warning - 30 s. A warning that arrived before train.py set up its handlers would
# kill it, so the job starts with a long limit and the test shortens it only once training
# is under way, to the whole minutes that make the warning (100 s) due at once while the
# limit is still more than a minute away; after the requeue it lengthens the limit again,
# so that the rest finishes in the next run.
WARNING = 100
SIGNAL = f"--signal=B:USR1@{WARNING}"
# However fast this machine trains, the first run must still be training when the warning
# comes (up to a tick later), and the second run should be short. So the epochs come from a
# YAML config that asks for far more than can run; once the warning is in the log, the test
# lowers them to a few past the current epoch, which the requeued run reads at start-up.
ENDLESS_EPOCHS = 100_000
EPOCHS_AFTER_WARNING = 3
# train.py's last line when it checkpointed on a signal (mid-epoch or at an epoch's end).
STOPPED = "rerun resumes (exit 3: requeue me)"


def wait_while_running(
    cluster: SlurmCluster, job_id: int, ready: Callable[[Job], bool], timeout: float, what: str
) -> None:
    """Poll until ``ready(job)``; fail at once should the job end first."""
    deadline = time.monotonic() + timeout
    while not ready(job := cluster.job(job_id)):
        if job.state in FINAL_STATES or time.monotonic() > deadline:
            pytest.fail(f"no {what} ({timeout:.0f} s)\n{job.describe()}")
        time.sleep(0.5)


def run_seconds(job: Job) -> int:
    """The job's RunTime ([D-]HH:MM:SS) in seconds."""
    days, _, clock = job.fields["RunTime"].rpartition("-")
    hours, minutes, seconds = (int(x) for x in clock.split(":"))
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


@pytest.mark.slow
def test_time_limited_training_checkpoints_requeues_and_finishes(
    slurm_cluster: SlurmCluster, workspace: Path, shards: Path
) -> None:
    run = workspace / "runs" / "requeue"
    config = workspace / "requeue.yaml"
    config.write_text(f"epochs: {ENDLESS_EPOCHS}\n")
    env = job_env(slurm_cluster, workspace, EXPERIMENT="requeue", TRAIN_CONFIG=str(config))
    job_id = slurm_cluster.submit("train", "--time=10", SIGNAL, "--", *TINY, cwd=workspace, env=env)

    def update(limit_minutes: int) -> None:
        slurm_cluster.run("scontrol", "update", f"JobId={job_id}", f"TimeLimit={limit_minutes}")

    wait_while_running(slurm_cluster, job_id, lambda _: epochs_done(run) >= 3, 300, "training")
    elapsed = run_seconds(slurm_cluster.job(job_id))
    update((elapsed + WARNING + 30) // 60)  # the limit is near: Slurm warns at its next tick
    warned = lambda job: "SIGUSR1: time limit near" in job.log()  # noqa: E731
    wait_while_running(slurm_cluster, job_id, warned, 180, "warning")
    # The first run stops within its current epoch or at its end; the second run (which
    # takes seconds to start) reads the lowered count and does the rest.
    epochs = epochs_done(run) + 1 + EPOCHS_AFTER_WARNING
    config.write_text(f"epochs: {epochs}\n")
    wait_while_running(slurm_cluster, job_id, lambda j: j.restarts >= 1, 180, "requeue")
    update(10)  # the requeued run gets a long limit again
    job = slurm_cluster.wait(job_id, 600)
    assert_completed(job)
    assert job.restarts == 1, job.describe()
    log = job.log()  # --open-mode=append: both runs of the job in one log
    for needle in (
        STOPPED,
        f"requeueing job {job_id} to resume (restart 1)",
        "restart 1 on site local",
        "resumed from",
        "training finished",
    ):
        assert needle in log, f"{needle!r} missing\n{job.describe()}"
    rows = history(run)
    assert [int(r["epoch"]) for r in rows] == list(range(1, epochs + 1))
    assert latest_checkpoint(run)["epoch"] == epochs
    runs = [r for r in slurm_cluster.completion_records() if r.get("JobId") == str(job_id)]
    assert len(runs) == 2, runs  # jobcomp: one record per run of the job


@pytest.mark.slow
def test_gloo_training_passes_the_warning_to_its_ranks_and_requeues(
    slurm_cluster: SlurmCluster, workspace: Path, shards: Path
) -> None:
    """horovodrun's ranks get the warning too. ``scancel --batch --signal=USR1`` sends the
    batch shell what ``--signal=B:USR1@T`` sends, without waiting for a time limit. The
    epochs come from a YAML config lowered before the warning, as in the time-limit test
    (a fixed 60 epochs made the requeued run train 57 of them)."""
    run = workspace / "runs" / "gloo-requeue"
    config = workspace / "gloo-requeue.yaml"
    config.write_text(f"epochs: {ENDLESS_EPOCHS}\n")
    env = job_env(slurm_cluster, workspace, EXPERIMENT="gloo-requeue", TRAIN_CONFIG=str(config))
    job_id = slurm_cluster.submit("train_gloo", "--", *TINY, cwd=workspace, env=env)
    wait_while_running(slurm_cluster, job_id, lambda _: epochs_done(run) >= 1, 300, "training")
    epochs = epochs_done(run) + 1 + EPOCHS_AFTER_WARNING  # the stop comes within an epoch
    config.write_text(f"epochs: {epochs}\n")
    slurm_cluster.run("scancel", "--batch", "--signal=USR1", str(job_id))
    job = slurm_cluster.wait(job_id, 600)
    assert_completed(job)
    assert job.restarts == 1, job.describe()
    log = job.log()
    assert STOPPED in log and "Exit code: 3" in log, job.describe()
    assert f"requeueing job {job_id} to resume (restart 1)" in log
    assert "resumed from" in log
    assert [int(r["epoch"]) for r in history(run)] == list(range(1, epochs + 1))


@pytest.mark.slow
def test_map_region_job_maps_scenes_as_an_array_then_the_series(
    slurm_cluster: SlurmCluster, workspace: Path, gloo_job: Job
) -> None:
    """Two array tasks map two scenes each on their ranks; a second array's two tasks
    compute their shares of the grid's blocks (REGION_STEP=blocks, one rank each); the
    dependent job (afterok) reuses all four maps and every block and combines them."""
    from bigearthnet.formats.region_folder import scene_map_path
    from bigearthnet.maps.region.periods import from_product_name
    from bigearthnet.synthetic.region import RegionSpec, generate_region

    region = workspace / "region"
    generate_region(region, RegionSpec(tiles=2, dates=5, size=240, seed=1, difficulty="simple"))
    scenes = sorted((region / "scenes").iterdir())[:4]
    listing = workspace / "scenes.txt"
    listing.write_text("".join(f"{p}\n" for p in scenes))
    out = workspace / "series"
    env = job_env(slurm_cluster, workspace, EXPERIMENT="tiny", SCENES_LIST=str(listing),
                  REGION_OUT=str(out), SCENES_PER_TASK="2")  # fmt: skip
    options = ("--", "--period", "scene-date", "--cell", "60")  # ~62 x 43 cells: 1 block
    array = slurm_cluster.submit("map_region", "--array=0-1", cwd=workspace, env=env)
    shares = slurm_cluster.submit(
        "map_region", "--array=0-1", "--ntasks-per-node=1", f"--dependency=afterok:{array}",
        *options, cwd=workspace, env={**env, "REGION_STEP": "blocks"},
    )  # fmt: skip
    series = slurm_cluster.submit("map_region", f"--dependency=afterok:{shares}", *options,
                                  cwd=workspace, env=env)  # fmt: skip
    job = slurm_cluster.wait(series, 3 * JOB_TIMEOUT)
    assert_completed(job)
    assert "done: the series of 4 scene(s)" in job.log(), job.describe()
    assert "every block: 1 block(s) of 1024 cells a side" in job.log(), job.describe()
    assert "0 computed, 1 reused" in job.log(), job.describe()
    maps = sorted(p.name for p in (out / "scenes").glob("*.tif") if "probabil" not in p.name)
    named = [from_product_name(str(p)) for p in scenes]  # each scene's map, by its identity
    assert maps == sorted(scene_map_path(out, a.path, a.tile, a.date).name for a in named)
    task_logs = sorted((workspace / "logs").glob("ben-map-region-*.out"))
    mapped = [log for log in task_logs if "scene(s) mapped" in log.read_text()]
    assert len(mapped) == 2 and all("on 2 rank(s)" in log.read_text() for log in mapped)
    blocks = [log.read_text() for log in task_logs if "of the products computed" in log.read_text()]
    assert len(blocks) == 2 and {"share 1/2: 1 block(s)" in t for t in blocks} == {True, False}
    record = json.loads((out / "consistency.json").read_text())
    assert len(record["scenes"]) == 4 and record["skipped"] == []
    assert record["grid"]["cell_m"] == 60.0 and not list(out.glob(".blocks-*"))
    assert (out / "region.html").is_file() and (out / "stac" / "collection.json").is_file()
