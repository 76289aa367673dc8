"""A non-editable install carries what the commands need besides the package: the Slurm
job scripts (found by util.jobs_dir under <prefix>/share/bigearthnet-hpc/jobs), the model
registry as bigearthnet.models - and nothing generic at the top of site-packages."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from helpers import REPO


def test_the_wheel_carries_the_job_scripts(tmp_path):
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*build, "-w", str(tmp_path), str(REPO)], check=True, timeout=300)
    (wheel,) = tmp_path.glob("bigearthnet_hpc-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shared = [n.split("share/bigearthnet-hpc/")[1] for n in names if "share/bigearthnet-hpc/" in n]
    tracked = subprocess.run(
        ["git", "ls-files", "jobs"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert sorted(shared) == sorted(tracked)
    assert any(n.startswith("bigearthnet/cli/") for n in names)
    assert "bigearthnet/models/resnet.py" in names  # the registry, under the package's name
    # bigearthnet-export's card template and the bundled STAC schemas it validates against
    assert "bigearthnet/export/templates/model_card.md.j2" in names
    assert "bigearthnet/formats/stac_schemas/mlm-v1.5.2.json" in names
    assert "bigearthnet/pages/templates/run.html.j2" in names  # the pages' templates
    top = {n.split("/")[0] for n in names if not n.startswith("bigearthnet_hpc-")}
    assert top == {"bigearthnet"}, top  # no top-level models, train or evaluate
