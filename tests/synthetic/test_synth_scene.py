"""bigearthnet-synth scene: a scene the map command reads, its land cover printed, an
existing path refused (replaced with --overwrite when this command made it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bigearthnet.cli.synth import main as synth_main
from bigearthnet.maps.scene.input import Scene
from bigearthnet.synthetic.scene import DemoScene


def test_scene_command_writes_a_readable_scene(tmp_path: Path, capsys, reported_errors):
    out = tmp_path / "S2X_MSIL2A_demo.SAFE"
    assert synth_main(["scene", str(out), "--blocks", "2", "--seed", "3"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("wrote a 480 x 480 px safe scene")
    assert printed[1:] == [
        "  Urban fabric | Arable land",
        "  Complex cultivation patterns | Broad-leaved forest",
    ]
    scene = Scene(out)
    try:
        assert (scene.height, scene.width) == (480, 480) and scene.crs.to_epsg() == 32633
    finally:
        scene.close()
    assert synth_main(["scene", str(out)]) == 2
    (line,) = reported_errors()
    assert f"{out}: exists and is not empty (--overwrite replaces it)" in line
    assert synth_main(["scene", str(out), "--blocks", "1", "--overwrite"]) == 0
    assert "wrote a 240 x 240 px safe scene" in capsys.readouterr().out


def _room(needs) -> bool:
    """Whether this machine could hold what ``needs`` asks (then a test of its refusal
    would write it: skip)."""
    import psutil

    return needs.memory <= psutil.virtual_memory().available


@pytest.mark.bad_input
@pytest.mark.parametrize("blocks", ["100000", "45"])
def test_a_scene_too_large_is_refused_before_any_work(
    tmp_path, reported_errors, bad_input_row, blocks
):
    """D15: --blocks 100000 took 4.36 GB of memory in 30 s; a scene larger than one
    Sentinel-2 tile is out of range, and one tile (45 blocks, 30 GB to render) is checked
    against the memory of the machine."""
    if blocks == "45" and _room(DemoScene(blocks=45).needs()):
        pytest.skip("this machine has the memory for a whole tile")
    out = tmp_path / "scene"
    code = synth_main(["scene", str(out), "--blocks", blocks, "--layout", "tif"])
    assert code == 2 and list(tmp_path.iterdir()) == []
    (line,) = reported_errors()
    needle = "at most 45 (a Sentinel-2 product covers one MGRS tile" if blocks != "45" else (
        "--blocks 45: needs ")  # fmt: skip
    assert needle in line, line
    verdict = "refused at once: one Sentinel-2 tile at most, and the memory it needs"
    bad_input_row(f"--blocks {blocks}", "bigearthnet-synth scene", code, verdict)


@pytest.mark.bad_input
def test_a_scene_into_a_folder_of_other_files_is_refused(tmp_path, reported_errors, bad_input_row):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    code = synth_main(["scene", str(out), "--blocks", "1", "--layout", "tif"])
    assert code == 2 and [p.name for p in out.iterdir()] == ["notes.txt"]
    assert "OUT holds other files (notes.txt) and is no folder of bigearthnet-synth scene" in (
        reported_errors()[0])  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    bad_input_row("OUT a folder of other files", "bigearthnet-synth scene OUT", code,
                  "refused naming what it holds; nothing touched")  # fmt: skip
