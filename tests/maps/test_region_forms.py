"""A region series from scenes in mixed forms (SAFE, EOPF Zarr, STAC items of both styles,
band GeoTIFFs) equals the all-SAFE series; a saved search or a folder of items is a scene
list (``--stac-items``); each scene's radiometric decision is in the scene table and STAC."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import rasterio
from gis import assert_no_machine_paths, open_as_gis_user
from rio_cogeo.cogeo import cog_validate

from bigearthnet.cli.map import main as map_main
from bigearthnet.core import constants
from bigearthnet.formats.class_map import PROBABILITIES_SUFFIX
from bigearthnet.formats.region_folder import read_consistency
from bigearthnet.synthetic.region import RegionSpec, generate_region
from bigearthnet.synthetic.region_score import score_series

pytestmark = pytest.mark.xdist_group("region-forms")
SPEC = dict(tiles=2, dates=5, size=240, block=2400.0, seed=5)


@pytest.fixture(scope="module")
def regions(tmp_path_factory) -> dict[str, Path]:
    """The same region (seed 5) as SAFE products, and in the forms in turn."""
    root = tmp_path_factory.mktemp("region-forms")
    for layout in ("safe", "mixed"):
        generate_region(root / layout, RegionSpec(layout=layout, **SPEC, difficulty="simple"))
    return {layout: root / layout for layout in ("safe", "mixed")}


def _series(out: Path, run: Path, *inputs: str) -> int:
    argv = ["region", *inputs, "--run-dir", str(run), "--out", str(out), "--period",
            "scene-date", "--no-progress"]  # fmt: skip
    return map_main(argv)


def _consistent(out: Path) -> dict[str, np.ndarray]:
    found = {}
    for path in sorted((out / "consistent").glob("*.tif")):
        with rasterio.open(path) as src:
            found[path.name] = src.read(1)
    return found


@pytest.mark.slow  # 35 s: a whole series twice; each form alone: test_scene_forms.py
def test_a_series_of_mixed_forms_equals_the_all_safe_series(regions, trained_run, tmp_path):
    truth = json.loads((regions["mixed"] / "truth.json").read_text())
    assert {s["form"] for s in truth["scenes"]} == {"safe", "zarr", "stac", "stac-pc", "tif"}
    outs = {}
    for layout, region in regions.items():
        outs[layout] = tmp_path / layout
        scenes = [str(region / s["path"]) for s in truth["scenes"]]
        if layout == "safe":
            scenes = [str(region / "scenes" / s["name"]) for s in truth["scenes"]]
        assert _series(outs[layout], trained_run, *scenes) == 0
    safe, mixed = _consistent(outs["safe"]), _consistent(outs["mixed"])
    assert safe.keys() == mixed.keys() and len(safe) == SPEC["dates"]
    for name, labels in safe.items():
        np.testing.assert_array_equal(mixed[name], labels, err_msg=name)
    assert (outs["mixed"] / "areas.csv").read_bytes() == (outs["safe"] / "areas.csv").read_bytes()
    record = read_consistency(outs["mixed"])
    decisions = {Path(s.path).suffix or "folder": s.radiometry for s in record.scenes}
    assert decisions[".zarr"].endswith("(scale_factor/add_offset of the Zarr arrays)")
    assert "DN -1000" in decisions[".json"] and "DN +0" in decisions["folder"]
    # The region's own score finds its scenes in every form (a .zarr, an item's .json).
    assert score_series(regions["mixed"], outs["mixed"]).agreement == pytest.approx(
        score_series(regions["safe"], outs["safe"]).agreement
    )
    item = json.loads(next((outs["mixed"] / "stac").glob("*/*.json")).read_text())
    listed = item["properties"]["bigearthnet:scenes"]
    assert listed and all(entry["radiometry"].startswith("DN ") for entry in listed)
    # Issue 47: every map of categories opens in a GIS as such, each with its QGIS style.
    for path in sorted(outs["mixed"].glob("*/*.tif")):  # scenes/, periods/, consistent/
        if path.name.endswith(PROBABILITIES_SUFFIX):
            assert cog_validate(str(path), quiet=True)[:2] == (True, []), path
            continue
        labels = open_as_gis_user(path)
        assert [labels[v] for v in sorted(labels)] == list(constants.CLASSES_19), path
    first = open_as_gis_user(outs["mixed"] / "first_change.tif")
    assert first[0] == "no lasting change"
    assert first[1] == f"first lasting change: {record.periods[0]}"
    assert open_as_gis_user(outs["mixed"] / "changes.tif")[1] == "1 class change"
    # ... and names no folder of this machine: scenes and run relative to the region.
    assert_no_machine_paths(outs["mixed"], tmp_path.parent.parent)
    assert record.scenes[0].path.startswith("../../")
    with rasterio.open(outs["mixed"] / "periods" / f"{record.periods[0]}.tif") as src:
        run_dir = src.tags()["run_dir"]
    assert (outs["mixed"] / "periods" / run_dir).resolve() == trained_run.resolve()


def test_a_folder_of_items_is_a_scene_list(regions, trained_run, tmp_path):
    """--stac-items DIR: the mixed region's STAC items alone (tile and date from their
    properties), mapped as the same scenes of the all-SAFE series."""
    truth = json.loads((regions["mixed"] / "truth.json").read_text())
    items = tmp_path / "items"
    items.mkdir()
    names = []
    for scene in truth["scenes"]:
        if scene["form"].startswith("stac"):
            item = json.loads((regions["mixed"] / scene["path"]).read_text())
            for asset in item["assets"].values():  # absolute: the item file moved
                asset["href"] = str((regions["mixed"] / "scenes" / asset["href"]).resolve())
            (items / f"{scene['name']}.json").write_text(json.dumps(item))
            names.append(scene["name"])
    out = tmp_path / "items-out"
    assert _series(out, trained_run, "--stac-items", str(items)) == 0
    record = read_consistency(out)
    assert sorted(Path(s.path).stem for s in record.scenes) == sorted(names)
    assert {s.date for s in record.scenes} == {s["date"] for s in truth["scenes"] if
                                               s["name"] in names}  # fmt: skip
