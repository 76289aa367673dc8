"""bigearthnet-map region given the inputs real users have (rows of `make bad-input`): scenes
whose folders share a name, an output folder that holds something else, a model retrained in
its folder, a damaged or partial scene map, a rerun with other periods, a spreadsheet's CSV
and options out of range. A map is reused only when made as this run would make it; the
output folder is the command's own; options are refused before the first scene is mapped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import train_argv
from region_cli import map_region, scene_maps, scenes_of

import train
from bigearthnet.core.util import read_csv
from bigearthnet.formats import region_folder
from bigearthnet.formats.class_map import probabilities_path
from bigearthnet.formats.qgis_style import style_path
from bigearthnet.synthetic.region import read_truth

pytestmark = [pytest.mark.bad_input, pytest.mark.xdist_group("region-inputs")]


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_scenes_whose_folders_share_a_name_get_a_map_each(
    simple_region, trained_run, tmp_path, bad_input_row
) -> None:
    """R01: folders laid out DATE/TILE (every tile folder named alike on each date)."""
    rows = ["path,date,tile"]
    for scene in map(Path, scenes_of(simple_region)):
        date = scene.name.split("_")[2][:8]
        day = f"{date[:4]}-{date[4:6]}-{date[6:]}"
        tile = scene.name.split("_")[5]
        shutil.copytree(scene, tmp_path / "bydate" / day / tile)
        rows.append(f"bydate/{day}/{tile},{day},{tile}")
    (tmp_path / "scenes.csv").write_text("\ufeff" + "\n".join(rows) + "\n")  # a BOM, as R12
    out = tmp_path / "out"
    code = map_region(out, trained_run, extra=("--scenes-csv", str(tmp_path / "scenes.csv")))
    assert code == 0
    maps, spec = scene_maps(out), read_truth(simple_region)["spec"]
    assert len(maps) == len(rows) - 1 == spec["tiles"] * spec["dates"]
    record = json.loads((out / region_folder.CONSISTENCY).read_text())
    assert len(record["scenes"]) == len(maps) and len(record["periods"]) == spec["dates"]
    # Each scene's reflectance offset, and the evidence, in the scene table.
    assert {s["radiometry"] for s in record["scenes"]} == {"DN +0 (scale/offset of the bands)"}
    bad_input_row("scene folders DATE/TILE sharing names, a CSV with a BOM",
                  "bigearthnet-map region --scenes-csv", code,
                  "a map per scene, each period its own dates")  # fmt: skip


@pytest.mark.parametrize("kind", ["a folder of other files", "a file"])
def test_an_out_that_is_not_a_region_folder_is_refused(
    simple_region, trained_run, tmp_path, kind, reported_errors, bad_input_row
) -> None:
    """R07, R09: nothing of it is deleted or overwritten."""
    out = tmp_path / "myproject"
    if kind == "a file":
        out.write_text("notes\n")
    else:
        (out / "stac").mkdir(parents=True)
        (out / "stac" / "catalog.json").write_text("{}")
        (out / "areas.csv").write_text("mine\n")
    before = out.read_bytes() if kind == "a file" else _tree(out)
    code = map_region(out, trained_run, *scenes_of(simple_region))
    assert code == 2
    assert (out.read_bytes() if kind == "a file" else _tree(out)) == before
    line = reported_errors()[-1]
    assert str(out) in line and "--out" in line and "\n" not in line
    bad_input_row(f"--out naming {kind}", "bigearthnet-map region", code,
                  "refused, nothing in it touched")  # fmt: skip


def test_a_model_retrained_in_its_folder_remakes_every_map(
    simple_region, trained_run, shards_v1, tmp_path, rank_log, bad_input_row
) -> None:
    """R05: the same run folder and checkpoint names, other weights."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    out = tmp_path / "out"
    assert map_region(out, run, *scenes_of(simple_region)) == 0
    before = scene_maps(out)
    assert train.main(train_argv(shards_v1, run, 6, "--no-resume", "--seed", "2")) == 0
    rank_log.clear()
    code = map_region(out, run, *scenes_of(simple_region))
    assert code == 0
    after = scene_maps(out)
    assert after.keys() == before.keys()
    assert all(after[p] != before[p] for p in before), "a map of the old weights was reused"
    remade = [r.getMessage() for r in rank_log.records if "remapping" in r.getMessage()]
    assert len(remade) == len(before) and all("weights_sha256" in m for m in remade)
    bad_input_row("the model retrained in its run folder (--no-resume)",
                  "bigearthnet-map region (rerun)", code,
                  "every scene map remade: the weights' digest differs")  # fmt: skip


@pytest.mark.parametrize("damage", ["truncated", "deleted", "style deleted"])
def test_a_damaged_scene_map_is_remade(
    simple_region, trained_run, tmp_path, damage, rank_log, bad_input_row
) -> None:
    """R27: a truncated probabilities companion is never reused; nor a map without its QGIS
    style (made before maps had one, or the style lost)."""
    out = tmp_path / "out"
    assert map_region(out, trained_run, *scenes_of(simple_region)) == 0
    victim = sorted(scene_maps(out))[1]
    companion = probabilities_path(victim)
    if damage == "truncated":
        companion.write_bytes(companion.read_bytes()[:400])
    elif damage == "deleted":
        companion.unlink()
    else:
        style_path(victim).unlink()
    record = (out / region_folder.CONSISTENCY).read_bytes()
    rank_log.clear()
    code = map_region(out, trained_run, *scenes_of(simple_region))
    assert code == 0
    assert (
        region_folder.is_complete(out) and (out / region_folder.CONSISTENCY).read_bytes() == record
    )
    assert any(
        str(victim) in r.getMessage() for r in rank_log.records if "remapping" in r.getMessage()
    )
    what = "QGIS style deleted" if damage == "style deleted" else f"probabilities {damage}"
    bad_input_row(f"a scene map's {what}", "bigearthnet-map region (rerun)",
                  code, "that map remade, the products as before")  # fmt: skip


def test_a_rerun_with_other_periods_leaves_none_of_the_earlier(
    simple_region, trained_run, tmp_path, bad_input_row
) -> None:
    """R04: months, then seasons: no monthly map beside the seasonal ones."""
    out = tmp_path / "out"
    assert map_region(out, trained_run, *scenes_of(simple_region), extra=("--period", "month")) == 0
    code = map_region(out, trained_run, *scenes_of(simple_region), extra=("--period", "season"))
    assert code == 0
    record = json.loads((out / region_folder.CONSISTENCY).read_text())
    for folder in (region_folder.PERIODS, region_folder.CONSISTENT):
        labels = {p.name.split(".")[0] for p in (out / folder).glob("*.tif")}
        assert labels == set(record["periods"]), (folder, labels)
    items = {p.parent.name for p in (out / region_folder.STAC).glob("*/*.json")}
    assert items == set(record["periods"])
    assert not list(out.glob(f"{region_folder.STAGING_PREFIX}*"))
    bad_input_row("a rerun with --period season after month", "bigearthnet-map region",
                  code, "every product replaced; none of the earlier periods left")  # fmt: skip


def _observed_km2(out: Path) -> dict[str, float]:
    """km² of every raw period in areas.csv."""
    totals: dict[str, float] = {}
    for row in read_csv(out / "areas.csv"):
        if row["series"] == "raw":
            totals[row["period"]] = totals.get(row["period"], 0.0) + float(row["km2"])
    return totals


def test_areas_are_ground_areas_whatever_the_crs(
    simple_region, trained_run, tmp_path, bad_input_row
) -> None:
    """R23: in Web Mercator, areas.csv was 2.35x too large (the nominal cell times a count).
    A rerun into the same folder with another --crs reuses the scene maps, remakes the rest."""
    out = tmp_path / "out"
    assert map_region(out, trained_run, *scenes_of(simple_region), extra=("--cell", "60")) == 0
    laea = _observed_km2(out)
    maps = scene_maps(out)
    code = map_region(out, trained_run, *scenes_of(simple_region),
                   extra=("--cell", "60", "--crs", "EPSG:3857"))  # fmt: skip
    assert code == 0
    assert scene_maps(out) == maps  # the scene maps do not depend on the grid
    mercator = _observed_km2(out)
    assert mercator.keys() == laea.keys()
    for period, km2 in laea.items():  # the same ground; cells on the edges differ
        assert mercator[period] == pytest.approx(km2, rel=0.1), period
    record = json.loads((out / region_folder.CONSISTENCY).read_text())
    assert record["grid"]["crs"] == "EPSG:3857"
    bad_input_row("--crs EPSG:3857 (not equal-area)", "bigearthnet-map region", code,
                  "areas.csv in ground km² (each cell's areal scale), as in LAEA")  # fmt: skip


@pytest.mark.parametrize(
    "flag, value, needle",
    [
        ("--batch-size", "-1", "positive integer"),
        ("--batch-size", "0", "positive integer"),
        ("--cell", "inf", "positive multiple of 10 m"),
        ("--cell", "nan", "positive multiple of 10 m"),
        ("--cell", "-3", "positive multiple of 10 m"),
        ("--cell", "0", "positive multiple of 10 m"),
        ("--cell", "15", "positive multiple of 10 m"),
        ("--cell", "-20", "positive multiple of 10 m"),
        ("--block-size", "0", "positive integer"),
        ("--block-size", "1000", "multiple of 256"),
        ("--block-size", "32768", "multiple of 256"),
        ("--blocks-only", "3/2", "K/N"),
        ("--blocks-only", "0/2", "K/N"),
        ("--blocks-only", "half", "K/N"),
        ("--persistence", "1", "inside (0, 1)"),
        ("--crs", "EPSG:4326", "geographic"),
        ("--crs", "EPSG:99999999", "not a CRS"),
        ("--max-gap-days", "0", "positive integer"),
        ("--max-gap-days", "nan", "invalid"),
    ],
)
def test_options_out_of_range_are_refused_before_mapping(
    simple_region, trained_run, tmp_path, flag, value, needle, reported_errors, bad_input_row
) -> None:
    """R21, R22, R25, R26: at parse time, nothing made (before: a traceback after mapping
    every scene, or empty maps that a rerun reused)."""
    out = tmp_path / "out"
    code = map_region(out, trained_run, *scenes_of(simple_region), extra=(flag, value))
    assert code == 2 and not out.exists()
    line = reported_errors()[-1]
    assert flag in line and needle in line, line
    bad_input_row(f"`{flag} {value}`", "bigearthnet-map region", code,
                  "refused when parsed; no folder made")  # fmt: skip


def test_a_stray_scene_of_another_continent_is_refused_before_mapping(
    simple_region, trained_run, tmp_path, reported_errors, bad_input_row
) -> None:
    """R18: a tile of UTM zone 20 south (Argentina) among the region's, under --crs EPSG:3035
    (before: a grid of 13,506 x 10,846 cells and ~25 GB)."""
    import rasterio
    from rasterio.crs import CRS

    first = Path(scenes_of(simple_region)[0])
    stray = tmp_path / first.name.replace("T32UQU", "T20HNH")
    shutil.copytree(first, stray)
    for band in stray.glob("*.tif"):
        with rasterio.open(band, "r+") as dst:
            dst.crs = CRS.from_epsg(32720)
    out = tmp_path / "out"
    code = map_region(out, trained_run, *scenes_of(simple_region), str(stray))
    assert code == 2 and not list(out.glob(f"{region_folder.SCENES}/*.tif"))
    line = reported_errors()[-1]
    assert str(stray) in line and "area of use of --crs EPSG:3035" in line, line
    bad_input_row("a stray scene of another continent (T20HNH)", "bigearthnet-map region",
                  code, "refused before mapping, the scene named")  # fmt: skip


def test_an_l1c_product_in_the_csv_is_refused_before_mapping(
    simple_region, trained_run, tmp_path, reported_errors, bad_input_row
) -> None:
    """R29, R30: a CSV names any folder; an L1C product in it was mapped as L2A."""
    scenes = [Path(p) for p in scenes_of(simple_region)]
    l1c = tmp_path / "T32UQU-march-toa"
    shutil.copytree(scenes[0], l1c)
    (l1c / "MTD_MSIL1C.xml").write_text("<n1:Level-1C_User_Product/>")
    rows = ["path,date,tile", f"{l1c},2020-03-15,T32UQU"]
    for scene in scenes[1:]:
        date, tile = scene.name.split("_")[2][:8], scene.name.split("_")[5]
        rows.append(f"{scene},{date[:4]}-{date[4:6]}-{date[6:]},{tile}")
    (tmp_path / "scenes.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    code = map_region(out, trained_run, extra=("--scenes-csv", str(tmp_path / "scenes.csv")))
    assert code == 2 and not list(out.glob(f"{region_folder.SCENES}/*.tif"))
    line = reported_errors()[-1]
    assert str(l1c) in line and "Level-1C" in line, line
    bad_input_row("an L1C product (MTD_MSIL1C.xml) listed in --scenes-csv",
                  "bigearthnet-map region", code,
                  "refused before mapping, the scene named")  # fmt: skip


def test_a_scene_far_from_the_others_is_kept_when_the_gap_allows_it(
    simple_region, trained_run, tmp_path, bad_input_row
) -> None:
    """R20: a scene more than 730 days from every other was dropped, with no override."""
    first = Path(scenes_of(simple_region)[0])
    late = tmp_path / first.name.replace("20200315", "20230315")
    shutil.copytree(first, late)
    out = tmp_path / "out"
    assert map_region(out, trained_run, *scenes_of(simple_region), str(late)) == 0
    record = json.loads((out / region_folder.CONSISTENCY).read_text())
    # Paths relative to the region folder (issue 47: no folder of this machine).
    assert [(out / s["path"]).resolve() for s in record["skipped"]] == [late.resolve()]
    assert "--max-gap-days" in record["skipped"][0]["reason"]
    code = map_region(out, trained_run, *scenes_of(simple_region), str(late),
                   extra=("--max-gap-days", "1200"))  # fmt: skip
    assert code == 0
    record = json.loads((out / region_folder.CONSISTENCY).read_text())
    assert record["skipped"] == []
    assert late.resolve() in [(out / s["path"]).resolve() for s in record["scenes"]]
    bad_input_row("a scene 3 years after the others, then `--max-gap-days 1200`",
                  "bigearthnet-map region", code,
                  "skipped naming --max-gap-days; kept with it")  # fmt: skip


def test_a_scene_whose_offset_is_undecidable_is_refused_before_mapping(
    simple_region, trained_run, tmp_path, reported_errors, bad_input_row
) -> None:
    """R03 in a region: band GeoTIFFs without scale/offset (cut out of a product) among
    the region's scenes: exit 2 naming the scene and --boa-offset, no scene mapped."""
    import rasterio

    scenes = scenes_of(simple_region)
    untagged = tmp_path / Path(scenes[0]).name
    shutil.copytree(scenes[0], untagged)
    for band in untagged.glob("B*.tif"):
        with rasterio.open(band, "r+") as dst:
            dst.scales, dst.offsets = (1.0,), (0.0,)
    out = tmp_path / "out"
    code = map_region(out, trained_run, *scenes[1:], str(untagged))
    assert code == 2 and not list(out.glob(f"{region_folder.SCENES}/*.tif"))
    line = reported_errors()[-1]
    assert str(untagged) in line and "--boa-offset" in line, line
    bad_input_row("a scene of band GeoTIFFs without scale/offset", "bigearthnet-map region",
                  code, "refused before mapping, naming the scene and --boa-offset")  # fmt: skip


def test_a_scenes_csv_without_tiles_takes_each_scenes_tile(
    simple_region, trained_run, tmp_path, bad_input_row
) -> None:
    """D11: rows path,date for folders laid out TILE/DATE: the folder's name became the
    tile (two "tiles" named by a date), and half the region was skipped as second scenes.
    The tile is what the scene states, else the MGRS tile its folders are named by."""
    rows = ["path,date"]
    for scene in map(Path, scenes_of(simple_region)):
        date = scene.name.split("_")[2][:8]
        day = f"{date[:4]}-{date[4:6]}-{date[6:]}"
        shutil.copytree(scene, tmp_path / "bytile" / scene.name.split("_")[5] / day)
        rows.append(f"bytile/{scene.name.split('_')[5]}/{day},{day}")
    (tmp_path / "scenes.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    code = map_region(out, trained_run, extra=("--scenes-csv", str(tmp_path / "scenes.csv")))
    assert code == 0
    record = json.loads((out / region_folder.CONSISTENCY).read_text())
    assert record["skipped"] == [] and len(scene_maps(out)) == len(scenes_of(simple_region))
    assert {s["tile"] for s in record["scenes"]} == {"32UQU", "33UUP"}
    bad_input_row("`--scenes-csv` rows path,date of TILE/DATE folders (no tile column)",
                  "bigearthnet-map region", code,
                  "every scene mapped, its tile from its folder's MGRS name")  # fmt: skip


@pytest.mark.parametrize(
    "case, row, needle",
    [
        ("a tile that is no MGRS tile", "{scene},2020-03-15,Paris", "'Paris' is not an MGRS"),
        ("no tile anywhere", "bydate/2020-03-15,2020-03-15", "no tile column, and"),
        ("a date before Sentinel-2", "{scene},2014-12-31,32UQU", "outside Sentinel-2's years"),
    ],
)
def test_a_scenes_csv_row_without_a_real_tile_or_date_is_refused(
    simple_region, trained_run, tmp_path, case, row, needle, reported_errors, bad_input_row
) -> None:
    """D11 and the tiles and dates out of range: named by its row, before any scene is
    mapped."""
    first = scenes_of(simple_region)[0]
    shutil.copytree(first, tmp_path / "bydate" / "2020-03-15")
    lines = [f"{scene},2020-04-14,33UUP" for scene in scenes_of(simple_region)[1:3]]
    lines.insert(1, row.format(scene=first))
    (tmp_path / "scenes.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    code = map_region(out, trained_run, extra=("--scenes-csv", str(tmp_path / "scenes.csv")))
    assert code == 2 and not out.exists()
    line = reported_errors()[-1]
    assert "scenes.csv: row 2:" in line and needle in line, line
    bad_input_row(f"`--scenes-csv`: {case}", "bigearthnet-map region", code,
                  "refused naming the row, before mapping")  # fmt: skip
