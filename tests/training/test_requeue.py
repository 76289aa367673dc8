"""Slurm's time-limit warning (SIGUSR1) during validation and during the final evaluation of a
real train.py run: a checkpoint, exit 3, and a rerun that goes on from there; and a SIGTERM
while a rank that stopped exits 3.

The signal comes from a small injector script that runs ``train.cli`` as ``python train.py``
does and has the process signal itself from inside validation (or the evaluation's
scoring), or while it exits: exactly then, on every machine, instead of racing a phase of
milliseconds. The reruns run in process (a subprocess would add a TensorFlow import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, train_argv

import train
from bigearthnet.formats.history import read_history

INJECTOR = """
import os, signal, sys
from bigearthnet.cli import train
from bigearthnet.inference import trained_run
from bigearthnet.training import epoch_end
PHASE, NTH, RANK = sys.argv[1], int(sys.argv[2]), sys.argv[3]
calls = []


def signal_me(index: int) -> None:
    if len(calls) == NTH and index == 1 and os.environ.get("HOROVOD_RANK", "0") == RANK:
        os.kill(os.getpid(), signal.SIGUSR1)  # Slurm's --signal warning, mid-phase


if PHASE == "validation":
    real_validate = epoch_end.validate

    def validate(replica, batches, **kw):
        calls.append(1)

        def signalled():
            for index, batch in enumerate(batches):
                signal_me(index)
                yield batch

        return real_validate(replica, signalled(), **kw)

    epoch_end.validate = validate
elif PHASE == "exit":
    import atexit, time
    from bigearthnet.core import signals

    def terminated_while_exiting() -> None:
        # srun --kill-on-bad-exit: another rank exited 3 first, this one is shutting down
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)

    atexit.register(terminated_while_exiting)  # runs last: after TensorFlow's and Horovod's
    signals.remember_warnings()
    os.kill(os.getpid(), signal.SIGUSR1)  # the warning during start-up: exit 3 at step 1
else:
    real_predict = trained_run.LoadedModel.predict

    def predict(self, images):
        calls.append(1)
        signal_me(1)
        return real_predict(self, images)

    trained_run.LoadedModel.predict = predict
sys.exit(train.cli(sys.argv[4:]))
"""


def _injector(tmp_path: Path) -> list[str]:
    script = tmp_path / "inject_sigusr1.py"
    script.write_text(INJECTOR)
    return [sys.executable, str(script)]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "1"}


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)


def _argv(data: Path, run: Path, epochs: int) -> list[str]:
    return train_argv(data, run, epochs, eval_test=True)


@pytest.mark.fault
def test_sigusr1_during_validation_saves_the_epoch_and_the_rerun_takes_the_next(
    tmp_path: Path, shards_v1: Path, fault_row, rank_log
) -> None:
    """The warning comes while epoch 2 is validated (48 samples, 6 batches): epoch 2 is
    finished - its history row and checkpoint written - and the run exits 3 without
    training any of epoch 3; the rerun starts at epoch 3, step 0."""
    run = tmp_path / "run"
    argv = [*_argv(shards_v1, run, 4), "--no-eval-test"]
    first = _run([*_injector(tmp_path), "validation", "2", "0", *argv])
    assert first.returncode == train.EXIT_REQUEUE, first.stderr[-3000:]
    pointer = json.loads((run / "checkpoints" / "latest.json").read_text())
    assert (pointer["epoch"], pointer["step"]) == (2, 0), pointer  # epoch 3 untouched
    assert [r.epoch for r in read_history(run)] == [1, 2]
    assert train.main(argv) == 0, rank_log.text[-3000:]  # the rerun, in process
    assert "resumed from latest-e0002 at epoch 2 step 0" in rank_log.text
    assert [r.epoch for r in read_history(run)] == [1, 2, 3, 4]
    fault_row(
        "SIGUSR1 during validation",
        runs=2,
        data_lost="none (the epoch is saved, exit 3; the rerun starts the next epoch)",
        detect_s=None,
    )


@pytest.mark.fault
@pytest.mark.horovod
@pytest.mark.slow
def test_sigusr1_during_the_final_evaluation_exits_3_and_the_rerun_evaluates(
    tmp_path: Path, shards_v1: Path, fault_row, rank_log
) -> None:
    """2 ranks, the warning to rank 1 alone while it scores the test split: every rank
    agrees to stop, nothing half-written in eval-test/, exit 3; the 1-rank rerun trains
    nothing and only evaluates."""
    run = tmp_path / "run"
    argv = [*_argv(shards_v1, run, 2), "--batch-size", "4"]  # 48 test samples: 6 batches a rank
    launcher = Path(sys.executable).with_name("horovodrun")
    first = _run(
        [str(launcher), "-np", "2", "-H", "localhost:2", "--gloo"]
        + [*_injector(tmp_path), "evaluation", "1", "1", *argv]
    )
    output = first.stdout + first.stderr
    assert first.returncode != 0, output[-3000:]
    assert output.count("exit 3: requeue me") == 2, output[-3000:]  # both ranks
    assert "Exit code: 3" in output  # horovodrun's own report (its traceback is its style)
    assert not [
        line for line in output.splitlines() if line.startswith("[") and "Traceback" in line
    ]
    assert not (run / "eval-test" / "metrics.json").exists()
    assert [r.epoch for r in read_history(run)] == [1, 2]
    assert train.main(argv) == 0, rank_log.text[-3000:]  # the 1-rank rerun, in process
    assert "resumed from latest-e0002 at epoch 2 step 0" in rank_log.text
    assert [r.epoch for r in read_history(run)] == [1, 2]  # nothing retrained
    assert json.loads((run / "eval-test" / "metrics.json").read_text())["count"] == 48
    fault_row(
        "SIGUSR1 to 1 of 2 ranks during the final test evaluation",
        runs=2,
        data_lost="the evaluation in progress (exit 3; the rerun only evaluates)",
        detect_s=None,
    )


@pytest.mark.fault
def test_sigterm_while_exiting_3_keeps_the_exit_code(
    tmp_path: Path, shards_v1: Path, fault_row
) -> None:
    """A rank that stopped on the warning and checkpointed gets SIGTERM while it shuts down
    (srun --kill-on-bad-exit ends the other tasks once the first exits 3): it still exits
    3, the code the job script requeues on - not 143, which it reports as a failure."""
    run = tmp_path / "run"
    argv = [*_argv(shards_v1, run, 3), "--no-eval-test"]
    first = _run([*_injector(tmp_path), "exit", "0", "0", *argv])
    assert first.returncode == train.EXIT_REQUEUE, (first.returncode, first.stderr[-3000:])
    pointer = json.loads((run / "checkpoints" / "latest.json").read_text())
    assert (pointer["epoch"], pointer["step"]) == (0, 1), pointer
    fault_row(
        "SIGTERM to a rank while it exits 3 (srun ends the others once one has)",
        data_lost="none (exit 3 kept: the job requeues)",
        detect_s=None,
    )
