"""bigearthnet-map region end to end on a synthetic region (4 tiles in UTM zones 32 and 33,
6 dates, clouds): products on one LAEA grid that match the truth (the issue's figures),
areas that add up with no cell counted twice, valid COGs, bad scenes skipped with their
reasons, a rerun that reuses the scene maps (and remakes a map of another model) and gives
the same products."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import rasterio
from helpers import horovodrun
from rio_cogeo.cogeo import cog_validate

from bigearthnet.cli.map import main as map_main
from bigearthnet.cli.synth import main as synth_main
from bigearthnet.maps.region import blocks
from bigearthnet.synthetic.region import RegionSpec, generate_region
from bigearthnet.synthetic.region_score import score_series

pytestmark = pytest.mark.slow
SPEC = RegionSpec(tiles=4, dates=6, size=720, block=2400.0, seed=4, difficulty="simple")


@pytest.fixture(scope="module")
def region(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("region") / "synth"
    generate_region(root, SPEC)
    scenes = sorted((root / "scenes").iterdir())
    first = scenes[0].name
    # A second scene of the same tile and date, a truncated scene and one dated 2017, three
    # years before the others (a date before Sentinel-2, 2005, is refused: test_region_inputs).
    shutil.copytree(scenes[0], root / "scenes" / first.replace("T130116", "T130117"))
    broken = root / "scenes" / first.replace("T130116", "T140000").replace("T32UQU", "T32UQX")
    shutil.copytree(scenes[0], broken)
    (broken / "B02.tif").write_bytes((broken / "B02.tif").read_bytes()[:300])
    shutil.copytree(scenes[0], root / "scenes" / first.replace("2020", "2017"))
    return root


def _run(region: Path, run: Path, out: Path, *extra: str) -> int:
    scenes = [str(p) for p in sorted((region / "scenes").iterdir())]
    argv = ["region", *scenes, "--run-dir", str(run), "--out", str(out),
            "--period", "scene-date", "--no-progress", *extra]  # fmt: skip
    return map_main(argv)


def _read(path: Path) -> np.ndarray:
    with rasterio.open(path) as src:
        return src.read(1)


def test_a_region_series(region, trained_run, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert _run(region, trained_run, out) == 0
    assert "[region] 24 scenes (3 skipped), 6 periods" in capsys.readouterr().out
    record = json.loads((out / "consistency.json").read_text())
    reasons = " | ".join(s["reason"] for s in record["skipped"])
    assert "a second scene of tile 32UQU" in reasons and "(--max-gap-days)" in reasons
    assert "T32UQX_20200315T140000" in reasons  # the truncated scene, named
    periods = record["periods"]
    assert len(periods) == SPEC.dates
    width, height = record["grid"]["width"], record["grid"]["height"]
    cell_km2 = record["grid"]["cell_m"] ** 2 / 1e6  # LAEA: equal-area, every cell alike
    with open(out / "areas.csv", newline="") as f:
        areas = list(csv.DictReader(f))
    for period in periods:
        raw = [r for r in areas if r["period"] == period and r["series"] == "raw"]
        cells = sum(int(r["cells"]) for r in raw)
        assert cells == record["cells_observed"][period] <= width * height  # no cell twice
        km2 = sum(float(r["km2"]) for r in raw)
        assert km2 == pytest.approx(cells * cell_km2, rel=1e-3)
        top = _read(out / "periods" / f"{period}.tif")
        assert int((top != 255).sum()) == cells
    score = score_series(region, out)
    assert synth_main(["score", str(region), str(out)]) == 0  # the same, as a command
    assert score.summary() in capsys.readouterr().out
    assert min(score.agreement) >= 0.9, score.agreement
    assert score.flicker_removed >= 0.5
    assert score.lasting_cells >= 20 and score.lasting_recall >= 0.9
    assert score.stable_cells >= 50 and score.stable_changed <= 0.02
    for path in sorted(out.rglob("*.tif")):  # scene maps, periods, series, change maps
        valid, errors, _ = cog_validate(str(path), quiet=True)
        assert valid, (path, errors)
    # A rerun reuses every scene map and builds the same products, here decoding the series
    # a grid row at a time.
    monkeypatch.setattr(blocks, "BLOCK_VALUES", 1)
    maps = {p: p.stat().st_mtime_ns for p in (out / "scenes").glob("*.tif")}
    before = {p.name: _read(p) for p in (out / "consistent").glob("*.tif")}
    areas_before = (out / "areas.csv").read_bytes()
    assert _run(region, trained_run, out) == 0
    assert {p: p.stat().st_mtime_ns for p in (out / "scenes").glob("*.tif")} == maps
    for name, labels in before.items():
        np.testing.assert_array_equal(_read(out / "consistent" / name), labels)
    assert (out / "areas.csv").read_bytes() == areas_before
    # A scene map of another model is remade, never mixed into the series.
    other = next(p for p in sorted(maps) if not p.name.endswith(".probabilities.tif"))
    with rasterio.open(other, "r+", IGNORE_COG_LAYOUT_BREAK="YES") as dst:
        dst.update_tags(model="another-model")
    stamp = other.stat().st_mtime_ns
    assert _run(region, trained_run, out) == 0
    assert other.stat().st_mtime_ns != stamp
    kept = {p: t for p, t in maps.items() if not p.name.startswith(other.name)}
    assert {p: p.stat().st_mtime_ns for p in kept} == kept
    assert (out / "areas.csv").read_bytes() == areas_before


def test_nothing_mappable_is_exit_2(region, trained_run, tmp_path, reported_errors):
    bad = tmp_path / "S2B_MSIL2A_20200315T100559_N0400_R022_T32UQU_20200315T130116"
    bad.mkdir()
    argv = ["region", str(bad), "--run-dir", str(trained_run), "--out", str(tmp_path / "o"),
            "--no-progress"]  # fmt: skip
    assert map_main(argv) == 2
    assert "no scene of the region could be mapped" in reported_errors()[-1]
    assert not (tmp_path / "o" / "consistency.json").exists()


@pytest.mark.horovod
def test_two_ranks_give_the_products_of_one(region, trained_run, tmp_path):
    """The scenes mapped by 2 ranks (each its strips of windows) and by 1: the same series."""
    scenes = [str(p) for p in sorted((region / "scenes").iterdir()) if "2020" in p.name][:8]
    outputs = {}
    for ranks in (1, 2):
        out = tmp_path / f"ranks{ranks}"
        argv = ["-m", "bigearthnet.cli.map", "region", *scenes, "--run-dir", str(trained_run),
                "--out", str(out), "--period", "scene-date", "--no-progress"]  # fmt: skip
        done = horovodrun(ranks, *argv)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs[ranks] = out
    for product in ("areas.csv", "transitions.csv"):
        assert (outputs[1] / product).read_bytes() == (outputs[2] / product).read_bytes()
    for path in sorted((outputs[1] / "consistent").glob("*.tif")):
        np.testing.assert_array_equal(_read(path), _read(outputs[2] / "consistent" / path.name))
    for path in sorted((outputs[1] / "periods").glob("*.probabilities.tif")):
        with rasterio.open(path) as one, rasterio.open(outputs[2] / "periods" / path.name) as two:
            np.testing.assert_array_equal(one.read(), two.read())


def test_a_killed_run_reruns_to_the_undisturbed_products(region, trained_run, tmp_path):
    """SIGKILL once the first scene maps exist; the rerun maps only what is missing and
    gives the products of a run never killed."""
    import signal
    import subprocess
    import sys
    import time

    scenes = [str(p) for p in sorted((region / "scenes").iterdir()) if "2020" in p.name][:8]

    def command(out: Path) -> list[str]:
        flags = ["--run-dir", str(trained_run), "--out", str(out), "--period", "scene-date"]
        return [sys.executable, "-m", "bigearthnet.cli.map", "region", *scenes, *flags,
                "--no-progress"]  # fmt: skip

    killed = tmp_path / "killed"
    proc = subprocess.Popen(command(killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while len(list((killed / "scenes").glob("*.tif"))) < 2 and proc.poll() is None:
        assert time.monotonic() < deadline, "no scene map appeared"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "consistency.json").exists()  # nothing looks complete
    done = list((killed / "scenes").glob("*.tif"))
    before = {p: p.stat().st_mtime_ns for p in done}
    assert subprocess.run(command(killed), capture_output=True).returncode == 0
    assert {p: p.stat().st_mtime_ns for p in done} == before  # finished maps were reused
    calm = tmp_path / "calm"
    assert subprocess.run(command(calm), capture_output=True).returncode == 0
    for product in ("areas.csv", "transitions.csv"):
        assert (killed / product).read_bytes() == (calm / product).read_bytes()
    for path in sorted((calm / "consistent").glob("*.tif")):
        np.testing.assert_array_equal(_read(killed / "consistent" / path.name), _read(path))
