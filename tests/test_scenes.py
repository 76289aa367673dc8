"""bigearthnet-map scene: synthetic scenes of known land cover (band GeoTIFFs and an L2A
SAFE product with JPEG 2000 bands), the real v1 patches as tiny scenes, bad input."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import rasterio
from helpers import TINY_RECIPE, preprocess

import train
from bigearthnet.cli.map import main as map_main
from bigearthnet.scenes import Scene, strip_windows
from bigearthnet.shards import read_manifest
from bigearthnet.synthetic_scene import SceneTruth, write_scene

# 3 x 3 blocks of 240 px (2.4 km): each holds the centre of one 120 px window at stride 60.
TRUTH = SceneTruth(size=720, block=240, border=36, classes=((0, 2, 5), (8, 11, 13), (14, 16, 18)))


@pytest.fixture(scope="module")
def scene_model(shards_v1: Path, tmp_path_factory) -> Path:
    """The tiny model trained 15 epochs on the synthetic archive."""
    run = tmp_path_factory.mktemp("runs") / "scene"
    argv = ["--data", str(shards_v1), "--run-dir", str(run), "--epochs", "15", "--no-eval-test"]
    assert train.main(argv + TINY_RECIPE) == 0
    return run


def agreement(top: np.ndarray, stride: int) -> float:
    """Share of cells at least 90 px inside their block that got the block's class."""
    hits = []
    for r, c in np.ndindex(top.shape):
        y, x = r * stride + stride // 2, c * stride + stride // 2
        inside = [min(v % TRUTH.block, TRUTH.block - v % TRUTH.block) >= 90 for v in (y, x)]
        if all(inside):
            hits.append(top[r, c] == TRUTH.class_at(y, x))
    return float(np.mean(hits))


@pytest.mark.parametrize("layout", ["tif", "safe"])
def test_scene_map_finds_the_known_land_cover(layout, scene_model, tmp_path):
    scene = tmp_path / ("S2B_MSIL2A_X.SAFE" if layout == "safe" else "bands")
    write_scene(scene, TRUTH, seed=1, layout=layout)
    out = tmp_path / "map.tif"
    argv = ["scene", str(scene), "--run-dir", str(scene_model), "--out", str(out)]
    assert map_main([*argv, "--stride", "60", "--no-progress"]) == 0
    with rasterio.open(out) as src:
        top = src.read(1)
        assert src.crs.to_epsg() == 32633 and src.res == (600.0, 600.0)
        assert src.colormap(1)[TRUTH.classes[1][1]][:3] != (0, 0, 0)
        assert src.tags(1)["0"] == "Urban fabric" and src.nodata == 255
    assert agreement(top, 60) >= 0.9, top
    assert (top[[0, 0, -1, -1], [0, -1, 0, -1]] == 255).all()  # corner cells: mostly border
    with rasterio.open(f"{out}.probabilities.tif") as src:
        assert src.count == 19 and src.scales[0] == pytest.approx(1 / 250)
    areas = Path(f"{out}.areas.csv").read_text().splitlines()
    assert areas[0] == "class,cells,km2" and len(areas) == 1 + 19 + 1
    assert not list(tmp_path.glob(".*"))  # no temporary file left


def test_safe_offset_gives_the_values_of_the_band_geotiffs(tmp_path):
    """Baseline 04.00 stores reflectance + 1000 (BOA_ADD_OFFSET -1000): read back, the SAFE
    windows equal those of the same scene as plain GeoTIFFs."""
    write_scene(tmp_path / "bands", TRUTH, seed=2, layout="tif")
    write_scene(tmp_path / "x.SAFE", TRUTH, seed=2, layout="safe")
    plain, safe = Scene(tmp_path / "bands"), Scene(tmp_path / "x.SAFE")
    assert safe.offsets["B02"] == -1000 and not plain.offsets
    first = [dict(strip_windows(s, 120, 60, "bilinear")) for s in (plain, safe)]
    assert first[0].keys() == first[1].keys() and len(first[0]) > 5
    for col in first[0]:
        np.testing.assert_array_equal(first[0][col], first[1][col])


def test_a_real_patch_as_a_scene_gives_its_shard_image(real_v1, tmp_path):
    """Each real v1 patch folder is a 120 px scene: its one window is exactly the image
    preprocessing wrote for it (same upsampling code, rasterio vs the project's reader)."""
    shards = tmp_path / "shards"
    assert preprocess(real_v1, shards, "--split-ratios", "1,0,0") == 0
    manifest = read_manifest(shards)
    images = {}
    for entry in manifest.shards:
        with h5py.File(entry.path(shards), "r") as f:
            for name, image in zip(f["names"].asstr(), f["images"]):
                images[name] = image
    assert len(images) >= 5
    for name, image in images.items():
        windows = dict(strip_windows(Scene(real_v1 / name), 0, 60, manifest.resampling))
        np.testing.assert_array_equal(windows[0], image)


def _copy_scene(tmp_path: Path) -> Path:
    scene = tmp_path / "bands"
    write_scene(scene, SceneTruth(size=240, block=240, border=0, classes=((3,),)), layout="tif")
    return scene


@pytest.mark.parametrize(
    "damage, message",
    [
        ("missing band", "no image of band(s) B8A"),
        ("other crs", "B05.tif: CRS EPSG:32634 differs from B02's"),
        ("too small", "smaller than one 120x120 window"),
        ("corrupt band", "cannot read a band"),
    ],
)
def test_bad_scenes_are_one_line_exit_2(damage, message, scene_model, tmp_path, reported_errors):
    scene = _copy_scene(tmp_path)
    if damage == "missing band":
        (scene / "B8A.tif").unlink()
    elif damage == "other crs":
        with rasterio.open(scene / "B05.tif", "r+") as dst:
            dst.crs = rasterio.crs.CRS.from_epsg(32634)
    elif damage == "too small":
        shutil.rmtree(scene)
        small = SceneTruth(size=96, block=96, border=0, classes=((3,),))
        write_scene(scene, small, layout="tif")
    else:
        (scene / "B03.tif").write_bytes(b"II*\0garbage")
    out = tmp_path / "map.tif"
    argv = ["scene", str(scene), "--run-dir", str(scene_model), "--out", str(out), "--no-progress"]
    assert map_main(argv) == 2
    (line,) = reported_errors()
    assert message in line, line
    assert not out.exists()
