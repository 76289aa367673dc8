"""Bad inputs of 10 m scene maps (issue 50): a window that is no window, or that does not fit
in memory (given, or the default sized to the memory); a 10 m map asked of a
classifier-only model; both kinds of map at once; a region rerun into the same --out after
the model's head changed."""

from __future__ import annotations

from pathlib import Path

import pytest
import rasterio
from region_cli import map_region, scene_maps, scenes_of

from bigearthnet.cli.map import main as map_main
from bigearthnet.synthetic.scene import SceneTruth, write_scene

pytestmark = pytest.mark.bad_input


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    truth = SceneTruth(size=240, block=120, border=12, classes=((0, 8), (11, 16)))
    out = tmp_path_factory.mktemp("pixel-bad") / "scene"
    return write_scene(out, truth, seed=4, layout="tif", difficulty="simple")


def _scene_map(scene: Path, run: Path, out: Path, *extra: str) -> int:
    return map_main(["scene", str(scene), "--run-dir", str(run), "--out", str(out),
                     "--no-progress", *extra])  # fmt: skip


@pytest.mark.parametrize("window", ["0", "-96", "100", "96", "nan"])
def test_a_window_that_is_no_window_is_refused_when_parsed(
    window, scene, trained_head_run, tmp_path, reported_errors, bad_input_row
) -> None:
    code = _scene_map(scene, trained_head_run, tmp_path / "m.tif", "--window", window)
    assert code == 2 and not (tmp_path / "m.tif").exists()
    line = reported_errors()[-1]
    assert "--window" in line, line
    bad_input_row(f"`--window {window}`", "bigearthnet-map scene", code,
                  "refused when parsed: a multiple of 96 px from 192")  # fmt: skip


def test_a_window_too_small_for_the_models_margin_is_refused(
    scene, shards_v2, tmp_path, reported_errors, bad_input_row
) -> None:
    """576 px is a window for the tiny CNN (48 px margins), not for a ResNet (its dense
    head sees 282 px around a pixel: 288 px margins, least window 672): one line naming
    --window, the model and the least window, before the scene is read."""
    from helpers import train_argv

    import train

    run = tmp_path / "resnet18"
    argv = train_argv(shards_v2, run, 1, "--model", "resnet18", "--max-steps-per-epoch", "1")
    assert train.main(argv) == 0
    out = tmp_path / "maps"
    code = _scene_map(scene, run, out / "m.tif", "--window", "576")
    assert code == 2 and not out.exists()
    line = reported_errors()[-1]
    assert "--window 576" in line and "resnet18" in line and "--window 672" in line, line
    bad_input_row("a `--window` too small for the model's margin (576 px, a ResNet)",
                  "bigearthnet-map scene", code,
                  "refused naming the model and its least window (672)")  # fmt: skip


def test_a_window_that_does_not_fit_in_memory_is_refused_before_reading(
    scene, trained_head_run, tmp_path, reported_errors, bad_input_row
) -> None:
    """960,000 px a side: terabytes of activations; one line with a window that fits, not
    an out-of-memory kill."""
    code = _scene_map(scene, trained_head_run, tmp_path / "m.tif", "--window", "960000")
    assert code == 2 and not list(tmp_path.iterdir())
    line = reported_errors()[-1]
    assert "--window 960000" in line and "GB" in line and "take --window" in line, line
    bad_input_row("a `--window` that does not fit in memory", "bigearthnet-map scene", code,
                  "refused before the scene is read, naming a window that fits")  # fmt: skip


def test_a_machine_without_memory_for_the_least_window_is_refused_before_reading(
    scene, trained_head_run, tmp_path, monkeypatch, reported_errors, bad_input_row
) -> None:
    """Without --window the window is the largest that fits in memory; where not even the
    model's least window fits, one line says so before the scene is read. The free memory
    is the one thing faked (psutil's reading, 10 MB): a machine that short cannot run
    the test itself."""
    import psutil

    real = psutil.virtual_memory()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: real._replace(available=10_000_000))
    code = _scene_map(scene, trained_head_run, tmp_path / "m.tif")
    assert code == 2 and not list(tmp_path.iterdir())
    line = reported_errors()[-1]
    assert "--window" in line and "tiny" in line and "192 px" in line, line
    bad_input_row("no `--window`, and not even the model's least window fits in memory",
                  "bigearthnet-map scene", code,
                  "refused before the scene is read, one line")  # fmt: skip


def test_a_10m_map_of_a_classifier_only_model_is_refused(
    scene, trained_run, tmp_path, reported_errors, bad_input_row
) -> None:
    """Without --window the same model makes its cell map, as before (test_scene.py)."""
    code = _scene_map(scene, trained_run, tmp_path / "m.tif", "--window", "192")
    assert code == 2 and not (tmp_path / "m.tif").exists()
    line = reported_errors()[-1]
    assert "--window 192" in line and "no dense head" in line and "--stride" in line, line
    bad_input_row("`--window` (a 10 m map) with a classifier-only model",
                  "bigearthnet-map scene", code,
                  "refused: its cell map needs no --window")  # fmt: skip


def test_both_kinds_of_map_at_once_are_refused(
    scene, trained_head_run, tmp_path, reported_errors, bad_input_row
) -> None:
    code = _scene_map(scene, trained_head_run, tmp_path / "m.tif", "--window", "192",
                      "--stride", "60")  # fmt: skip
    assert code == 2 and not (tmp_path / "m.tif").exists()
    assert "give one" in reported_errors()[-1]
    bad_input_row("`--window` with `--stride`", "bigearthnet-map scene", code,
                  "refused: a 10 m map or a cell map, one")  # fmt: skip


def test_a_rerun_after_the_models_head_changed_remakes_the_scene_maps(
    simple_region, trained_run, trained_head_run, tmp_path, rank_log, bad_input_row
) -> None:
    """Into the same --out: the classifier's 600 m maps, then the dense head's 10 m maps
    (another head and weights: every map remade, with a warning naming them), then the same
    model with --stride 60 (the same weights, another head: remade again)."""
    out, scenes = tmp_path / "out", scenes_of(simple_region)[:2]
    assert map_region(out, trained_run, *scenes) == 0
    first = scene_maps(out)
    code = map_region(out, trained_head_run, *scenes, extra=("--window", "192"))
    assert code == 0
    second = scene_maps(out)
    assert second.keys() == first.keys() and all(second[p] != first[p] for p in first)
    remade = [r.getMessage() for r in rank_log.records if "remapping" in r.getMessage()]
    assert len(remade) == 2 and all("head" in m and "weights_sha256" in m for m in remade)
    for path in second:
        with rasterio.open(path) as src:
            assert src.res == (10.0, 10.0) and src.tags()["head"] == "dense head (per pixel)"
    assert map_region(out, trained_head_run, *scenes, extra=("--stride", "60")) == 0
    third = scene_maps(out)
    assert all(third[p] != second[p] for p in second)
    bad_input_row("a rerun into the same `--out` after the model or its head changed",
                  "bigearthnet-map region", 0,
                  "every scene map remade, a warning naming what differs")  # fmt: skip
