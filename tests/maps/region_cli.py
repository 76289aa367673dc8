"""``bigearthnet-map region`` as the tests of its bad inputs call it: the scenes of a synthetic
region (``simple_region`` in tests/conftest.py), the command in-process, and the scene maps it
left."""

from __future__ import annotations

from pathlib import Path

from bigearthnet.cli.map import main as map_main
from bigearthnet.formats import region_folder


def scenes_of(region: Path) -> list[str]:
    return [str(p) for p in sorted((region / "scenes").iterdir())]


def map_region(out: Path, run: Path, *inputs: str, extra: tuple[str, ...] = ()) -> int:
    """The command's exit code: ``inputs`` mapped with ``run``'s model into ``out``, a
    period per scene date."""
    argv = ["region", *inputs, "--run-dir", str(run), "--out", str(out),
            "--period", "scene-date", "--no-progress", *extra]  # fmt: skip
    return map_main(argv)


def scene_maps(out: Path) -> dict[Path, int]:
    """The scene maps of ``out`` (not their companions) and their mtimes."""
    found = (out / region_folder.SCENES).glob("*.tif")
    return {p: p.stat().st_mtime_ns for p in found if not p.name.endswith(".probabilities.tif")}
