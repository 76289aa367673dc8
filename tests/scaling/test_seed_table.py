"""bigearthnet-seed-table: the seed study's batch table in miniature - each cell a batch-study
point with an epochs budget, SGD and LAMB with their scaling rules, the table and its page."""

from __future__ import annotations

from pathlib import Path

import pytest

from bigearthnet.cli import seed_table as cli
from bigearthnet.core.errors import ConfigError
from bigearthnet.core.util import read_csv
from bigearthnet.scaling.seed_table import SEED_TABLE_CSV, SEED_TABLE_HTML, SeedTableSettings
from bigearthnet.scaling.study_points import plan_points, train_command


def test_each_optimizer_is_a_study_of_whole_epochs(shards_v1: Path, tmp_path: Path) -> None:
    """SGD scales its LR linearly, LAMB by the root; every point trains all epochs (no cap,
    no stop at the target) and accumulates beyond --max-rank-batch."""
    settings = SeedTableSettings(data=shards_v1, out=tmp_path, batches=(8, 32, 128, 256),
                                 ranks=2, max_rank_batch=32, epochs=3, base_batch=8)  # fmt: skip
    sgd, lamb = settings.study("sgd"), settings.study("lamb")
    assert (sgd.rule, lamb.rule, sgd.budget) == ("linear", "sqrt", "epochs")
    points = plan_points(sgd)
    assert [(p.rank_batch, p.passes) for p in points] == [(4, 1), (16, 1), (32, 2), (32, 4)]
    assert points[-1].peak_lr == pytest.approx(settings.sgd_lr * 32)
    assert plan_points(lamb)[-1].peak_lr == pytest.approx(settings.lamb_lr * 32**0.5)
    command = train_command(sgd, points[-1], tmp_path / "run")
    assert "--max-steps-per-epoch" not in command and "--target-f1" not in command
    assert command[command.index("--epochs") + 1] == "3"
    assert command[command.index("--backward-passes-per-step") + 1] == "4"


@pytest.mark.slow  # 8 train.py processes
@pytest.mark.bad_input
def test_a_tiny_table_runs_end_to_end_and_a_rerun_with_another_lr_is_refused(
    tmp_path: Path, shards_v1: Path, reported_errors, bad_input_row
) -> None:
    """The table end to end; then (D06) an identical rerun trains nothing and a rerun with
    --sgd-lr 5 is refused: it once trained no epoch and wrote peak LRs 1.25 ... 40 beside
    the F1 of the runs made at 0.05. One table for both, SGD's column only: LAMB's runs end
    to end in tests/slurm/test_slurm_studies.py (each cell costs a training)."""
    out = tmp_path / "table"
    argv = ["--data", str(shards_v1), "--out", str(out), "--batches", "4,8,32,128",
            "--optimizers", "sgd", "--epochs", "2", "--ranks", "1", "--max-rank-batch", "64",
            "--base-batch", "8",
            "--warmup-epochs", "1", "--target-f1", "0.2", "--launcher", "none"]  # fmt: skip
    train_args = ["--", "--model", "tiny", "--threads", "1"]
    assert cli.main([*argv, "--sgd-lr", "0.05", *train_args]) == 0
    rows = read_csv(out / SEED_TABLE_CSV)
    assert [(r["optimizer"], r["global_batch"]) for r in rows] == [
        ("sgd", b) for b in ("4", "8", "32", "128")
    ]
    for row in rows:
        assert row["epochs"] == "2" and float(row["best_micro_f1"]) >= float(row["final_micro_f1"])
        assert row["reached_target"] in ("yes", "no")
    assert [r["peak_lr"] for r in rows] == ["0.0250", "0.0500", "0.2000", "0.8000"]
    updates = [int(r["updates"]) for r in rows]
    assert updates == sorted(updates, reverse=True) and updates[-1] < updates[0]
    page = (out / SEED_TABLE_HTML).read_text()
    assert "sgd/study.html" in page and "32,000" in page  # the seed's own table beside
    assert (out / "sgd" / "runs" / "b128" / "history.csv").is_file()

    made = out / "sgd" / "runs"
    runs = {str(p): p.read_bytes() for p in made.rglob("*") if p.is_file()}
    table = (out / SEED_TABLE_CSV).read_text()
    (out / SEED_TABLE_CSV).unlink()
    assert cli.main([*argv, "--sgd-lr", "0.05", *train_args]) == 0  # rebuilt, nothing trained
    assert (out / SEED_TABLE_CSV).read_text() == table
    assert {str(p): p.read_bytes() for p in made.rglob("*") if p.is_file()} == runs
    code = cli.main([*argv, "--sgd-lr", "5", *train_args])
    now = {str(p): p.read_bytes() for p in made.rglob("*") if p.is_file()}
    assert code == 2 and now == runs and (out / SEED_TABLE_CSV).read_text() == table
    line = reported_errors()[-1]
    assert f"{made / 'b4'}: this point was trained with other settings" in line
    assert "train.py --lr 0.025 -> 2.5" in line and "another --out" in line, line
    bad_input_row("a rerun with another --sgd-lr", "bigearthnet-seed-table", code,
                  "refused before any cell trains, naming --lr old -> new; seed_table.csv "
                  "kept (an identical rerun rebuilds it without training)")  # fmt: skip


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "extra, message",
    [
        (["--batches", "16,32,64,128"], "give >= 4 sizes spanning >= 32x"),
        (["--batches", "16,64,256"], "give >= 4 sizes spanning >= 32x"),
        (["--optimizers", "adam"], "expected optimizers among sgd, lars, lamb"),
        (["--epochs", "0"], "--epochs"),
        (["--sgd-lr", "nan"], "--sgd-lr"),
        (["--", "--optimizer", "adam"], "may not set --optimizer"),
    ],
)
def test_bad_options_are_one_line_exit_2(
    extra, message, tmp_path, shards_v1, reported_errors, bad_input_row
) -> None:
    argv = ["--data", str(shards_v1), "--out", str(tmp_path / "t"), *extra]
    code = cli.main(argv)
    assert code == 2 and not (tmp_path / "t").exists()
    line = reported_errors()[-1]
    assert message in line, line
    bad_input_row(f"`{' '.join(extra)}`", "bigearthnet-seed-table", code,
                  "one line naming the option; nothing run")  # fmt: skip


@pytest.mark.bad_input
@pytest.mark.parametrize("command", ["seed-table", "batch-study"])
def test_an_out_folder_holding_other_files_is_refused(
    command, tmp_path, shards_v1, reported_errors, bad_input_row
) -> None:
    """R5: both wrote their runs and tables into any folder, beside (or over) what it held."""
    from bigearthnet.cli import batch_study

    out = tmp_path / "results"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    main, batches = (cli.main, "4,16,64,128") if command == "seed-table" else (
        batch_study.main, "8,16")  # fmt: skip
    argv = ["--data", str(shards_v1), "--out", str(out), "--batches", batches,
            "--target-f1", "0.5", "--", "--model", "tiny"]  # fmt: skip
    code = main(argv)
    assert code == 2
    line = reported_errors()[-1]
    assert f"{out}: --out holds other files (notes.txt)" in line, line
    assert [p.name for p in out.iterdir()] == ["notes.txt"]  # nothing written, nothing lost
    bad_input_row("`--out` a folder holding other files", f"bigearthnet-{command}", code,
                  "one line naming the folder and what it holds; nothing written")  # fmt: skip


def test_settings_check_their_fields(shards_v1: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="spanning"):
        SeedTableSettings(data=shards_v1, out=tmp_path, batches=(1, 2, 3, 4))
