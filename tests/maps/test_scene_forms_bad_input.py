"""Bad Zarr products and STAC items (rows of `make bad-input`): one line naming the product,
array, item or asset and what is wrong, exit 2, no map written, no input touched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import rasterio
import zarr
from helpers import copy_scene, declare_nodata

from bigearthnet.cli.map import main as map_main
from bigearthnet.synthetic.scene import PRODUCT, SceneTruth, write_scene

pytestmark = [pytest.mark.bad_input, pytest.mark.xdist_group("forms-bad-input")]
TRUTH = SceneTruth(size=240, block=240, border=0, classes=((3,),))
ZARR_CASES = {
    "a band missing": ("r20m/b05: missing from the product", ()),
    "shape unlike its coordinates": ("(240, 240), but its coordinates give 240 y x 241 x", ()),
    "no SCL with --mask-clouds": ("l2a_classification/r20m/scl: missing", ("--mask-clouds",)),
    "zarr.json cut short": ("not a readable Zarr product", ()),
    "Level-1C": ("a Level-1C product", ()),
    "--boa-offset against its attributes": ("--boa-offset 0 contradicts its metadata",
                                            ("--boa-offset", "0")),
}  # fmt: skip
STAC_CASES = {
    "an asset missing": ("no asset of band B08 (keys nir, B08, B08_10m)", ()),
    "an asset that cannot be opened": ("asset swir16", ()),
    "the item cut short": ("not JSON", ()),
    "raster:bands of another scale": ("band B04 has scale 0.001, not reflectance per DN", ()),
    "Level-1C": ("a Level-1C product", ()),
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("forms-bad")
    return {
        form: write_scene(root / form, TRUTH, seed=2, layout=form, difficulty="simple")
        for form in ("zarr", "stac")
    }


def _map(scene: Path, run: Path, out: Path, *extra: str) -> int:
    argv = ["scene", str(scene), "--run-dir", str(run), "--out", str(out), "--no-progress"]
    return map_main([*argv, *extra])


def _refused(scene: Path, run: Path, tmp_path: Path, case: tuple, errors) -> int:
    """Map ``scene``: exit 2, no map, and one line naming the scene and the case's message."""
    message, extra = case
    out = tmp_path / "map.tif"
    code = _map(scene, run, out, *extra)
    assert code == 2 and not out.exists()
    _one_line(errors(), message, scene.name)
    return code


def _one_line(errors: list[str], *needles: str) -> None:
    line = errors[-1]
    assert "\n" not in line and "Traceback" not in line, errors
    for needle in needles:
        assert needle in line, (needle, line)


@pytest.mark.parametrize("case", ZARR_CASES)
def test_a_bad_zarr_product(case, pristine, trained_run, tmp_path, reported_errors, bad_input_row):
    product = tmp_path / pristine["zarr"].name
    shutil.copytree(pristine["zarr"], product)
    reflectance = product / "measurements" / "reflectance"
    if case == "a band missing":
        shutil.rmtree(reflectance / "r20m" / "b05")
    elif case == "shape unlike its coordinates":
        group = zarr.open_group(product / "measurements/reflectance/r10m", mode="r+")
        x = group["x"][:]
        del group["x"]
        group.create_array("x", data=np.concatenate([x, x[-1:] + 10.0]))
    elif case == "no SCL with --mask-clouds":
        shutil.rmtree(product / "conditions")
    elif case == "zarr.json cut short":
        text = (product / "zarr.json").read_text()
        (product / "zarr.json").write_text(text[: len(text) // 2])
    elif case == "Level-1C":
        root = zarr.open_group(product, mode="r+")
        item = dict(root.attrs["stac_discovery"])
        item["properties"] = dict(item["properties"], **{"s2:product_type": "S2MSI1C"})
        root.attrs["stac_discovery"] = item
    code = _refused(product, trained_run, tmp_path, ZARR_CASES[case], reported_errors)
    bad_input_row(f"EOPF Zarr: {case}", "bigearthnet-map scene", code,
                  "one line naming the product or array; no map")  # fmt: skip


@pytest.mark.parametrize("case", STAC_CASES)
def test_a_bad_stac_item(case, pristine, trained_run, tmp_path, reported_errors, bad_input_row):
    shutil.copytree(pristine["stac"].parent.parent, tmp_path / "copy")
    item_file = tmp_path / "copy" / "items" / pristine["stac"].name
    item = json.loads(item_file.read_text())
    if case == "an asset missing":
        del item["assets"]["nir"]
    elif case == "an asset that cannot be opened":
        item["assets"]["swir16"]["href"] = "../assets/nowhere/swir16.tif"
    elif case == "raster:bands of another scale":
        item["assets"]["red"]["raster:bands"][0]["scale"] = 0.001
    elif case == "Level-1C":
        item["properties"]["s2:product_type"] = "S2MSI1C"
    text = json.dumps(item)
    item_file.write_text(text[: len(text) // 2] if case == "the item cut short" else text)
    code = _refused(item_file, trained_run, tmp_path, STAC_CASES[case], reported_errors)
    bad_input_row(f"STAC item: {case}", "bigearthnet-map scene", code,
                  "one line naming the item or asset; no map")  # fmt: skip


def test_a_folder_two_forms_claim_is_refused(
    pristine, trained_run, tmp_path, reported_errors, bad_input_row
) -> None:
    """A scene's form is decided once, by the one form that claims it: a Zarr product that
    also holds a SAFE's band images is refused naming both forms, before anything is read
    (never read as whichever form happens to be asked first)."""
    product = tmp_path / pristine["zarr"].name
    shutil.copytree(pristine["zarr"], product)
    images = product / "GRANULE" / "G" / "IMG_DATA" / "R10m"
    images.mkdir(parents=True)
    (images / "T33UXP_20200801T100559_B02_10m.jp2").touch()
    case = ("claimed by SAFE and EOPF Zarr alike", ())
    code = _refused(product, trained_run, tmp_path, case, reported_errors)
    bad_input_row("a folder that is both an EOPF Zarr product and a SAFE product",
                  "bigearthnet-map scene", code,
                  "one line naming it and both forms; nothing read")  # fmt: skip


def _item_copy(pristine, folder: Path, hrefs: str = "relative paths") -> Path:
    """The pristine item and its COGs copied into ``folder``; its asset hrefs relative
    paths, as written, or ``file://`` URLs."""
    shutil.copytree(pristine["stac"].parent.parent, folder)
    item_file = folder / "items" / pristine["stac"].name
    if hrefs == "file:// URLs":
        item = json.loads(item_file.read_text())
        for asset in item["assets"].values():
            asset["href"] = (item_file.parent / asset["href"]).resolve().as_uri()
        item_file.write_text(json.dumps(item))
    return item_file


HREFS = ["relative paths", "file:// URLs"]


@pytest.mark.parametrize("hrefs", HREFS)
def test_a_map_over_an_asset_is_refused(hrefs, pristine, trained_run, tmp_path,
                                        reported_errors, bad_input_row) -> None:  # fmt: skip
    """--out naming one of the item's COGs (an output folder holding something else); D04:
    a file:// href is a local path too (its COG was overwritten by the map)."""
    item_file = _item_copy(pristine, tmp_path / "copy", hrefs)
    asset = tmp_path / "copy" / "assets" / PRODUCT / "blue.tif"
    before = asset.read_bytes()
    code = _map(item_file, trained_run, asset)
    assert code == 2 and asset.read_bytes() == before
    _one_line(reported_errors(), "--out overlaps the asset", "blue.tif")
    bad_input_row(f"`--out` = one of the STAC item's COGs (hrefs: {hrefs})",
                  "bigearthnet-map scene", code,
                  "refused before reading; the asset is intact")  # fmt: skip


def test_a_saved_search_with_an_id_twice_is_refused(
    pristine, trained_run, tmp_path, reported_errors, bad_input_row
) -> None:
    """Two inputs with the same name: a search result listing one item id twice."""
    item = json.loads(pristine["stac"].read_text())
    search = pristine["stac"].with_name("search.json")
    search.write_text(json.dumps({"type": "FeatureCollection", "features": [item, item]}))
    out = tmp_path / "region"
    argv = ["region", "--stac-items", str(search), "--run-dir", str(trained_run), "--out",
            str(out), "--no-progress"]  # fmt: skip
    code = map_main(argv)
    assert code == 2 and not (out / "scenes").exists()
    _one_line(reported_errors(), "search.json", f"{PRODUCT} appear twice")
    search.unlink()
    bad_input_row("`--stac-items` listing one item id twice", "bigearthnet-map region", code,
                  "refused before mapping, naming the id")  # fmt: skip


@pytest.mark.parametrize("hrefs", HREFS)
def test_an_asset_replaced_remakes_the_scene_map(hrefs, pristine, trained_run, tmp_path,
                                                 bad_input_row) -> None:  # fmt: skip
    """A rerun after an input changed: an item's COG replaced (same name) -> its map is
    remade; untouched, it is reused. D05: also when the hrefs are file:// URLs."""
    item_file = _item_copy(pristine, tmp_path / "copy", hrefs)
    other = tmp_path / "copy2"
    shutil.copytree(pristine["stac"].parent.parent, other)
    out = tmp_path / "region"
    argv = ["region", str(item_file), "--run-dir", str(trained_run), "--out", str(out),
            "--no-progress"]  # fmt: skip
    assert map_main(argv) == 0
    (scene_map,) = [p for p in (out / "scenes").glob("*.tif") if "probabilities" not in p.name]
    stamp = scene_map.stat().st_mtime_ns
    assert map_main(argv) == 0 and scene_map.stat().st_mtime_ns == stamp  # reused
    blue = tmp_path / "copy" / "assets" / PRODUCT / "blue.tif"
    blue.write_bytes((other / "assets" / PRODUCT / "blue.tif").read_bytes() + b"\0")
    code = map_main(argv)
    assert code == 0 and scene_map.stat().st_mtime_ns != stamp
    bad_input_row(f"a STAC item's COG replaced, then a rerun (hrefs: {hrefs})",
                  "bigearthnet-map region", code,
                  "that scene's map is remade; an untouched one is reused")  # fmt: skip


def _classes_and_areas(out: Path) -> tuple[np.ndarray, str]:
    with rasterio.open(out) as src:
        return src.read(1), Path(f"{out}.areas.csv").read_text()


def test_declared_nodata_stays_nodata_in_the_map(pristine, trained_run, tmp_path,
                                                 bad_input_row) -> None:  # fmt: skip
    """D03: nodata 65535 (raster:bands and the COGs' nodata) over a 600 m border was
    classified, and counted in areas.csv. Read as declared: the 0-filled scene's map."""
    bordered = SceneTruth(size=240, block=240, border=60, classes=((3,),))
    zero = write_scene(tmp_path / "zero", bordered, seed=2, layout="stac", difficulty="simple")
    declared = copy_scene(zero, tmp_path / "declared")
    declare_nodata("stac", declared, 65535)
    code = _map(declared, trained_run, tmp_path / "declared.tif")
    assert code == 0 and _map(zero, trained_run, tmp_path / "zero.tif") == 0
    top, areas = _classes_and_areas(tmp_path / "declared.tif")
    expected, expected_areas = _classes_and_areas(tmp_path / "zero.tif")
    np.testing.assert_array_equal(top, expected)
    assert areas == expected_areas and (top == 255).sum() == 12  # the border's 12 cells
    bad_input_row("nodata 65535 (raster:bands) over a 600 m border", "bigearthnet-map scene",
                  code, "nodata cells in the map, not in areas.csv")  # fmt: skip


def test_items_with_links_to_their_api_map_offline(pristine, trained_run, tmp_path,
                                                   bad_input_row) -> None:  # fmt: skip
    """D10: items as Earth Search and Planetary Computer deliver them link to the API;
    the identity digest resolved the root link (offline: a traceback after the scenes
    before it were mapped). A region of a Zarr product and such an item: both mapped."""
    item_file = _item_copy(pristine, tmp_path / "copy")
    item = json.loads(item_file.read_text())
    api = "https://stac.invalid/v1"  # .invalid never resolves (RFC 2606)
    item["links"] = [{"rel": rel, "href": f"{api}/{rel}"} for rel in
                     ("root", "self", "parent", "collection")]  # fmt: skip
    item["properties"]["datetime"] = "2020-08-11T10:05:59Z"  # another date than the Zarr's
    item_file.write_text(json.dumps(item))
    out = tmp_path / "region"
    argv = ["region", str(pristine["zarr"]), str(item_file), "--run-dir", str(trained_run),
            "--out", str(out), "--no-progress"]  # fmt: skip
    code = map_main(argv)
    assert code == 0
    assert len([p for p in (out / "scenes").glob("*.tif") if "probabilities" not in p.name]) == 2
    bad_input_row("an item with links to its API (root, self, parent, collection), offline",
                  "bigearthnet-map region", code, "mapped with the others")  # fmt: skip


def test_a_hash_in_a_folder_name_is_part_of_the_path(pristine, trained_run, tmp_path,
                                                     bad_input_row) -> None:  # fmt: skip
    """D13: `H#2/.../ID.json` was taken as FILE#ID ("H: unreadable"), and its relative
    hrefs were cut at the '#'. The item's map equals the pristine one's."""
    item_file = _item_copy(pristine, tmp_path / "H#2" / "stac")
    code = _map(item_file, trained_run, tmp_path / "H#2" / "map.tif")
    assert code == 0 and _map(pristine["stac"], trained_run, tmp_path / "pristine.tif") == 0
    top, areas = _classes_and_areas(tmp_path / "H#2" / "map.tif")
    np.testing.assert_array_equal(top, _classes_and_areas(tmp_path / "pristine.tif")[0])
    bad_input_row("a `#` in a folder name (`H#2/.../ID.json`)", "bigearthnet-map scene", code,
                  "a path, not FILE#ID: the map of the item")  # fmt: skip


SCENE = "scene {scene} --run-dir {run} --no-progress"
PARSE_CASES = {  # the case: the command line, what its one line says
    "`--bbox=-inf,-inf,inf,inf`": (f"{SCENE} --out M/x.tif --bbox=-inf,-inf,inf,inf", "--bbox"),
    "`--out` an existing folder": (f"{SCENE} --out M", "--out: M: an existing folder"),
    "`--out M/x.png`": (f"{SCENE} --out M/x.png", "--out: M/x.png: a map is a GeoTIFF"),
    "`change --out` an existing folder": ("change a.tif b.tif --out M", "an existing folder"),
    "`change --out M/x.png`": ("change a.tif b.tif --out M/x.png", "a map is a GeoTIFF"),
    "`--out` an existing file (patches)": ("--run-dir {run} --shards S --out M/notes.txt",
                                           "--out: M/notes.txt: an existing file"),
}  # fmt: skip


@pytest.mark.parametrize("case", PARSE_CASES)
def test_outputs_and_boxes_no_map_can_have_are_refused_when_parsed(
    case, pristine, trained_run, tmp_path, monkeypatch, reported_errors, bad_input_row
) -> None:
    """D17, D18, D25: a --bbox of inf (a traceback), an --out that is a folder (refused
    only after the whole scene was predicted), an --out named .png (a TIFF under that name,
    and the preview written over it): one line when parsed, nothing written."""
    line, needle = PARSE_CASES[case]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "M").mkdir()
    (tmp_path / "M" / "notes.txt").write_text("mine\n")
    code = map_main(line.format(scene=pristine["stac"], run=trained_run).split())
    assert code == 2 and sorted(p.name for p in (tmp_path / "M").iterdir()) == ["notes.txt"]
    _one_line(reported_errors(), needle)
    command = line.split()[0] if not line.startswith("-") else "patches"
    bad_input_row(case, f"bigearthnet-map {command}", code,
                  "refused when parsed, before reading; nothing written")  # fmt: skip


@pytest.mark.parametrize("layout", ["a pystac-saved catalog", "items beside a collection.json"])
def test_catalogs_as_pystac_saves_them_are_scene_lists(layout, pristine, trained_run, tmp_path,
                                                        bad_input_row) -> None:  # fmt: skip
    """D22: `--stac-items` of a saved catalog ("CAT/catalog.json: not a STAC item") or of
    items beside their collection.json: the items mapped, each once."""
    import pystac

    item = pystac.Item.from_file(str(pristine["stac"]))
    for asset in item.assets.values():
        asset.href = asset.get_absolute_href()
    folder = tmp_path / "catalog"
    if layout == "a pystac-saved catalog":
        catalog = pystac.Catalog(id="saved", description="items of a search, saved")
    else:
        catalog = pystac.Collection(id="c", description="", license="other",
                                    extent=pystac.Extent.from_items([item]))  # fmt: skip
    catalog.add_item(item)
    catalog.normalize_hrefs(str(folder))
    catalog.save(catalog_type=pystac.CatalogType.SELF_CONTAINED)
    if layout != "a pystac-saved catalog":  # flatten: the item file beside collection.json
        saved = folder / PRODUCT / f"{PRODUCT}.json"
        document = json.loads((folder / "collection.json").read_text())
        for link in document["links"]:
            link["href"] = link["href"].replace(f"{PRODUCT}/", "")
        (folder / "collection.json").write_text(json.dumps(document))
        saved.rename(folder / saved.name)
        saved.parent.rmdir()
    out = tmp_path / "region"
    argv = ["region", "--stac-items", str(folder), "--run-dir", str(trained_run), "--out",
            str(out), "--no-progress"]  # fmt: skip
    code = map_main(argv)
    assert code == 0
    record = json.loads((out / "consistency.json").read_text())
    assert [Path(s["path"]).name for s in record["scenes"]] == [f"{PRODUCT}.json"]
    bad_input_row(f"`--stac-items` of {layout}", "bigearthnet-map region", code,
                  "its items mapped, each once")  # fmt: skip
