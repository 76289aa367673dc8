"""bigearthnet-map scene: synthetic scenes of known land cover (band GeoTIFFs and an L2A
SAFE product with JPEG 2000 bands), the real v1 patches as tiny scenes, bad input."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import rasterio
from gis import assert_no_machine_paths, gdal_category_names, open_as_gis_user
from helpers import TINY_RECIPE, preprocess
from rasterio.shutil import copy as copy_dataset

import train
from bigearthnet.cli.map import main as map_main
from bigearthnet.core import constants
from bigearthnet.formats.history import read_history
from bigearthnet.formats.manifest import read_manifest
from bigearthnet.maps.change import CHANGE_NODATA, NO_CHANGE, UNCERTAIN
from bigearthnet.maps.scene.input import Scene
from bigearthnet.maps.scene.windows import strip_windows
from bigearthnet.synthetic.scene import SceneTruth, write_scene

# 3 x 3 blocks of 240 px (2.4 km): each holds the centre of one 120 px window at stride 60.
TRUTH = SceneTruth(size=720, block=240, border=36, classes=((0, 2, 5), (8, 11, 13), (14, 16, 18)))


# Its module fixtures train or evaluate: all its tests in one xdist worker, built once.
pytestmark = pytest.mark.xdist_group("scene")


@pytest.fixture(scope="module")
def scene_model(trained_run: Path, shards_v1: Path, tmp_path_factory) -> Path:
    """The tiny model trained 15 epochs on the synthetic archive: a copy of the session's
    6-epoch trained_run (the same recipe and data) resumed to 15, its cosine refitted."""
    run = tmp_path_factory.mktemp("runs") / "scene"
    shutil.copytree(trained_run, run)
    argv = ["--data", str(shards_v1), "--run-dir", str(run), "--epochs", "15", "--no-eval-test"]
    assert train.main(argv + TINY_RECIPE) == 0
    assert len(read_history(run)) == 15
    return run


def interior_cells(shape, stride: int, truth: SceneTruth = TRUTH, offset=(0, 0)):
    """(row, col, class) of the cells whose centre is at least 90 px inside its block."""
    for r, c in np.ndindex(shape):
        y, x = offset[0] + r * stride + stride // 2, offset[1] + c * stride + stride // 2
        if all(min(v % truth.block, truth.block - v % truth.block) >= 90 for v in (y, x)):
            yield r, c, truth.class_at(y, x)


def agreement(top: np.ndarray, stride: int, truth: SceneTruth = TRUTH, offset=(0, 0)) -> float:
    """Share of cells at least 90 px inside their block that got the block's class."""
    hits = [top[r, c] == k for r, c, k in interior_cells(top.shape, stride, truth, offset)]
    return float(np.mean(hits))


def map_scene(scene: Path, run: Path, out: Path, *extra: str) -> np.ndarray:
    argv = ["scene", str(scene), "--run-dir", str(run), "--out", str(out), "--no-progress"]
    assert map_main([*argv, *extra]) == 0
    with rasterio.open(out) as src:
        return src.read(1)


@pytest.mark.parametrize("layout", ["tif", "safe"])
def test_scene_map_finds_the_known_land_cover(layout, scene_model, tmp_path):
    scene = tmp_path / ("S2B_MSIL2A_X.SAFE" if layout == "safe" else "bands")
    write_scene(scene, TRUTH, seed=1, layout=layout, difficulty="simple")
    out = tmp_path / "map.tif"
    argv = ["scene", str(scene), "--run-dir", str(scene_model), "--out", str(out)]
    assert map_main([*argv, "--stride", "60", "--no-progress"]) == 0
    with rasterio.open(out) as src:
        top, tags = src.read(1), src.tags()
        assert src.crs.to_epsg() == 32633 and src.res == (600.0, 600.0)
        assert src.colormap(1)[TRUTH.classes[1][1]][:3] != (0, 0, 0)
        assert src.tags(1)["0"] == "Urban fabric" and src.nodata == 255
    # Issue 47: no folder of this machine in the tags; the scene and run relative to the map.
    assert tags["scene"] == scene.name and tags["clouds_masked"] == "True"
    assert (tmp_path / tags["run_dir"]).resolve() == scene_model.resolve()
    assert_no_machine_paths(tmp_path, tmp_path.parent.parent)
    assert agreement(top, 60) >= 0.9, top
    assert (top[[0, 0, -1, -1], [0, -1, 0, -1]] == 255).all()  # corner cells: mostly border
    with rasterio.open(f"{out}.probabilities.tif") as src:
        assert src.count == 19 and src.scales[0] == pytest.approx(1 / 250)
    areas = Path(f"{out}.areas.csv").read_text().splitlines()
    assert areas[0] == "class,cells,km2" and len(areas) == 1 + 19 + 1
    assert (tmp_path / "map.png").stat().st_size > 10_000  # preview with legend, scale bar
    assert not list(tmp_path.glob(".*"))  # no temporary file left
    labels = open_as_gis_user(out)  # COG, colour table, category names, QGIS style
    assert [labels[v] for v in sorted(labels)] == list(constants.CLASSES_19)
    assert gdal_category_names(out)[:2] == ["Urban fabric", "Industrial or commercial units"]


def test_safe_offset_gives_the_values_of_the_band_geotiffs(tmp_path):
    """Baseline 04.00 stores reflectance + 1000 (BOA_ADD_OFFSET -1000): read back, the SAFE
    windows equal those of the same scene as plain GeoTIFFs."""
    write_scene(tmp_path / "bands", TRUTH, seed=2, layout="tif", difficulty="simple")
    write_scene(tmp_path / "x.SAFE", TRUTH, seed=2, layout="safe", difficulty="simple")
    plain, safe = Scene(tmp_path / "bands"), Scene(tmp_path / "x.SAFE")
    assert safe.offsets["B02"] == -1000 and set(plain.offsets.values()) == {0}
    assert "MTD_MSIL2A.xml" in safe.radiometry.evidence
    assert plain.radiometry.evidence == "scale/offset of the bands"
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
        # BigEarthNet's DN are offset-free by definition; the files do not say so.
        patch = Scene(real_v1 / name, boa_offset=0)
        windows = dict(strip_windows(patch, 0, 60, manifest.resampling))
        np.testing.assert_array_equal(windows[0], image)


def _copy_scene(tmp_path: Path) -> Path:
    scene = tmp_path / "bands"
    write_scene(
        scene,
        SceneTruth(size=240, block=240, border=0, classes=((3,),)),
        layout="tif",
        difficulty="simple",
    )
    return scene


@pytest.mark.parametrize(
    "damage, message",
    [
        ("missing band", "no image of band(s) B8A"),
        ("other crs", "B05.tif: CRS EPSG:32634 differs from B02's"),
        ("too small", "smaller than one 120x120 window"),
        ("corrupt band", "cannot read this band"),
        ("truncated band", "B05.tif: no georeferencing (CRS or geotransform)"),
        ("corrupt jp2", "_B04_10m.jp2: cannot read"),
        ("no scl", "scene classification band (SCL); --no-mask-clouds maps it"),  # default on
        ("bbox outside", "lies outside the scene"),
        ("stack order", "stack.tif: 12 bands, but the band order names 3"),
        ("bad bbox", "--bbox: wants minx,miny,maxx,maxy"),
        ("other labels", "its model predicts 19 classes, not the requested 43"),
    ],
)
def test_bad_scenes_are_one_line_exit_2(damage, message, scene_model, tmp_path, reported_errors):
    scene = _copy_scene(tmp_path)
    extra: list[str] = []
    if damage == "missing band":
        (scene / "B8A.tif").unlink()
    elif damage == "other crs":
        with rasterio.open(scene / "B05.tif", "r+") as dst:
            dst.crs = rasterio.crs.CRS.from_epsg(32634)
    elif damage == "too small":
        shutil.rmtree(scene)
        small = SceneTruth(size=96, block=96, border=0, classes=((3,),))
        write_scene(scene, small, layout="tif", difficulty="simple")
    elif damage == "corrupt band":
        (scene / "B03.tif").write_bytes(b"II*\0garbage")
    elif damage == "truncated band":  # cut short: the header stays, the GeoTIFF tags do not
        (scene / "B05.tif").write_bytes((scene / "B05.tif").read_bytes()[:300])
    elif damage == "corrupt jp2":
        scene = tmp_path / "x.SAFE"
        write_scene(scene, SceneTruth(240, 240, 0, ((3,),)), layout="safe", difficulty="simple")
        (b04,) = scene.glob("GRANULE/*/IMG_DATA/R10m/*_B04_10m.jp2")
        data = b04.read_bytes()
        b04.write_bytes(data[: len(data) // 3])  # a download cut short
    elif damage == "no scl":
        (scene / "SCL.tif").unlink()
    elif damage == "bbox outside":
        extra = ["--bbox", "0,0,1000,1000"]
    elif damage == "bad bbox":
        extra = ["--bbox", "1,2,3"]
    elif damage == "other labels":
        extra = ["--labels", "43"]
    else:
        scene = tmp_path / "stack.tif"
        write_scene(scene, SceneTruth(240, 240, 0, ((3,),)), layout="stack", difficulty="simple")
        extra = ["--band-order", "B02,B03,B04", "--no-mask-clouds"]
    out = tmp_path / "map.tif"
    argv = ["scene", str(scene), "--run-dir", str(scene_model), "--out", str(out), "--no-progress"]
    assert map_main([*argv, *extra]) == 2
    (line,) = reported_errors()
    assert message in line, line
    assert not out.exists()


CLOUDED = SceneTruth(
    size=720, block=240, border=36, classes=TRUTH.classes, cloud=(240, 240, 480, 480)
)


def test_clouds_are_nodata_unless_no_mask_clouds(scene_model, tmp_path):
    """A cloud over the centre block: by default its cells are nodata (SCL says cloud), as
    in a region's scene maps; the other blocks are still mapped; with --no-mask-clouds the
    cloud gets a class."""
    scene = tmp_path / "x.SAFE"
    write_scene(scene, CLOUDED, seed=3, layout="safe", difficulty="simple")
    masked = map_scene(scene, scene_model, tmp_path / "masked.tif")
    plain = map_scene(scene, scene_model, tmp_path / "plain.tif", "--no-mask-clouds")
    cloud_cells = (slice(4, 8), slice(4, 8))  # 600 m cells 4..7 lie in px 240..480
    assert (masked[cloud_cells] == 255).all()
    assert (plain[cloud_cells] != 255).all()
    outside = [(r, c, k) for r, c, k in interior_cells(masked.shape, 60) if (r, c) != (5, 5)]
    hits = [masked[r, c] == k for r, c, k in outside if not (4 <= r < 8 and 4 <= c < 8)]
    assert np.mean(hits) >= 0.9


def test_bbox_maps_part_of_the_scene_on_the_same_grid(scene_model, tmp_path):
    scene = tmp_path / "bands"
    write_scene(scene, TRUTH, seed=1, layout="tif", difficulty="simple")
    full = tmp_path / "full.tif"
    map_scene(scene, scene_model, full)
    # 2.4 km x 3.6 km from 1.2 km east and 1.2 km south of the scene's corner
    x0, y0 = 500000.0 + 1200, 5300040.0 - 1200
    bbox = f"{x0},{y0 - 2400},{x0 + 3600},{y0}"
    part = map_scene(scene, scene_model, tmp_path / "part.tif", "--bbox", bbox)
    with rasterio.open(tmp_path / "part.tif") as src, rasterio.open(full) as whole:
        assert (src.transform.c, src.transform.f) == (x0, y0)
        assert src.shape == (4, 6) and src.res == whole.res
    assert agreement(part, 60, offset=(120, 120)) >= 0.9


def test_a_band_stack_geotiff_is_mapped(scene_model, tmp_path):
    stack = tmp_path / "stack.tif"
    write_scene(stack, TRUTH, seed=1, layout="stack", difficulty="simple")
    top = map_scene(stack, scene_model, tmp_path / "map.tif", "--no-mask-clouds")
    assert agreement(top, 60) >= 0.9


@pytest.mark.bad_input
def test_a_band_stack_is_not_mapped_unmasked_by_default(
    trained_run, tmp_path, reported_errors, bad_input_row
):
    """Issue 47: clouds are masked by default (scene and region alike); a stack has no SCL,
    so it is refused naming --no-mask-clouds, never mapped unmasked as if masked. (The
    session's trained run: the module's 15-epoch model would be trained for this row alone
    in the heavy tier.)"""
    stack = tmp_path / "stack.tif"
    write_scene(stack, TRUTH, seed=1, layout="stack", difficulty="simple")
    out = tmp_path / "map.tif"
    argv = ["scene", str(stack), "--run-dir", str(trained_run), "--out", str(out)]
    code = map_main([*argv, "--no-progress"])
    assert code == 2 and not out.exists()
    line = reported_errors()[-1]
    assert str(stack) in line and "scene classification band (SCL)" in line, line
    bad_input_row("a band stack (no SCL), clouds masked by default", "bigearthnet-map scene",
                  code, "refused, one line naming it; mapped with --no-mask-clouds")  # fmt: skip


CHANGED = SceneTruth(
    size=720, block=240, border=36, classes=((16, 2, 5), (8, 11, 13), (14, 16, 18))
)


def test_change_map_finds_the_changed_block(scene_model, tmp_path):
    """Date B: the top-left block changed from class 0 to class 16. The change map codes
    it 0*100+16, the rest (mostly) no change; the table gives its area; B cropped to a
    bbox is put on A's grid, nodata outside it."""
    maps = {}
    for name, truth, extra in (("a", TRUTH, ()), ("b", CHANGED, ()), ("b_part", CHANGED, ())):
        scene = tmp_path / f"scene_{name}"
        write_scene(scene, truth, seed=4 if name == "a" else 5, layout="tif", difficulty="simple")
        if name == "b_part":
            extra = ("--bbox", "500000,5295240,504800,5300040")  # west 4.8 km, north 4.8 km
        map_scene(scene, scene_model, tmp_path / f"{name}.tif", *extra)
        maps[name] = tmp_path / f"{name}.tif"
    out = tmp_path / "change.tif"
    assert map_main(["change", str(maps["a"]), str(maps["b"]), "--out", str(out)]) == 0
    with rasterio.open(out) as src:
        codes = src.read(1)
        assert src.nodata == CHANGE_NODATA and src.res == (600.0, 600.0)
    labels = open_as_gis_user(out, nodata=CHANGE_NODATA)  # a COG with its QGIS style
    with rasterio.open(out) as src:
        assert (src.tags()["from_map"], src.tags()["to_map"]) == ("a.tif", "b.tif")
    assert labels[16] == "Urban fabric -> Coastal wetlands" and labels[NO_CHANGE] == "no change"
    block = [(r, c) for r, c, _ in interior_cells(codes.shape, 60) if r < 4 and c < 4]
    assert all(codes[r, c] == 16 for r, c in block), codes
    others = [codes[r, c] for r, c, _ in interior_cells(codes.shape, 60) if (r, c) not in block]
    assert np.mean([code == NO_CHANGE for code in others]) >= 0.9
    assert codes[0, 0] == CHANGE_NODATA  # the border: nodata in both
    rows = Path(f"{out}.transitions.csv").read_text().splitlines()
    assert rows[0] == "from_index,from_class,to_index,to_class,changed,cells,km2"
    assert any(row.startswith("0,Urban fabric,16,") and ",yes," in row for row in rows)
    assert (tmp_path / "change.png").stat().st_size > 10_000

    partial = tmp_path / "partial.tif"
    assert map_main(["change", str(maps["a"]), str(maps["b_part"]), "--out", str(partial)]) == 0
    with rasterio.open(partial) as src:
        codes_part = src.read(1)
    assert codes_part.shape == codes.shape
    assert (codes_part[:, 8:] == CHANGE_NODATA).all()  # east of B's 4.8 km
    np.testing.assert_array_equal(codes_part[:7, :7], codes[:7, :7])  # same windows

    sure = tmp_path / "sure.tif"
    argv = ["change", str(maps["a"]), str(maps["b"]), "--out", str(sure), "--min-prob", "1.0"]
    assert map_main(argv) == 0
    with rasterio.open(sure) as src:
        assert (src.read(1)[codes != CHANGE_NODATA] == UNCERTAIN).mean() > 0.5


def test_bad_change_input_is_one_line_exit_2(scene_model, tmp_path, reported_errors):
    scene = _copy_scene(tmp_path)
    a = tmp_path / "a.tif"
    map_scene(scene, scene_model, a)
    b = tmp_path / "b.tif"
    shutil.copy(a, b)
    with rasterio.open(b, "r+", IGNORE_COG_LAYOUT_BREAK="YES") as dst:
        dst.crs = rasterio.crs.CRS.from_epsg(32634)
    out = tmp_path / "change.tif"
    assert map_main(["change", str(a), str(b), "--out", str(out)]) == 2
    assert map_main(["change", str(a), str(scene / "B02.tif"), "--out", str(out)]) == 2
    assert map_main(["change", str(a), str(a), "--out", str(out), "--min-prob", "1.5"]) == 2
    first, second, third = reported_errors()
    assert "b.tif: CRS EPSG:32634 differs from" in first
    assert "B02.tif: not a map of bigearthnet-map scene" in second
    assert "--min-prob: must be in (0, 1]" in third
    assert not out.exists()


def _untagged_copy(scene: Path, out: Path) -> Path:
    """``scene``'s bands as plain GeoTIFFs without scale/offset (what gdal_translate of a
    product's JPEG 2000 gives): the files no longer say what their values are."""
    out.mkdir()
    for band in sorted(scene.rglob("*.jp2")) or sorted(scene.glob("*.tif")):
        name = band.stem.split("_")[-2] if band.suffix == ".jp2" else band.stem
        copy_dataset(band, out / f"{name}.tif", driver="GTiff")
        if name != "SCL":
            with rasterio.open(out / f"{name}.tif", "r+") as dst:
                dst.scales, dst.offsets = (1.0,), (0.0,)
    return out


@pytest.mark.bad_input
def test_band_geotiffs_converted_from_a_baseline_4_product_are_read_as_it_says(
    scene_model, tmp_path, reported_errors, bad_input_row
):
    """R03: band GeoTIFFs converted from an N0400 SAFE product were read 1000 too bright.
    Their files say nothing of the offset: refused, naming --boa-offset; a wrong value is
    refused where the metadata says otherwise; with the right one, the SAFE product's map."""
    safe = tmp_path / "S2B_MSIL2A_20200801T100559_N0400_R022_T33UXP_20200801T130116.SAFE"
    write_scene(safe, TRUTH, seed=2, layout="safe", difficulty="simple")
    converted = _untagged_copy(safe, tmp_path / "converted")
    out = tmp_path / "converted.tif"
    argv = ["scene", str(converted), "--run-dir", str(scene_model), "--out", str(out),
            "--no-progress"]  # fmt: skip
    code = map_main(argv)
    assert code == 2 and not out.exists()
    line = reported_errors()[-1]
    assert str(converted) in line and "--boa-offset -1000" in line, line
    assert map_main(["scene", str(safe), *argv[2:], "--boa-offset", "0"]) == 2
    assert "--boa-offset 0 contradicts its metadata" in reported_errors()[-1]
    fixed = map_scene(converted, scene_model, out, "--boa-offset", "-1000")
    reference = map_scene(safe, scene_model, tmp_path / "safe.tif")
    np.testing.assert_array_equal(fixed, reference)
    with rasterio.open(out) as src:
        assert src.tags()["radiometry"] == "DN -1000 (--boa-offset)"
    bad_input_row("band GeoTIFFs converted from an N0400 product (no offset tags)",
                  "bigearthnet-map scene", code,
                  "refused naming --boa-offset; with -1000 the SAFE map")  # fmt: skip


@pytest.mark.bad_input
def test_a_stack_named_the_earth_engine_way_is_read_by_its_names(
    scene_model, tmp_path, reported_errors, bad_input_row
):
    """R36: bands described B2, B8A, ... in another order were read in canonical order."""
    stack = tmp_path / "stack.tif"
    write_scene(stack, TRUTH, seed=1, layout="stack", difficulty="simple")
    shuffled = tmp_path / "ee.tif"
    with rasterio.open(stack) as src:
        profile, names = src.profile, list(src.descriptions)
        order = list(reversed(range(src.count)))
        with rasterio.open(shuffled, "w", **profile) as dst:
            for index, source in enumerate(order, start=1):
                dst.write(src.read(source + 1), index)
                dst.set_band_description(index, names[source].replace("B0", "B"))
            dst.scales, dst.offsets = (1e-4,) * dst.count, (0.0,) * dst.count
    plain = "--no-mask-clouds"  # a stack has no SCL
    reference = map_scene(stack, scene_model, tmp_path / "stack-map.tif", plain)
    np.testing.assert_array_equal(map_scene(shuffled, scene_model, tmp_path / "ee-map.tif", plain),
                                  reference)  # fmt: skip
    unnamed = tmp_path / "unnamed.tif"
    with rasterio.open(stack) as src, rasterio.open(unnamed, "w", **src.profile) as dst:
        dst.write(src.read())
    out = tmp_path / "unnamed-map.tif"
    argv = ["scene", str(unnamed), "--run-dir", str(scene_model), "--out", str(out)]
    code = map_main([*argv, "--no-progress", "--boa-offset", "0", "--no-mask-clouds"])
    assert code == 2 and not out.exists()
    assert "its bands are not named" in reported_errors()[-1]
    bad_input_row("a band stack described B2, B8A, ... in reverse order", "bigearthnet-map scene",
                  0, "read by its names: the canonical stack's map")  # fmt: skip
    bad_input_row("a band stack without band descriptions", "bigearthnet-map scene", code,
                  "refused: names --band-order, never an assumed order")  # fmt: skip


@pytest.mark.slow  # a fresh process: TensorFlow's pools are sized once per process
def test_the_command_sizes_its_thread_pools_before_the_model_loads(trained_run, tmp_path):
    """P9 ran faster than the model alone: map scene loaded its model (TensorFlow started)
    before sizing the pools, so it used every core whatever Slurm allotted its task. Any
    model shows it: the session's, not the module's (which the heavy tier would train for
    this test alone)."""
    scene = tmp_path / "bands"
    write_scene(scene, TRUTH, seed=1, layout="tif", difficulty="simple")
    argv = [sys.executable, "-m", "bigearthnet.cli.map", "scene", str(scene), "--run-dir",
            str(trained_run), "--out", str(tmp_path / "map.tif"), "--no-progress"]  # fmt: skip
    env = {**os.environ, "SLURM_CPUS_PER_TASK": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "already started" not in done.stderr, done.stderr[-2000:]
