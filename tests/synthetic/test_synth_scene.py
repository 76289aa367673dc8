"""bigearthnet-synth scene: a scene the map command reads, its land cover printed, an
existing path refused."""

from __future__ import annotations

from pathlib import Path

from bigearthnet.cli.synth import main as synth_main
from bigearthnet.maps.scene_input import Scene


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
    assert "exists; choose a new path" in line
