"""Bad inputs of the run page's map viewer (bigearthnet/pages/run_maps.py): a scene map under
RUN/maps/ that is truncated, or that another run's model made. The page is still written
(train.py and evaluate.py write it at their end: a damaged map must not fail them); the map
is neither in the viewer nor previewed as the run's, and the page says which and why."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bigearthnet.cli.map import main as map_main
from bigearthnet.cli.report import main as report_main
from bigearthnet.pages.run_facts import read_run
from bigearthnet.pages.run_page import REPORT
from bigearthnet.synthetic.scene import SceneTruth, write_scene

pytestmark = pytest.mark.bad_input

TRUTH = SceneTruth(size=240, block=120, border=0, classes=((2, 8), (9, 17)))


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run-maps-bad") / "scene"
    return write_scene(out, TRUTH, seed=1, layout="tif", difficulty="simple")


def _run_with_map(trained_run: Path, scene: Path, root: Path, name: str) -> Path:
    """A copy of the tiny run named ``name`` with its scene map (1.2 km cells: 4 windows)
    at ``maps/scene.tif``."""
    run = root / name
    shutil.copytree(trained_run, run, ignore=shutil.ignore_patterns(REPORT))
    argv = ["scene", str(scene), "--run-dir", str(run), "--stride", "120",
            "--out", str(run / "maps" / "scene.tif"), "--no-progress"]  # fmt: skip
    assert map_main(argv) == 0
    return run


def _shown(run: Path) -> tuple[list[str], str]:
    """The page's viewer maps and its text, once written again."""
    assert report_main([str(run)]) == 0
    html = (run / REPORT).read_text()
    return [m.name for m in read_run(run).scene_maps.shown], html


def test_a_truncated_scene_map_is_left_out_and_named(
    trained_run, scene, tmp_path, bad_input_row
) -> None:
    run = _run_with_map(trained_run, scene, tmp_path, "run")
    assert _shown(run)[0] == ["maps/scene.tif"]
    path = run / "maps" / "scene.tif"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    shown, html = _shown(run)
    assert shown == []
    assert "maps/scene.tif: not complete (damaged (" in html and "; not shown" in html
    assert 'id="viewer"' not in html and 'alt="maps/scene.png"' not in html
    bad_input_row("a scene map under RUN/maps/ truncated", "bigearthnet-report RUN", 0,
                  "the page is written without it (viewer and preview) and names it, "
                  "'not complete (damaged ...)'")  # fmt: skip


def test_a_scene_map_of_another_run_is_left_out_and_named(
    trained_run, trained_head_run, scene, tmp_path, bad_input_row
) -> None:
    """The other run's map copied into this run's maps/: its tags' paths, relative to the
    map, now lead to this run, and only its weights' digest tells them apart."""
    mine = _run_with_map(trained_run, scene, tmp_path, "mine")
    other = _run_with_map(trained_head_run, scene, tmp_path, "other")
    for suffix in ("", ".probabilities.tif", ".areas.csv", ".aux.xml"):
        shutil.copy2(other / "maps" / f"scene.tif{suffix}", mine / "maps" / f"theirs.tif{suffix}")
    shutil.copy2(other / "maps" / "scene.png", mine / "maps" / "theirs.png")
    shutil.copy2(other / "maps" / "scene.qml", mine / "maps" / "theirs.qml")
    shown, html = _shown(mine)
    assert shown == ["maps/scene.tif"]
    assert "maps/theirs.tif: made by other weights than those of the checkpoint" in html
    assert 'alt="maps/theirs.png"' not in html
    bad_input_row("a scene map under RUN/maps/ made by another run's model",
                  "bigearthnet-report RUN", 0,
                  "left out of the viewer and the previews (its weights' digest is not this "
                  "run's); the page names it")  # fmt: skip
