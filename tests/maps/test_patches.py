"""bigearthnet-map: every patch lands on the pixel its GeoTIFF says, one CRS per file, each
file a class map a GIS opens as such (colour table, class names, QGIS style, COG)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pytest
import rasterio
from gis import assert_no_machine_paths, open_as_gis_user
from PIL import Image

from bigearthnet.cli import map as map_cli
from bigearthnet.core import constants
from bigearthnet.formats.class_map import NODATA, PROB_SCALE, check_complete, probabilities_path
from bigearthnet.formats.manifest import read_manifest
from bigearthnet.inference.trained_run import load_model
from bigearthnet.maps.patches import Place, plan_files
from bigearthnet.preprocessing.archive import list_patches, read_patch
from bigearthnet.preprocessing.assembly import assemble


def class_maps(out: Path) -> list[Path]:
    """The class maps of ``out`` (not their probabilities companions)."""
    return sorted(p for p in out.glob("*.tif") if not p.name.endswith(".probabilities.tif"))


def read_index(out: Path) -> dict[str, dict]:
    with open(out / "patches.csv", newline="") as f:
        return {row["name"]: row for row in csv.DictReader(f)}


@pytest.fixture(scope="module")
def real_map(trained_run: Path, real_v1: Path, tmp_path_factory) -> Path:
    """The map of the 11 real v1 samples, by the tiny model trained on synthetic v1."""
    out = tmp_path_factory.mktemp("map") / "real"
    argv = ["--run-dir", str(trained_run), "--archive", str(real_v1), "--out", str(out)]
    assert map_cli.main([*argv, "--no-progress"]) == 0
    return out


@pytest.fixture(scope="module")
def real_scores(trained_run: Path, real_v1: Path, shards_v1: Path) -> dict[str, np.ndarray]:
    """Scores of each real patch, predicted here independently of the map command."""
    loaded = load_model(trained_run, "best")
    resampling = read_manifest(shards_v1).resampling  # the run's training data
    patches = [read_patch(ref, "v1") for ref in list_patches(real_v1, "v1").patches]
    scores = loaded.predict(np.stack([assemble(p, resampling) for p in patches]))
    return {p.name: s for p, s in zip(patches, scores)}


def test_each_patch_lies_where_its_geotiff_says(real_map: Path, real_v1: Path, real_scores):
    index = read_index(real_map)
    assert sorted(index) == sorted(real_scores)  # 11 patches, each listed once
    for name, scores in real_scores.items():
        with rasterio.open(real_v1 / name / f"{name}_B02.tif") as band:
            crs, ulx, uly = band.crs, band.transform.c, band.transform.f
        with rasterio.open(real_map / index[name]["file"]) as tif:
            assert tif.crs == crs
            assert tif.res == (1200.0, 1200.0) and tif.nodata == NODATA
            row, col = tif.index(ulx + 600, uly - 600)  # the patch centre
            assert (row, col) == (int(index[name]["row"]), int(index[name]["col"]))
            assert tif.xy(row, col, offset="ul") == pytest.approx((ulx, uly))
            top = tif.read(1, window=((row, row + 1), (col, col + 1)))[0, 0]
        with rasterio.open(probabilities_path(real_map / index[name]["file"])) as companion:
            stored = companion.read(window=((row, row + 1), (col, col + 1)))[:, 0, 0]
        assert top == int(np.argmax(scores)) != NODATA
        np.testing.assert_allclose(stored, np.rint(scores * PROB_SCALE), atol=1)


def test_one_crs_per_file_and_no_extra_pixels(real_map: Path, real_v1: Path) -> None:
    index = read_index(real_map)
    crs_of_file: dict[str, set[str]] = {}
    for row in index.values():
        crs_of_file.setdefault(row["file"], set()).add(row["crs"])
    assert all(len(crs) == 1 for crs in crs_of_file.values())
    assert {next(iter(c)) for c in crs_of_file.values()} == {
        "EPSG:32629",
        "EPSG:32634",
        "EPSG:32635",
    }
    tifs = class_maps(real_map)
    assert sorted(t.name for t in tifs) == sorted(crs_of_file)
    valid = 0
    for tif_path in tifs:
        with rasterio.open(tif_path) as tif:
            top = tif.read(1)
            members = [r for r in index.values() if r["file"] == tif_path.name]
            # Origin = min ulx, max uly of the file's patches.
            assert tif.transform.c == min(float(r["ulx"]) for r in members)
            assert tif.transform.f == max(float(r["uly"]) for r in members)
        valid += int((top != NODATA).sum())
    assert valid == len(index)


def test_each_file_is_a_class_map_a_gis_opens(real_map: Path) -> None:
    """Issue 47: 20 uint8 bands in strips, no colour table nor names: QGIS showed an RGB mix.
    Now a class COG (palette, names, nodata), its QGIS style and probabilities companion."""
    for tif_path in class_maps(real_map):
        labels = open_as_gis_user(tif_path)
        assert [labels[v] for v in sorted(labels)] == list(constants.CLASSES_19)
        assert check_complete(tif_path) is None
        with rasterio.open(probabilities_path(tif_path)) as companion:
            assert companion.count == 19 and companion.nodata == NODATA
            assert companion.scales[0] == pytest.approx(1 / PROB_SCALE)


def test_the_maps_name_no_folder_of_this_machine(
    real_map: Path, trained_run: Path, tmp_path_factory
) -> None:
    """Issue 47: the maps' tags held the run's absolute paths; now relative to the maps."""
    assert_no_machine_paths(real_map, tmp_path_factory.getbasetemp())
    with rasterio.open(class_maps(real_map)[0]) as tif:
        run_dir = tif.tags()["run_dir"]
    assert not Path(run_dir).is_absolute() and (real_map / run_dir).resolve() == trained_run


def test_previews_are_valid_pngs(real_map: Path) -> None:
    for tif_path in class_maps(real_map):
        png = tif_path.with_suffix(".png")
        with Image.open(png) as image:
            assert image.format == "PNG" and min(image.size) > 100
            image.verify()


def test_plan_names_by_tile_and_layers_overlaps() -> None:
    tile = "S2A_MSIL2A_20170613T101031_N9999_R022_T33UUP"
    places = [
        Place(f"{tile}_75_43", "EPSG:32633", 300000.0, 5400000.0),
        Place(f"{tile}_76_43", "EPSG:32633", 301200.0, 5400000.0),
        Place("S2B_MSIL2A_20170701T101031_N9999_R022_T33UUP_75_43", "EPSG:32633", 300000, 5400000),
        Place("S2A_MSIL2A_20170617T113321_1_2", "EPSG:32633", 300600.0, 5400000.0),
        Place("S2A_MSIL2A_20170617T113321_3_4", "EPSG:32634", 300000.0, 5400000.0),
    ]
    files = {f.name: f for f in plan_files(places)}
    assert sorted(files) == [
        "EPSG32633_x0600_y0000",
        "EPSG32634_x0000_y0000",
        "T33UUP",
        "T33UUP_layer2",  # a second acquisition of the same place: no overwrite
    ]
    assert files["T33UUP"].shape == (1, 2) and list(files["T33UUP"].cols) == [0, 1]
    assert files["T33UUP_layer2"].indices.tolist() == [2]


def test_map_from_shards(trained_run: Path, shards_v1: Path, tmp_path: Path) -> None:
    argv = ["--run-dir", str(trained_run), "--shards", str(shards_v1), "--split", "test"]
    assert map_cli.main([*argv, "--out", str(tmp_path), "--no-progress"]) == 0
    index = read_index(tmp_path)
    assert len(index) == read_manifest(shards_v1).count("test")
    for tif_path in class_maps(tmp_path):
        with rasterio.open(tif_path) as tif:
            members = [r for r in index.values() if r["file"] == tif_path.name]
            assert {r["crs"] for r in members} == {tif.crs.to_string()}
            top = tif.read(1)
            for r in members:
                assert top[int(r["row"]), int(r["col"])] == int(r["top_class"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--out", "OUT"], "give --archive DIR or --shards DIR, one of them"),
        (["--archive", "NOWHERE", "--out", "OUT"], "archive folder does not exist"),
        (["--shards", "NOWHERE", "--out", "OUT"], "data folder does not exist"),
        (["--archive", "REAL", "--split", "test", "--out", "OUT"], "--split applies to"),
        (["--archive", "REAL", "--checkpoint", "latest-e9", "--out", "OUT"], "not a checkpoint"),
        (["--archive", "REAL", "--batch-size", "0", "--out", "OUT"], "--batch-size"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    argv, message, trained_run: Path, real_v1: Path, tmp_path: Path, reported_errors
) -> None:
    names = {"OUT": str(tmp_path / "out"), "NOWHERE": str(tmp_path / "x"), "REAL": str(real_v1)}
    argv = ["--run-dir", str(trained_run), *[names.get(a, a) for a in argv]]
    assert map_cli.main(argv) == 2
    err = reported_errors()
    assert len(err) == 1 and "bigearthnet-map: error: " in err[0] and message in err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.bad_input
def test_a_rerun_replaces_the_map_folder_whole_and_only_with_overwrite(
    real_map: Path, trained_run: Path, real_v1: Path, tmp_path: Path, reported_errors, bad_input_row
) -> None:
    """The maps were written into --out in place: a rerun left an earlier run's maps among
    its own, looking like one (issue #48: every command publishes its folder whole)."""
    out = tmp_path / "maps"
    shutil.copytree(real_map, out)
    stale = out / "EPSG99999_x0000_y0000.tif"  # a map only the earlier run made
    shutil.copy(class_maps(out)[0], stale)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    argv = ["--run-dir", str(trained_run), "--archive", str(real_v1), "--out", str(out)]
    code = map_cli.main([*argv, "--no-progress"])
    assert code == 2 and {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert f"{out}: exists and is not empty (--overwrite replaces it)" in reported_errors()[-1]
    assert map_cli.main([*argv, "--no-progress", "--overwrite"]) == 0
    assert [p.name for p in class_maps(out)] == [p.name for p in class_maps(real_map)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["maps"]
    bad_input_row("a rerun into an earlier map folder", "bigearthnet-map --out DIR", code,
                  "refused before a patch is read; with --overwrite replaced whole: none of "
                  "the earlier run's maps left")  # fmt: skip


def test_run_without_checkpoint(
    tmp_path: Path, real_v1: Path, trained_run: Path, reported_errors
) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text((trained_run / "config.yaml").read_text())
    argv = ["--run-dir", str(tmp_path / "run"), "--archive", str(real_v1)]
    assert map_cli.main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert any("no 'best' checkpoint" in line for line in reported_errors())
