"""The reflectance offset against the products from the wild (rows of `make bad-input`): real
STAC items of Earth Search, Planetary Computer and CDSE over the synthetic scene give the
SAFE product's map; Earth Search's flag outranks raster:bands (D01) and the pixels overrule
a wrong flag (earth-search#71); float reflectance is refused (D02); an L1C collection is
refused (D26); silent pixels leave the metadata standing; a region keeps both readings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import rasterio
import zarr
from helpers import one_line
from test_stac_item import ITEMS, real_item, write_real_items

from bigearthnet.cli.map import main as map_main
from bigearthnet.formats.region_folder import read_consistency
from bigearthnet.synthetic.scene import SceneTruth, render_scene, write_scene
from bigearthnet.synthetic.scene_forms import localise_item

pytestmark = [
    pytest.mark.bad_input,
    pytest.mark.xdist_group("radiometry-bad-input"),
    pytest.mark.filterwarnings("ignore::UserWarning"),  # pystac migrating c1's storage fields
]
TRUTH = SceneTruth(size=480, block=240, border=24, classes=((0, 8), (11, 16)),
                   cloud=(60, 300, 180, 420))  # fmt: skip
FLAG_FALSE = "earth_search_l2a_flag_false"


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> dict[str, Path]:
    return write_real_items(tmp_path_factory.mktemp("radiometry-bad"), TRUTH)


@pytest.fixture(scope="module")
def safe_map(scenes, trained_run, tmp_path_factory) -> tuple[np.ndarray, np.ndarray]:
    out = tmp_path_factory.mktemp("safe-map") / "safe.tif"
    assert _map(scenes["safe"], trained_run, out) == 0
    return _read(out)


def _map(scene: Path, run: Path, out: Path, *extra: str, masked: bool = True) -> int:
    """Map ``scene``; clouds masked by SCL as by default (``masked``: float stacks and
    folders have none)."""
    argv = ["scene", str(scene), "--run-dir", str(run), "--out", str(out), "--no-progress",
            *(() if masked else ("--no-mask-clouds",)), *extra]  # fmt: skip
    return map_main(argv)


def _read(out: Path) -> tuple[np.ndarray, np.ndarray]:
    with rasterio.open(out) as src, rasterio.open(f"{out}.probabilities.tif") as probs:
        return src.read(1), probs.read().astype(int)


def _tags(out: Path) -> dict[str, str]:
    with rasterio.open(out) as src:
        return src.tags()


def _same_map(out: Path, reference: tuple[np.ndarray, np.ndarray]) -> None:
    """The values read equal the SAFE's bit for bit (tests/maps/test_stac_item.py), so the
    windows and the model's inputs do: the top class is the same everywhere, and a
    probability may differ by one step of 1/250 only where a BLAS thread split rounds it
    the other way."""
    classes, probabilities = _read(out)
    np.testing.assert_array_equal(classes, reference[0])
    assert np.abs(probabilities - reference[1]).max() <= 1


@pytest.mark.parametrize("name", ITEMS)
def test_a_real_item_gives_the_safe_map(name, scenes, safe_map, trained_run, tmp_path,
                                        rank_log, bad_input_row) -> None:  # fmt: skip
    """Each catalog's real metadata over its way of storing the scene: the SAFE's map, and
    the decision with its evidence in the tags. earth-search#71's item (the flag false on
    harmonised COGs) is overruled by its pixels, with one warning naming both readings."""
    out = tmp_path / "map.tif"
    code = _map(scenes[name], trained_run, out)
    assert code == 0
    _same_map(out, safe_map)
    _, applied, won = ITEMS[name]
    tags = _tags(out)
    assert (tags["radiometry"], tags["radiometry_won"]) == (applied, won)
    warned = [r.getMessage() for r in rank_log.records if "its pixels say" in r.getMessage()]
    assert len(warned) == (1 if won == "pixels" else 0), warned
    if won == "pixels":
        assert tags["radiometry_metadata"].startswith("DN -1000 (earthsearch:boa_offset_applied")
        assert tags["radiometry_pixels"].startswith("DN +0: 1st percentiles B02")
    verdicts = {
        "earth_search_l2a_flag_true": "D01: DN +0 by the flag, over raster:bands -0.1",
        "earth_search_l2a_flag_false": "the pixels overrule the flag (DN +0); both readings in "
        "the tags; one warning",
        "earth_search_c1_l2a": "DN -1000 by raster:bands",
        "planetary_computer_l2a": "DN +0 by baseline 02.12",
        "cdse_l2a_stac_1_1": "D21: keys B02_10m..., raster:scale/offset on the asset: DN -1000",
    }
    bad_input_row(f"real item metadata: {name.replace('_', ' ')}", "bigearthnet-map scene",
                  code, f"the SAFE product's map; {verdicts[name]}")  # fmt: skip


def test_boa_offset_against_the_flag(scenes, trained_run, tmp_path, reported_errors,
                                     bad_input_row) -> None:  # fmt: skip
    """D01's way out was refused: --boa-offset 0 on a flag-true item now agrees; -1000
    contradicts the flag and the pixels, and is refused."""
    item = scenes["earth_search_l2a_flag_true"]
    assert _map(item, trained_run, tmp_path / "zero.tif", "--boa-offset", "0") == 0
    out = tmp_path / "minus.tif"
    code = _map(item, trained_run, out, "--boa-offset", "-1000")
    assert code == 2 and not out.exists()
    one_line(
        reported_errors(),
        item.name,
        "--boa-offset -1000 contradicts its metadata",
        "earthsearch:boa_offset_applied of the STAC item: true",
        "pixels DN +0",
    )
    bad_input_row(
        "`--boa-offset -1000` on an Earth Search item whose flag says applied",
        "bigearthnet-map scene",
        code,
        "refused, naming the flag and the pixels; `--boa-offset 0` agrees (exit 0)",
    )


def test_silent_pixels_leave_the_metadata_standing(scenes, trained_run, tmp_path,
                                                   bad_input_row) -> None:  # fmt: skip
    """Snow (bright in blue and red) under earth-search#71's wrong flag, and a one-window
    bbox of the dark scene: the pixels cannot tell, the metadata's DN -1000 stands and the
    tags say the pixels were silent."""
    bands = render_scene(TRUTH, 4, "simple")
    rng = np.random.default_rng(0)
    for band, image in bands.items():
        if band != "SCL":
            snow = 7000 if band not in ("B11", "B12") else 900  # snow is dark in SWIR only
            image[image > 0] = snow + rng.integers(-200, 200, int((image > 0).sum()))
    snow_item = localise_item(real_item(FLAG_FALSE), bands, tmp_path / "snow" / "items",
                              plus_offset=False)  # fmt: skip
    out = tmp_path / "snow.tif"
    code = _map(snow_item, trained_run, out)
    assert code == 0
    tags = _tags(out)
    assert tags["radiometry_won"] == "metadata" and tags["radiometry"].startswith("DN -1000")
    assert tags["radiometry_pixels"].startswith("silent: 1st percentiles")
    bad_input_row(
        "snow-only scene, Earth Search flag false on harmonised COGs",
        "bigearthnet-map scene",
        code,
        "the pixels are silent: the metadata's DN -1000 stands, tags say silent",
    )
    item = json.loads(scenes[FLAG_FALSE].read_text())
    _, _, x0, _, _, y0 = item["assets"]["blue"]["proj:transform"][:6]
    bbox = f"{x0 + 2400},{y0 - 3600},{x0 + 3600},{y0 - 2400}"  # one window of the dark class
    out = tmp_path / "tiny.tif"
    code = _map(scenes[FLAG_FALSE], trained_run, out, f"--bbox={bbox}")
    assert code == 0
    tags = _tags(out)
    assert tags["radiometry_won"] == "metadata"
    assert tags["radiometry_pixels"].startswith("silent: 14,400 valid px sampled")
    bad_input_row(
        "a one-window `--bbox` of earth-search#71's item",
        "bigearthnet-map scene",
        code,
        "too few pixels to tell: silent, the metadata stand",
    )


def _float_stack(scenes, tmp_path: Path) -> Path:
    stack = write_scene(tmp_path / "stack.tif", TRUTH, seed=4, layout="stack",
                        difficulty="simple")  # fmt: skip
    out = tmp_path / "float_stack.tif"
    with rasterio.open(stack) as src:
        profile = dict(src.profile, dtype="float32", nodata=None)
        with rasterio.open(out, "w", **profile) as dst:
            dst.write((src.read() / 10000).astype(np.float32))
            dst.descriptions = src.descriptions
    return out


def _float_folder(scenes, tmp_path: Path) -> Path:
    folder = write_scene(tmp_path / "float_tifs", TRUTH, seed=4, layout="tif",
                         difficulty="simple")  # fmt: skip
    for band in folder.glob("B*.tif"):
        with rasterio.open(band) as src:
            profile, values = dict(src.profile, dtype="float32", nodata=None), src.read()
        with rasterio.open(band, "w", **profile) as dst:
            dst.write((values / 10000).astype(np.float32))
    return folder


def _decoded_zarr(scenes, tmp_path: Path) -> Path:
    """An EOPF product saved decoded (xarray's default): float reflectance, no scale_factor."""
    product = write_scene(tmp_path / "zarr", TRUTH, seed=4, layout="zarr", difficulty="simple")
    for res in (10, 20, 60):
        group = zarr.open_group(product / "measurements" / "reflectance" / f"r{res}m", mode="r+")
        for name in [n for n in group.array_keys() if n not in ("x", "y")]:
            stored = group[name][:]
            decoded = (stored * 1e-4 - 0.1).astype(np.float32)
            del group[name]
            group.create_array(name, data=decoded, dimension_names=("y", "x"))
    return product


@pytest.mark.parametrize("form", ["band stack", "band GeoTIFFs", "EOPF Zarr saved decoded"])
def test_float_reflectance_is_refused(form, scenes, trained_run, tmp_path, reported_errors,
                                      bad_input_row) -> None:  # fmt: skip
    """D02: float32 reflectance 0-1 was read as DN (a map of garbage, exit 0), and the
    stack's refusal advised the --boa-offset 0 that produced it."""
    make = {"band stack": _float_stack, "band GeoTIFFs": _float_folder,
            "EOPF Zarr saved decoded": _decoded_zarr}[form]  # fmt: skip
    scene = make(scenes, tmp_path)
    for extra in ((), ("--boa-offset", "0")):
        out = tmp_path / "map.tif"
        code = _map(scene, trained_run, out, *extra, masked=False)
        assert code == 2 and not out.exists()
        line = one_line(reported_errors(), "band B", "holds float32 values", "10,000 x")
        assert "--boa-offset" not in line, line
    bad_input_row(f"float32 reflectance 0-1: {form} (also with `--boa-offset 0`)",
                  "bigearthnet-map scene", code,
                  "refused in one line: convert to DN = 10,000 x reflectance; never advises "
                  "`--boa-offset`")  # fmt: skip


def test_an_item_of_the_l1c_collection_is_refused(
    scenes, trained_run, tmp_path, reported_errors, bad_input_row
) -> None:
    """D26: collection sentinel-2-l1c, no product type, an L2A-looking id."""
    item = json.loads(scenes["earth_search_l2a_flag_true"].read_text())
    item["collection"] = "sentinel-2-l1c"
    del item["properties"]["s2:product_type"]
    path = scenes["earth_search_l2a_flag_true"].with_name("l1c.json")
    path.write_text(json.dumps(item))
    out = tmp_path / "map.tif"
    code = _map(path, trained_run, out)
    path.unlink()
    assert code == 2 and not out.exists()
    one_line(reported_errors(), "l1c.json", "a Level-1C product")
    bad_input_row(
        "a STAC item of the `sentinel-2-l1c` collection (no product type)",
        "bigearthnet-map scene",
        code,
        "refused as Level-1C",
    )


def test_a_region_keeps_both_readings(scenes, trained_run, tmp_path, capsys, rank_log,
                                      bad_input_row) -> None:  # fmt: skip
    """Earth Search's flag-true item and, ten days later on its tile, the same pipeline's item
    whose flag says false over harmonised COGs (earth-search#71): the scene table, the STAC
    items and the summary keep both readings and say the pixels won; a rerun reuses both
    maps (and warns again, once); the flag set right changes the readings: that map alone is
    remade."""
    first = scenes["earth_search_l2a_flag_true"]
    item = json.loads(scenes[FLAG_FALSE].read_text())
    for asset in item["assets"].values():  # absolute: the item file moves
        asset["href"] = str((scenes[FLAG_FALSE].parent / asset["href"]).resolve())
    item["id"], item["properties"]["datetime"] = "S2A_39QTA_20230708_0_L2A", "2023-07-08T07:24:41Z"
    later = tmp_path / "later.json"
    later.write_text(json.dumps(item))
    out = tmp_path / "series"
    argv = ["region", str(first), str(later), "--run-dir", str(trained_run), "--out", str(out),
            "--period", "scene-date", "--no-progress", "--crs", "EPSG:32639"]  # fmt: skip
    code = map_main(argv)
    assert code == 0
    record = read_consistency(out)
    won = {Path(entry.path).name: entry.radiometry_won for entry in record.scenes}
    assert won == {first.name: "metadata", "later.json": "pixels"}
    (note,) = record.radiometry_notes  # the scene as the record names it: relative
    assert note.startswith("../later.json: its pixels say DN +0")
    printed = capsys.readouterr().out
    assert "[region] radiometry: ../later.json: its pixels say DN +0" in printed
    listed = [s for p in (out / "stac").glob("*/*.json")
              for s in json.loads(p.read_text())["properties"]["bigearthnet:scenes"]]  # fmt: skip
    assert {s["radiometry_won"] for s in listed} == {"metadata", "pixels"}
    maps = {p: p.stat().st_mtime_ns for p in (out / "scenes").glob("*[0-9a-f].tif")}
    rank_log.clear()
    assert map_main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in maps} == maps  # both reused
    assert sum("its pixels say" in r.getMessage() for r in rank_log.records) == 1
    item["properties"]["earthsearch:boa_offset_applied"] = True  # the flag set right
    later.write_text(json.dumps(item))
    assert map_main(argv) == 0
    changed = [p for p, stamp in maps.items() if p.stat().st_mtime_ns != stamp]
    assert len(changed) == 1 and "20230708" in changed[0].name
    assert read_consistency(out).radiometry_notes == ()
    bad_input_row("a region with an item whose metadata and pixels disagree "
                  "(earth-search#71), rerun, then its flag set right", "bigearthnet-map region",
                  code, "pixels win; both readings in consistency.json, STAC and the summary; "
                  "reused on a rerun, remade when the readings change")  # fmt: skip
