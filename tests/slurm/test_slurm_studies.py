"""jobs/seed_table.sbatch submitted for real to the throw-away single-node Slurm: the seed
study's table as srun steps on the allocation's tasks. (A rerun resumes finished cells:
``tests/scaling/test_batch_study.py``; a job resuming a run's folder: ``test_slurm_jobs.py``.
Both cost minutes here, so neither is repeated.) Its column is LAMB's: SGD's runs end to end,
and are rerun, in ``tests/scaling/test_seed_table.py``; each cell costs a training.
CI: ``pytest -m slow -k slurm``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from slurm_cluster import (
    SlurmCluster,
)

from bigearthnet.core.util import read_csv
from bigearthnet.formats.history import read_history
from bigearthnet.scaling.seed_table import SEED_TABLE_CSV, SEED_TABLE_HTML

pytestmark = pytest.mark.xdist_group("slurm")

JOB_TIMEOUT = 400  # 4 short trainings of 2 ranks, one srun step each
TABLE = [
    *("--batches", "4,16,32,128", "--optimizers", "lamb", "--epochs", "1", "--base-batch", "8"),
    *("--max-rank-batch", "32", "--warmup-epochs", "0", "--target-f1", "0.2"),
    *("--", "--model", "tiny", "--threads", "1"),
]


@pytest.mark.slow
def test_seed_table_job_runs_each_cell_as_an_srun_step(
    slurm_cluster: SlurmCluster, shards_v1: Path, tmp_path: Path
) -> None:
    (tmp_path / "logs").mkdir()
    table = tmp_path / "table"
    env = slurm_cluster.env(SITE="local", DATA_ROOT=str(tmp_path), VENV=sys.prefix,
                            DATA_DIR=str(shards_v1), TABLE_DIR=str(table),
                            EXPERIMENT="seed")  # fmt: skip
    job = slurm_cluster.wait(
        slurm_cluster.submit("seed_table", "--", *TABLE, cwd=tmp_path, env=env), JOB_TIMEOUT
    )
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), job.describe()
    log = job.log()
    assert "--ranks 2 --launcher srun" in log and "[rank 1/2]" in log, job.describe()
    assert "2 rank(s) x 32 x 2 pass(es)" in log, job.describe()  # 128 accumulates
    rows = read_csv(table / SEED_TABLE_CSV)
    assert [(r["optimizer"], r["global_batch"]) for r in rows] == [
        ("lamb", b) for b in ("4", "16", "32", "128")
    ]
    updates = [int(r["updates"]) for r in rows]
    assert updates == sorted(updates, reverse=True)
    # LAMB's rule: the peak LR grows with the root of the batch (0.004 at --base-batch 8).
    peaks = [float(r["peak_lr"]) for r in rows]
    assert peaks == pytest.approx([0.004 * (b / 8) ** 0.5 for b in (4, 16, 32, 128)], abs=1e-4)
    for batch in (4, 16, 32, 128):
        history = read_history(table / "lamb" / "runs" / f"b{batch}")
        assert [(h.epoch, h.world_size) for h in history] == [(1, 2)]
    assert (table / SEED_TABLE_HTML).is_file()
