"""Inputs are data, never code: no YAML tags that build objects, no paths from manifests,
pointers or metadata that leave their folder; files written with the umask's permissions."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
from helpers import REPO, preprocess

import evaluate
import train


def test_yaml_with_a_python_tag_is_refused_and_never_run(tmp_path, reported_errors):
    marker = tmp_path / "ran"
    recipe = tmp_path / "evil.yaml"
    recipe.write_text(f'model: !!python/object/apply:os.system ["touch {marker}"]\n')
    assert train.main(["--config", str(recipe), "--data", "d", "--run-dir", "r"]) == 2
    (line,) = reported_errors()
    assert str(recipe) in line and "invalid YAML" in line
    assert not marker.exists()


def test_a_shard_name_leaving_the_data_folder_is_refused(tmp_path, shards_v1, reported_errors):
    data = tmp_path / "data"
    shutil.copytree(shards_v1, data)
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["shards"][0]["file"] = "../" + manifest["shards"][0]["file"]
    (data / "manifest.json").write_text(json.dumps(manifest))
    argv = ["--data", str(data), "--run-dir", str(tmp_path / "run"), "--model", "tiny"]
    assert train.main([*argv, "--epochs", "1", "--no-progress"]) == 2
    (line,) = reported_errors()
    assert "is not a plain file name" in line and "manifest.json" in line


def test_a_checkpoint_pointer_leaving_its_folder_is_refused(tmp_path, trained_run, reported_errors):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    pointer = run / "checkpoints" / "best.json"
    record = json.loads(pointer.read_text())
    record["folder"] = "../../elsewhere"
    pointer.write_text(json.dumps(record))
    assert evaluate.main(["--run-dir", str(run), "--split", "val"]) == 2
    assert any("is not a plain name" in line for line in reported_errors())


def test_a_v2_patch_id_leaving_the_archive_is_refused(tmp_path, synth_v2):
    archive = tmp_path / "v2"
    shutil.copytree(synth_v2, archive)
    table = pd.read_parquet(archive / "metadata.parquet")
    evil = "../../" + str(table.loc[0, "patch_id"])
    table.loc[0, "patch_id"] = evil
    table.to_parquet(archive / "metadata.parquet")
    out = tmp_path / "shards"
    assert preprocess(archive, out, "--shard-size", "32") == 0
    rejects = (out / "rejects.csv").read_text()
    assert evil in rejects and "not a plain name" in rejects


def test_written_files_get_the_umask_permissions(tmp_path):
    """Shared project folders keep their group's access: 0666 & ~umask, as open() would."""
    target = tmp_path / "report.json"
    code = (
        "import os, sys; os.umask(0o027); from bigearthnet.core.util import atomic_write_text; "
        "atomic_write_text(sys.argv[1], 'x')"
    )
    subprocess.run([sys.executable, "-c", code, str(target)], cwd=REPO, check=True)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert not list(Path(tmp_path).glob("*.tmp*"))
