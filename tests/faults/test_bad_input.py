"""The bad-input table: each test gives one command one bad input and checks the promise -
one line naming the file or option and the problem, exit 2 where the command cannot go on,
and nothing lost: no input replaced, no partial output that looks complete. `make
bad-input` runs them and prints the table (docs/reliability.md)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import REPO, preprocess, train_argv

import evaluate
import train
from bigearthnet.cli.batch_study import main as batch_study_main
from bigearthnet.cli.export import main as export_main
from bigearthnet.cli.map import main as map_main
from bigearthnet.formats.history import read_history
from bigearthnet.synthetic.scene import SceneTruth, write_scene

pytestmark = pytest.mark.bad_input
TRUTH = SceneTruth(size=240, block=240, border=36, classes=((0,),))


@pytest.fixture
def run(trained_run: Path, tmp_path: Path) -> Path:
    """A copy of the session's trained run (tests damage it)."""
    copy = tmp_path / "run"
    shutil.copytree(trained_run, copy)
    return copy


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _one_line(errors: list[str], *needles: str) -> str:
    """The last reported error: one line, no traceback, naming every needle."""
    line = errors[-1]
    assert "\n" not in line and "Traceback" not in line, errors
    for needle in needles:
        assert needle in line, (needle, line)
    return line


# ----------------------------------------------------------------- data loss or silent change


@pytest.mark.parametrize("where", ["the run", "its parent", "its checkpoints"])
def test_export_over_its_own_run_is_refused(run, where, reported_errors, bad_input_row) -> None:
    out = {"the run": run, "its parent": run.parent, "its checkpoints": run / "checkpoints"}[where]
    before = _tree(run)
    code = export_main([str(run), "--out", str(out), "--overwrite"])
    assert code == 2 and _tree(run) == before
    _one_line(reported_errors(), str(out), "overlaps")
    bad_input_row(f"--out = {where}, --overwrite", "bigearthnet-export RUN --out X --overwrite",
                  code, "refused before anything is written; the run is intact")  # fmt: skip


def test_an_unknown_v2_split_value_refuses_the_archive(
    synth_v2, tmp_path, reported_errors, bad_input_row
) -> None:
    archive = tmp_path / "v2"
    shutil.copytree(synth_v2, archive)
    table = pd.read_parquet(archive / "metadata.parquet")
    table.loc[3, "split"] = "Test "
    table.to_parquet(archive / "metadata.parquet")
    out = tmp_path / "out"
    code = preprocess(archive, out)
    assert code == 2 and not out.exists()
    _one_line(reported_errors(), "metadata.parquet row 3", "'Test '", "--split-ratios")
    bad_input_row("v2 metadata split 'Test '", "bigearthnet-preprocess ARCHIVE OUT", code,
                  "refused with file, row and value; no silent random split")  # fmt: skip
    # On purpose, a random split is one flag away.
    assert preprocess(archive, out, "--split-ratios", "0.6,0.2,0.2") == 0


def test_a_failed_strict_run_leaves_no_manifest(real_v1, tmp_path, bad_input_row) -> None:
    archive = tmp_path / "archive"
    shutil.copytree(real_v1, archive)
    first = sorted(archive.iterdir())[0]
    next(first.glob("*_B02.tif")).write_bytes(b"not a tiff")
    out = tmp_path / "out"
    code = preprocess(archive, out, "--strict")
    assert code == 1 and not (out / "manifest.json").exists()
    assert train.main(train_argv(out, tmp_path / "run", 1)) == 2  # nothing to train on
    bad_input_row("a broken band with --strict", "bigearthnet-preprocess --strict", code,
                  "exit 1, rejects.csv, no manifest: train.py refuses the folder")  # fmt: skip


@pytest.mark.parametrize(
    "text, key",
    [('eval_test: "false"', "eval_test"), ("augment: maybe", "augment"),
     ('dropout: "0.2"', "dropout"), ("seed: abc", "seed")],
)  # fmt: skip
def test_yaml_values_are_type_checked(
    shards_v1, tmp_path, text, key, reported_errors, bad_input_row
) -> None:
    config = tmp_path / "recipe.yaml"
    config.write_text(text + "\n")
    code = train.main([*train_argv(shards_v1, tmp_path / "run", 1), "--config", str(config)])
    assert code == 2 and not (tmp_path / "run").exists()
    _one_line(reported_errors(), str(config), key)
    bad_input_row(f"YAML `{text}`", "train.py --config FILE", code, "file and key named")


@pytest.mark.parametrize("case", ["a key twice", "two --config"])
def test_config_files_are_never_dropped_silently(
    shards_v1, tmp_path, case, reported_errors, bad_input_row
) -> None:
    """D24: YAML kept the last of two `lr:` keys, and of two --config files the first was
    ignored. A duplicate key is refused; two files merge left to right, so a bad value in
    the first is named (it used to vanish)."""
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    if case == "a key twice":
        first.write_text("lr: 0.05\nlr: 5.0\n")
        configs, needles = ["--config", str(first)], [str(first), "key lr given twice"]
    else:
        first.write_text("dropout: 1.5\nmomentum: 0.8\n")
        second.write_text("epochs: 2\n")
        configs = ["--config", str(first), "--config", str(second)]
        needles = [str(first), "dropout must be in"]
    code = train.main([*train_argv(shards_v1, tmp_path / "run", 1), *configs])
    assert code == 2 and not (tmp_path / "run").exists()
    _one_line(reported_errors(), *needles)
    verdict = ("refused: file, key and lines named" if case == "a key twice" else
               "merged left to right: the first file's bad key is named")  # fmt: skip
    bad_input_row(f"YAML config: {case}", "train.py --config FILE", code, verdict)


def test_a_copied_run_exports_its_test_metrics(run, tmp_path, shards_v1, bad_input_row) -> None:
    assert evaluate.main(["--run-dir", str(run)]) == 0
    copy = tmp_path / "copied"
    shutil.copytree(run, copy)
    out = tmp_path / "export"
    code = export_main([str(copy.resolve()), "--out", str(out), "--format", "savedmodel"])
    assert code == 0
    card = (out / "model_card.md").read_text()
    assert "Not evaluated" not in card and "micro" in card
    bad_input_row("the run copied, named by an absolute path", "bigearthnet-export COPY",
                  code, "the evaluation is matched by the checkpoint's digest")  # fmt: skip


# ----------------------------------------------------------------- tracebacks, exit codes


@pytest.mark.parametrize("damage", ["truncated data", "empty index"])
@pytest.mark.parametrize("command", ["evaluate", "export", "map"])
def test_a_damaged_checkpoint_is_one_line(
    run, shards_v1, tmp_path, damage, command, reported_errors, bad_input_row
) -> None:
    best = json.loads((run / "checkpoints" / "best.json").read_text())["folder"]
    folder = run / "checkpoints" / best
    if damage == "truncated data":
        data = next(folder.glob("ckpt.data-*"))
        data.write_bytes(data.read_bytes()[:100])
    else:
        (folder / "ckpt.index").write_bytes(b"")
    argv = {
        "evaluate": lambda: evaluate.main(["--run-dir", str(run)]),
        "export": lambda: export_main([str(run), "--out", str(tmp_path / "x")]),
        "map": lambda: map_main(
            ["--shards", str(shards_v1), "--run-dir", str(run), "--out", str(tmp_path / "m")]
        ),  # fmt: skip
    }
    code = argv[command]()
    assert code == 2
    _one_line(reported_errors(), best)
    bad_input_row(f"checkpoint: {damage}", command, code, "one line naming the checkpoint")


@pytest.mark.parametrize(
    "case, needle",
    [("a YAML value out of range", "a.yaml: dropout must be in [0, 1)"),
     ("a flag out of range", "argument --momentum: must be a finite number >= 0"),
     ("an unknown model", "--model 'nosuch' is not in the model registry"),
     ("no --run-dir", "--run-dir is required")],
)  # fmt: skip
def test_print_config_refuses_as_training_would(
    tmp_path, case, needle, reported_errors, bad_input_row
) -> None:
    """--print-config prints options a --config reads back: never ones training refuses."""
    recipe = tmp_path / "a.yaml"
    recipe.write_text("dropout: 1.5\n" if case.startswith("a YAML") else "epochs: 2\n")
    argv = {"a flag out of range": ["--momentum", "-1"], "an unknown model": ["--model", "nosuch"]}
    run = [] if case == "no --run-dir" else ["--run-dir", str(tmp_path / "run")]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = train.main(["--config", str(recipe), "--data", "d", *run, *argv.get(case, []),
                           "--print-config"])  # fmt: skip
    assert code == 2 and out.getvalue() == "" and not (tmp_path / "run").exists()
    _one_line(reported_errors(), needle)
    bad_input_row(f"--print-config with {case}", "train.py --print-config", code,
                  "refused as training would: one line, nothing printed")  # fmt: skip


def test_a_run_config_is_validated(run, reported_errors, bad_input_row) -> None:
    path = run / "config.yaml"
    path.write_text(path.read_text().replace("batch_size: 8", "batch_size: abc"))
    code = evaluate.main(["--run-dir", str(run)])
    assert code == 2
    _one_line(reported_errors(), str(path), "batch_size")
    bad_input_row("RUN/config.yaml `batch_size: abc`", "evaluate.py --run-dir RUN", code,
                  "file and key named")  # fmt: skip


@pytest.mark.parametrize(
    "flag, value", [("--threads", "-2"), ("--max-steps-per-epoch", "0"), ("--momentum", "nan")]
)
def test_out_of_range_flags(shards_v1, tmp_path, flag, value, reported_errors, bad_input_row):
    code = train.main([*train_argv(shards_v1, tmp_path / "run", 1), flag, value])
    assert code == 2
    _one_line(reported_errors(), flag)
    bad_input_row(f"`{flag} {value}`", "train.py", code, "refused before any rank starts")


def _cut_mid_line(text: str) -> str:
    return text[: text.index("\n3,") + 6]  # epoch 3's row, cut after a few characters


def _rows_dropped(text: str) -> str:
    return text[: text.index("\n3,") + 1]  # a whole file of epochs 1-2, not 1-6


@pytest.mark.parametrize(
    "damage, needles, what",
    [
        (lambda text: text.replace("\n2,", "\n2x,", 1), ["line 3"], "a damaged row"),
        (_cut_mid_line, ["last line is cut short"], "cut mid-line"),
        (lambda text: text[:40], ["truncated or not a history (no column"], "cut in its header"),
        (_rows_dropped, ["2 epoch row(s), but the checkpoint is at epoch 6"], "rows 3-6 gone"),
    ],
    ids=["damaged-row", "cut-mid-line", "cut-header", "rows-gone"],
)
def test_a_damaged_history_stops_the_resume_before_training(
    run, shards_v1, reported_errors, bad_input_row, damage, needles, what
) -> None:
    """R4: a history cut short was read as fewer epochs: the run resumed "finished" and a
    batch study or seed table wrote its cell as 0 updates, best F1 0.000."""
    history = run / "history.csv"
    history.write_text(damage(history.read_text()))
    before = history.read_bytes()
    code = train.main(train_argv(shards_v1, run, 8))
    assert code == 2 and history.read_bytes() == before  # no epoch trained, nothing lost
    _one_line(reported_errors(), str(history), *needles)
    bad_input_row(f"history.csv on resume: {what}", "train.py (resume)", code,
                  "refused before an epoch trains; file and problem named")  # fmt: skip


def _record_of(run: Path) -> dict[str, bytes]:
    """What a refused resume must leave as it was: checkpoints, options, history, commands."""
    kept = [run / "checkpoints", *(run / name for name in ("config.yaml", "history.csv",
                                                           "commands.txt"))]  # fmt: skip
    return {str(p): p.read_bytes() for top in kept for p in [top, *top.rglob("*")] if p.is_file()}


def test_shards_without_a_validation_split_are_refused_before_training(
    synth_v1, tmp_path, reported_errors, bad_input_row
) -> None:
    """Every epoch validated on 0 samples: F1 0 each time, the best checkpoint and
    --target-f1 judged on nothing, found out after the training."""
    shards = tmp_path / "no-val"
    assert preprocess(synth_v1, shards, "--split-ratios", "0.8,0,0.2") == 0
    code = train.main(train_argv(shards, tmp_path / "run", 1))
    assert code == 2 and not (tmp_path / "run" / "checkpoints").exists()
    _one_line(reported_errors(), f"--data {shards}: no validation split (0 val samples)")
    bad_input_row("shards without a val split (`--split-ratios 0.8,0,0.2`)", "train.py", code,
                  "refused before a shard is read")  # fmt: skip


def test_a_resume_with_another_recipe_is_refused(
    run, shards_v1, reported_errors, bad_input_row
) -> None:
    """D12: a resume with another LR and batch trained on, and config.yaml (and the model
    card made from it) relabelled the old epochs with the new recipe."""
    before = _record_of(run)
    code = train.main(train_argv(shards_v1, run, 8, "--lr", "0.9", "--batch-size", "4"))
    assert code == 2 and _record_of(run) == before
    _one_line(reported_errors(), str(run), "--batch-size 8 -> 4", "--lr 0.01 -> 0.9",
              "--no-resume", f"--init-weights {run}")  # fmt: skip
    bad_input_row("a resume with another --lr and --batch-size", "train.py (resume)", code,
                  "refused naming each option, old and new; nothing trained or "
                  "rewritten")  # fmt: skip


def test_a_longer_run_resumes_and_records_its_length(
    run, shards_v1, rank_log, reported_errors, bad_input_row
) -> None:
    """Raising --epochs stays a resume (beside options that change where and how it runs,
    not the recipe); each history row keeps the length it trained under, and the log says
    what the refitted schedule does to the LR. Ending before the epochs trained is refused."""
    where = ["--cache", "none", "--loader-threads", "1", "--target-f1", "0.99"]
    assert train.main(train_argv(shards_v1, run, 7, *where)) == 0
    assert [r.planned_epochs for r in read_history(run)] == [6] * 6 + [7]
    assert "--epochs 7, was 6: the run trains on after 6 epochs" in rank_log.text
    # cosine to 0 at epoch 6 of 6; at 6 of 7 it is 0.01 x (1 + cos(6 pi / 7)) / 2
    assert "the LR here is 0.0004952, where the 6-epoch schedule gave 0" in rank_log.text
    code = train.main(train_argv(shards_v1, run, 3))
    assert code == 2 and len(read_history(run)) == 7
    _one_line(reported_errors(), "has trained 7 epochs, more than --epochs 3")
    bad_input_row("a resume with --epochs below the epochs trained", "train.py (resume)", code,
                  "refused; a longer --epochs resumes, each history row keeps its "
                  "length")  # fmt: skip


@pytest.mark.parametrize("name", ["rün 1", "run(1)"])
def test_odd_run_folder_names_export(run, tmp_path, name, bad_input_row) -> None:
    odd = tmp_path / name
    run.rename(odd)
    out = tmp_path / "export"
    code = export_main([str(odd), "--out", str(out), "--format", "savedmodel"])
    assert code == 0 and (out / "item.json").is_file()
    bad_input_row(f"run folder `{name}`", "bigearthnet-export RUN", code,
                  "exported under a sanitised default name")  # fmt: skip


def test_batch_study_refuses_bad_train_options_first(
    shards_v1, tmp_path, reported_errors, bad_input_row
) -> None:
    argv = ["--data", str(shards_v1), "--out", str(tmp_path / "study"), "--batches", "16",
            "--ranks", "1", "--launcher", "none", "--target-f1", "0.5",
            "--", "--model", "nosuch"]  # fmt: skip
    code = batch_study_main(argv)
    assert code == 2 and not (tmp_path / "study" / "runs").exists()
    _one_line(reported_errors(), "--model 'nosuch'")
    bad_input_row("`-- --model nosuch`", "bigearthnet-batch-study", code,
                  "refused before any run starts")  # fmt: skip


# ----------------------------------------------------------------- messages and leftovers


def test_a_truncated_shard_is_named(shards_v1, run, tmp_path, reported_errors, bad_input_row):
    shards = tmp_path / "shards"
    shutil.copytree(shards_v1, shards)
    victim = sorted(shards.glob("train-*.h5"))[0]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 3])
    code = train.main([*train_argv(shards, tmp_path / "r", 1), "--no-verify-data"])
    assert code == 2
    _one_line(reported_errors(), victim.name)
    out = tmp_path / "m"
    code = map_main(["--shards", str(shards), "--run-dir", str(run), "--out", str(out)])
    assert code == 2 and not out.exists()
    _one_line(reported_errors(), victim.name)
    bad_input_row("a truncated shard (--no-verify-data; map --shards)", "train.py, map", code,
                  "one line naming the shard")  # fmt: skip


def test_a_failed_companion_leaves_no_map(run, tmp_path, monkeypatch, bad_input_row) -> None:
    from bigearthnet.maps.scene import output as scene_output

    scene = tmp_path / "bands"
    write_scene(scene, TRUTH, seed=1, layout="tif", difficulty="simple")
    out = tmp_path / "map.tif"
    argv = ["scene", str(scene), "--run-dir", str(run), "--out", str(out), "--no-progress"]
    assert map_main(argv) == 0 and out.is_file()  # an older, complete map

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(scene_output, "write_csv", full_disk)
    code = map_main(argv)
    assert code == 1 and not out.exists()  # nothing that looks complete
    bad_input_row("disk full while writing a map's areas", "bigearthnet-map scene", code,
                  "exit 1; the map (the mark of completeness) is not left")  # fmt: skip


def test_a_failed_evaluation_write_leaves_no_metrics(run, monkeypatch, bad_input_row) -> None:
    from bigearthnet.evaluation import report

    assert evaluate.main(["--run-dir", str(run)]) == 0

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report, "write_predictions", full_disk)
    code = evaluate.main(["--run-dir", str(run)])
    assert code == 1 and not (run / "eval-test" / "metrics.json").exists()
    bad_input_row("disk full while writing predictions.h5", "evaluate.py", code,
                  "exit 1; no metrics.json vouches for the folder")  # fmt: skip


def test_nan_split_ratio_names_the_flag(synth_v1, tmp_path, reported_errors, bad_input_row):
    code = preprocess(synth_v1, tmp_path / "out", "--split-ratios", "nan,0.5,0.5")
    assert code == 2 and not (tmp_path / "out").exists()
    _one_line(reported_errors(), "--split-ratios")
    bad_input_row("`--split-ratios nan,0.5,0.5`", "bigearthnet-preprocess", code,
                  "flag named; no OUT left behind")  # fmt: skip


def test_a_mistyped_run_folder_is_not_created(tmp_path, reported_errors, bad_input_row) -> None:
    typo = tmp_path / "TYPO"
    code = evaluate.main(["--run-dir", str(typo)])
    assert code == 2 and not typo.exists()
    _one_line(reported_errors(), str(typo))
    bad_input_row("`--run-dir TYPO`", "evaluate.py", code, "refused; no TYPO/.lock created")


def test_other_bands_never_advise_deleting_the_run(
    run, synth_v1, tmp_path, reported_errors, bad_input_row
) -> None:
    other = tmp_path / "s2-10"
    assert preprocess(synth_v1, other, "--bands", "s2-10", "--shard-size", "64") == 0
    before = _tree(run / "checkpoints")
    code = train.main([*train_argv(other, run, 8), "--allow-new-data"])
    assert code == 2 and _tree(run / "checkpoints") == before
    line = _one_line(reported_errors(), "another band configuration")
    assert "--no-resume" not in line
    bad_input_row("`--allow-new-data` on shards of other bands", "train.py (resume)", code,
                  "refused; no advice that would delete the checkpoints")  # fmt: skip


def test_a_header_only_band_is_named(run, tmp_path, reported_errors, bad_input_row) -> None:
    scene = tmp_path / "S2B_MSIL2A_X.SAFE"
    write_scene(scene, TRUTH, seed=1, layout="safe", difficulty="simple")
    band = next(scene.rglob("*_B03_10m.jp2"))
    band.write_bytes(band.read_bytes()[:120])  # the JP2 signature and header boxes only
    code = map_main(["scene", str(scene), "--run-dir", str(run), "--out", str(tmp_path / "m.tif")])
    assert code == 2
    _one_line(reported_errors(), f"error: {band}: ")  # the band file is the subject
    bad_input_row("a JPEG 2000 band cut after its header", "bigearthnet-map scene", code,
                  "one line naming the band file, not the scene")  # fmt: skip


def test_the_documented_strides_are_accepted() -> None:
    from bigearthnet.maps.scene.options import STRIDES

    docs = (REPO / "docs" / "maps.md").read_text()
    assert ", ".join(map(str, STRIDES[:-1])) + f" or {STRIDES[-1]}" in docs


def test_train_help_states_the_batch_once() -> None:
    done = subprocess.run([sys.executable, "train.py", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert "samples PER RANK in each step" in done.stdout
