"""bigearthnet.scaling.batch_study and bigearthnet-batch-study: the plan of each point, its command,
its result from a history, and a real (tiny) study end to end."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers import history_row, train_argv

from bigearthnet.cli import batch_study as cli
from bigearthnet.core.errors import ConfigError, RunFailed
from bigearthnet.core.util import read_csv
from bigearthnet.formats.history import HistoryRow
from bigearthnet.formats.manifest import read_manifest
from bigearthnet.formats.run_status import read_status
from bigearthnet.scaling.batch_study import summarise
from bigearthnet.scaling.study_outputs import STUDY_CSV, STUDY_JSON, STUDY_PLOT, read_study
from bigearthnet.scaling.study_points import peak_lr, plan_points, train_command, with_resolution
from bigearthnet.scaling.study_settings import StudySettings


def _settings(data: Path, **kwargs) -> StudySettings:
    given = {"data": data, "out": data / "study", "batches": (8,), "target_f1": 0.5}
    return StudySettings(**{**given, **kwargs})


def test_points_split_the_global_batch_into_ranks_batches_and_passes(tmp_path: Path) -> None:
    settings = _settings(tmp_path, batches=(64, 8, 16, 8), ranks=2, max_rank_batch=16)
    points = plan_points(settings)
    assert [(p.global_batch, p.ranks, p.rank_batch, p.passes) for p in points] == [
        (8, 2, 4, 1),
        (16, 2, 8, 1),
        (64, 2, 16, 2),  # 32 per rank > 16: two accumulated passes
    ]
    with pytest.raises(ConfigError, match="batch of 9 cannot be split over 2 rank"):
        plan_points(_settings(tmp_path, batches=(9,), ranks=2))


def test_scaling_rules(tmp_path: Path) -> None:
    linear = _settings(tmp_path, base_lr=0.2, base_batch=512)
    root = _settings(tmp_path, base_lr=0.2, base_batch=512, rule="sqrt")
    assert peak_lr(linear, 8192) == pytest.approx(3.2)  # the seed study's 8k LR
    assert peak_lr(root, 2048) == pytest.approx(0.4)


def test_command_gives_train_py_the_per_rank_lr_and_the_evaluation_interval(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    settings = _settings(
        tmp_path,
        batches=(64,),
        ranks=2,
        max_rank_batch=16,
        eval_steps=5,
        base_lr=0.1,
        base_batch=64,
        train_args=("--model", "tiny"),
    )
    point = plan_points(settings)[0]
    command = train_command(settings, point, tmp_path / "run")
    assert Path(command[0]).name == "horovodrun" and command[1:3] == ["-np", "2"]

    def value(flag: str) -> str:
        return command[command.index(flag) + 1]

    # peak 0.1 over the plan's scale, 2 ranks x 2 passes: train.py multiplies it back
    assert float(value("--lr")) == pytest.approx(0.025)
    assert float(value("--lr")) * point.plan.scale == pytest.approx(point.peak_lr)
    assert value("--batch-size") == "16" and value("--backward-passes-per-step") == "2"
    assert value("--max-steps-per-epoch") == "10"  # 5 updates of 2 passes
    assert command[-2:] == ["--model", "tiny"]
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert train_command(settings, point, tmp_path)[0] == "srun"


def _row(epoch: int, f1: float, loss: float = 0.5, noise: float | None = None) -> HistoryRow:
    return history_row(epoch, loss=loss, val_micro_f1=f1, val_macro_f1=f1, gns_b_simple=noise)


def test_larger_batches_validate_often_enough_to_resolve_their_steps(tmp_path: Path) -> None:
    """After 150 steps at batch 16, batch 32 cannot need fewer than 75 (perfect scaling):
    validating every 7 steps resolves it within 10 %; after 30 steps at 64, batch 512 is
    validated every step. The budget in updates and the warm-up in steps stay the same."""
    settings = _settings(tmp_path, batches=(16, 32, 64, 512), eval_steps=10, epochs=20)
    p16, p32, p64, p512 = plan_points(settings)
    assert with_resolution(settings, p16, None) == p16  # the first point: --eval-steps
    done16 = summarised(16, 150)
    p32 = with_resolution(settings, p32, done16)
    assert (p32.eval_steps, p32.validations) == (7, 29) and p32.warmup == pytest.approx(20 / 7)
    p512 = with_resolution(settings, p512, summarised(64, 30))
    assert (p512.eval_steps, p512.validations, p512.warmup) == (1, 200, 20.0)
    command = train_command(settings, p512, tmp_path / "run")
    assert command[command.index("--max-steps-per-epoch") + 1] == "1"
    assert command[command.index("--epochs") + 1] == "200"
    assert with_resolution(settings, p64, summarised(32, None)) == p64  # nothing to bound by
    fixed = _settings(tmp_path, batches=(16, 32), resolution=None)
    assert with_resolution(fixed, plan_points(fixed)[1], done16).eval_steps == 10


def summarised(batch: int, steps: int | None):
    from bigearthnet.scaling.study_outputs import StudyResult

    return StudyResult(batch, "sgd", 0.1, steps, None, 0.8, False, None)


def test_result_counts_steps_to_the_first_evaluation_at_target(shards_v1: Path) -> None:
    settings = _settings(shards_v1, batches=(8,), eval_steps=3, target_f1=0.6)
    point = plan_points(settings)[0]
    rows = [_row(1, 0.3, noise=10.0), _row(2, 0.65, noise=30.0), _row(3, 0.7)]
    result = summarise(settings, point, rows, exit_code=0)
    assert result.steps_to_target == 2 * 3 and not result.diverged and result.eval_steps == 3
    train = read_manifest(shards_v1).count("train")
    assert result.epochs_to_target == pytest.approx(round(2 * 3 * 8 / train, 4))
    assert result.best_val_micro_f1 == 0.7 and result.mean_b_simple == 20.0
    missed = summarise(settings, point, [_row(1, 0.2, loss=math.nan)], exit_code=1)
    assert missed.steps_to_target is None and missed.diverged and missed.mean_b_simple is None


@pytest.mark.slow  # 4 train.py processes; the fast tier runs the study end to end below
def test_a_tiny_study_runs_end_to_end(tmp_path: Path, shards_v1: Path) -> None:
    out = tmp_path / "study"
    argv = [
        "--data",
        str(shards_v1),
        "--out",
        str(out),
        "--batches",
        "8,32",
        "--target-f1",
        "0.3",
        "--base-lr",
        "0.01",
        "--base-batch",
        "8",
        "--rule",
        "sqrt",
        "--epochs",
        "3",
        "--eval-steps",
        "3",
        "--warmup-epochs",
        "0",
        "--optimizer",
        "adam",
        "--",
        "--model",
        "tiny",
        "--threads",
        "1",
    ]
    assert cli.main(argv) == 0
    rows = read_csv(out / STUDY_CSV)
    assert [row["global_batch"] for row in rows] == ["8", "32"]
    assert all(row["diverged"] == "no" and row["optimizer"] == "adam" for row in rows)
    assert float(rows[1]["peak_lr"]) == pytest.approx(0.02)  # sqrt(32 / 8) x 0.01
    for row in rows:
        steps = row["steps_to_target"]
        assert steps == "not reached" or int(steps) % int(row["eval_steps"]) == 0
    assert (out / STUDY_PLOT).stat().st_size > 1000
    study = read_study(out)  # two points cannot be fitted: the study says so
    assert study["fit"] is None and "the fit needs 3" in study["no_fit_reason"]
    assert [p["global_batch"] for p in study["points"]] == [8, 32]
    assert study["recommendation"] == [] and (out / STUDY_JSON).is_file()
    assert (out / "runs" / "b32" / "history.csv").is_file()
    assert cli.main(argv) == 0  # rerun: the ended points are read, not launched


def test_a_study_where_no_point_reaches_the_target_exits_2(
    tmp_path: Path, shards_v1: Path, reported_errors
) -> None:
    out = tmp_path / "study"
    argv = ["--data", str(shards_v1), "--out", str(out), "--batches", "8", "--target-f1",
            "0.99", "--epochs", "1", "--eval-steps", "2", "--warmup-epochs", "0",
            "--optimizer", "adam", "--", "--model", "tiny", "--threads", "1"]  # fmt: skip
    assert cli.main(argv) == 2
    (line,) = [x for x in reported_errors() if "error" in x]
    assert "no batch size reached val micro-F1 0.99 within its budget" in line
    study = read_study(out)  # the page and the JSON still say what each point reached
    assert study["fit"] is None and (out / "study.html").is_file()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--batches", "8,x"], "expected integers"),
        (["--batches", "8", "--target-f1", "1.5"], "inside (0, 1)"),
        (["--batches", "8", "--", "--lr", "1"], "may not set --lr"),
        # a flag the study's flag check does not list: the resolved options show it
        (["--batches", "8", "--", "--epochs", "5"], "may not set --epochs: the study sets"),
        # an abbreviation: refused as train.py refuses it (never taken for --epochs)
        (["--batches", "8", "--", "--epoch", "5"], "unrecognized arguments: --epoch 5"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    extra: list[str], message: str, tmp_path: Path, shards_v1: Path, reported_errors
) -> None:
    argv = ["--data", str(shards_v1), "--out", str(tmp_path), "--target-f1", "0.5", *extra]
    assert cli.main(argv) == 2
    err = reported_errors()
    assert len(err) == 1 and message in err[0], err
    assert (
        cli.main(
            [
                "--data",
                str(tmp_path),
                "--out",
                str(tmp_path),
                "--batches",
                "8",
                "--target-f1",
                "0.5",
            ]
        )
        == 2
    )


def test_a_launcher_that_exits_0_without_running_train_py_fails_the_point(
    tmp_path: Path, shards_v1: Path, monkeypatch
) -> None:
    # srun exits 0 when it could not start the tasks: a point must not become a row that
    # "never reached the target" with nothing trained.
    from bigearthnet.scaling import batch_study, study_points

    monkeypatch.setattr(study_points, "_launcher", lambda kind, ranks: ["true"])
    settings = _settings(shards_v1, out=tmp_path / "study", train_args=("--model", "tiny"))
    with pytest.raises(RunFailed, match=r"b8: the launcher exited 0 but train.py did not end"):
        batch_study.run_study(settings, log=lambda line: None)
    assert not (tmp_path / "study" / STUDY_CSV).exists()


def _runs_record(out: Path) -> dict[str, bytes]:
    """Every file of the study's runs: a launched train.py would at least add a line to its
    run's commands.txt (and a history row, a status time)."""
    return {str(p): p.read_bytes() for p in (out / "runs").rglob("*") if p.is_file()}


@pytest.mark.bad_input
def test_a_rerun_neither_retrains_nor_relabels_its_points(
    tmp_path: Path, shards_v1: Path, reported_errors, bad_input_row
) -> None:
    """D14: an identical rerun resumed every point stopped at its target (one more epoch per
    rerun), also when it only rebuilt a cut study.csv. D06: a rerun with another --base-lr
    wrote the new peak LR beside the old runs' F1 and trained them on at it. D27: a rerun with
    -- --optimizer adam ended in "no readable checkpoint" from inside train.py."""
    out = tmp_path / "study"
    argv = ["--data", str(shards_v1), "--out", str(out), "--batches", "4,8", "--target-f1",
            "0.12", "--epochs", "2", "--eval-steps", "2", "--base-batch", "8", "--base-lr",
            "0.05", "--warmup-epochs", "0", "--resolution", "0"]  # fmt: skip
    train_args = ["--", "--model", "tiny", "--threads", "1"]
    assert cli.main(argv + train_args) == 0
    states = {read_status(out / "runs" / f"b{b}").state for b in (4, 8)}
    assert "target" in states, states  # the case of D14: stopped at the target
    made = _runs_record(out)
    table = (out / STUDY_CSV).read_text()
    (out / STUDY_CSV).write_text(table[:60])  # cut short
    assert cli.main(argv + train_args) == 0
    assert _runs_record(out) == made and (out / STUDY_CSV).read_text() == table
    bad_input_row("an identical rerun of a study whose points stopped at the target, its "
                  "study.csv cut", "bigearthnet-batch-study", 0,
                  "nothing trained (state target is final); study.csv rebuilt from the "
                  "runs")  # fmt: skip
    for change, needle, what in (
        (["--base-lr", "5"], "train.py --lr 0.025 -> 2.5", "another --base-lr"),
        (["--", "--optimizer", "adam"], "train.py --optimizer sgd -> adam",
         "-- --optimizer adam after an SGD study"),
    ):  # fmt: skip
        code = cli.main(argv + train_args + change if change[0] == "--" else
                        argv + change + train_args)  # fmt: skip
        assert code == 2 and _runs_record(out) == made
        assert (out / STUDY_CSV).read_text() == table
        line = reported_errors()[-1]
        assert f"{out / 'runs' / 'b4'}: this point was trained with other settings" in line
        assert needle in line and "use another --out" in line, line
        bad_input_row(f"a rerun with {what}", "bigearthnet-batch-study", code,
                      "refused before anything trains, naming the option old -> new; no "
                      "row relabelled")  # fmt: skip


@pytest.mark.bad_input
@pytest.mark.parametrize("command", ["train.py", "batch-study", "seed-table"])
def test_a_batch_larger_than_the_train_split_is_refused_before_training(
    command: str, tmp_path: Path, shards_v1: Path, reported_errors, bad_input_row
) -> None:
    """D08: batches of 64 and 4,096 on 36 training samples each trained one step of the same
    36 and were listed as distinct points."""
    import train
    from bigearthnet.cli import seed_table

    out = tmp_path / "out"
    if command == "train.py":
        code = train.main(train_argv(shards_v1, out, 1, "--batch-size", "200"))
        needle = "a global batch of 200 (200 per rank x 1 rank(s) x 1 pass(es))"
    else:
        main, batches = ((cli.main, "8,200") if command == "batch-study" else
                         (seed_table.main, "8,32,64,256"))  # fmt: skip
        code = main(["--data", str(shards_v1), "--out", str(out), "--batches", batches,
                     "--target-f1", "0.5", "--", "--model", "tiny"])  # fmt: skip
        needle = "--batches: a global batch of " + batches.rsplit(",", 1)[1]
    assert code == 2 and not any(out.rglob("history.csv")) and not (out / "runs").exists()
    line = reported_errors()[-1]
    assert needle in line and "larger than the 144 training samples" in line, line
    bad_input_row("a global batch larger than the train split (144)",
                  f"{command}" if command == "train.py" else f"bigearthnet-{command}", code,
                  "refused before anything trains, naming the batch and the split's "
                  "size")  # fmt: skip
