"""``--out`` of every ``bigearthnet-map`` sub-command (patches, scene, change, region),
checked in one place before any input is read: it may not be, nor hold, anything the
command reads (of a scene: every local file its form reads, ``SceneForm.files``)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from bigearthnet.core.util import overlapping
from bigearthnet.inference.predictor import ModelChoice
from bigearthnet.maps.inputs import SceneForm
from bigearthnet.maps.patches import MapError


def check_out(
    out: Path,
    model: ModelChoice | None = None,
    scenes: Iterable[SceneForm | str] = (),
    **inputs: Path | None,
) -> None:
    """MapError when ``out`` is an input of the command or a folder holding one: the
    ``inputs`` (by option name: ``shards=``), the ``scenes`` (identified, or the path of one
    that is not there) and the ``model``."""
    named: dict[str, str | Path | None] = {f"--{k.replace('_', '-')}": v for k, v in inputs.items()}
    for scene in scenes:
        named.update(scene.files() if isinstance(scene, SceneForm) else {f"SCENE {scene}": scene})
    if model is not None:
        named.update({"--run-dir": model.run_dir, "--model": model.model})
    clash = overlapping(out, named)
    if clash is not None:
        raise MapError(f"{out}: --out overlaps {clash}; choose another output")
