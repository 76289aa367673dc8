"""Real STAC items (tests/fixtures/stac_items: Earth Search's two collections, Planetary
Computer, CDSE's STAC 1.1) over the synthetic scene, stored as each catalog stores it: the
same values as the SAFE product of the scene, read by the item's own metadata and checked
against its pixels (bigearthnet.maps.inputs.stac_item, bigearthnet.maps.radiometry). The
maps themselves are compared in tests/maps/test_radiometry_bad_input.py (a trained model)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bigearthnet.maps.inputs import identify
from bigearthnet.maps.scene.input import Scene, SceneError
from bigearthnet.synthetic.scene import PRODUCT, SceneTruth, render_scene, write_scene
from bigearthnet.synthetic.scene_forms import localise_item

FIXTURES = Path(__file__).parents[1] / "fixtures" / "stac_items"
# A dark class (16: B04 189 DN) beside bright ones, a border and a cloud: the pixels speak.
TRUTH = SceneTruth(size=240, block=120, border=12, classes=((0, 8), (11, 16)),
                   cloud=(24, 132, 84, 204))  # fmt: skip
# item -> (stored with the +1,000, the decision applied, which reading won)
ITEMS = {
    "earth_search_l2a_flag_true": (
        False, "DN +0 (earthsearch:boa_offset_applied of the STAC item: true)", "metadata"),
    "earth_search_l2a_flag_false": (
        False, "DN +0 (the scene's pixels, overruling the metadata's DN -1000 (earthsearch:"
        "boa_offset_applied of the STAC item: false, processing baseline 05.09 "
        "(s2:processing_baseline of the STAC item)))", "pixels"),
    "earth_search_c1_l2a": (True, "DN -1000 (raster:bands of the STAC item)", "metadata"),
    "planetary_computer_l2a": (
        False, "DN +0 (processing baseline 02.12 (s2:processing_baseline of the STAC item))",
        "metadata"),
    "cdse_l2a_stac_1_1": (
        True, "DN -1000 (raster:scale/raster:offset of the STAC item's assets)", "metadata"),
}  # fmt: skip


def real_item(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def write_real_items(root: Path, truth: SceneTruth = TRUTH, seed: int = 4) -> dict[str, Path]:
    """The scene as its SAFE product (``"safe"``) and under every real item of ITEMS."""
    found = {"safe": write_scene(root / f"{PRODUCT}.SAFE", truth, seed=seed, layout="safe",
                                 difficulty="simple")}  # fmt: skip
    bands = render_scene(truth, seed, "simple")
    for name, (plus_offset, *_) in ITEMS.items():
        found[name] = localise_item(real_item(name), bands, root / name / "items",
                                    plus_offset=plus_offset)  # fmt: skip
    return found


@pytest.fixture(scope="module")
def items(tmp_path_factory) -> dict[str, Path]:
    return write_real_items(tmp_path_factory.mktemp("real-items"))


def _strips(scene: Scene) -> list:
    return [scene.strip(row) for row in range(0, scene.height - 119, 60)]


@pytest.mark.filterwarnings("ignore::UserWarning")  # pystac migrating c1's storage fields
def test_real_items_read_the_values_of_the_safe_product(items) -> None:
    """Each item read by its own metadata (the flag, raster:bands, raster:scale on the
    asset, the baseline or processing:version) and its pixels: every strip and the cloud
    mask equal the SAFE product's."""
    with Scene(items["safe"], mask_clouds=True) as safe:
        reference = _strips(safe)
        assert safe.radiometry.tags()["radiometry_pixels"].startswith("silent: ")
    for name, (_, applied, won) in ITEMS.items():
        with Scene(items[name], mask_clouds=True) as scene:
            assert scene.radiometry.describe() == applied, name
            assert scene.radiometry.won == won, name
            strips = _strips(scene)
        for mine, theirs in zip(strips, reference, strict=True):
            np.testing.assert_array_equal(mine.invalid, theirs.invalid, err_msg=name)
            for band, values in mine.bands.items():
                np.testing.assert_array_equal(values, theirs.bands[band], err_msg=f"{name} {band}")


def test_cdse_items_are_found_by_their_keys_and_version(items) -> None:
    """D21: B02_10m-style keys, raster:scale/offset on the asset, processing:version."""
    hrefs = identify(items["cdse_l2a_stac_1_1"]).asset_hrefs()
    assert [hrefs[i].rsplit("/", 1)[-1] for i in (1, 8, 12)] == [
        "B02_10m.tif", "B8A_20m.tif", "SCL_20m.tif"]  # fmt: skip
    renamed = real_item("cdse_l2a_stac_1_1")
    for asset in renamed["assets"].values():
        asset.pop("raster:scale", None), asset.pop("raster:offset", None)  # the baseline decides
    path = localise_item(renamed, render_scene(TRUTH, 4, "simple"), items["safe"].parent /
                         "renamed" / "items", plus_offset=True)  # fmt: skip
    with Scene(path) as scene:
        assert scene.radiometry.describe() == (
            "DN -1000 (processing baseline 05.11 (processing:version of the STAC item))"
        )


@pytest.mark.parametrize("how", ["collection", "collection link"])
def test_an_item_of_a_level_1c_collection_is_refused(items, tmp_path, how) -> None:
    """D26: an L2A-looking id and no product type, but Earth Search's L1C collection."""
    item = json.loads(items["earth_search_l2a_flag_true"].read_text())
    del item["properties"]["s2:product_type"]
    for asset in item["assets"].values():  # absolute: the item file moves
        asset["href"] = str((items["earth_search_l2a_flag_true"].parent / asset["href"]).resolve())
    collection = "https://earth-search.aws.element84.com/v1/collections/sentinel-2-l1c"
    if how == "collection":
        item["collection"] = "sentinel-2-l1c"
    else:
        item.pop("collection")
        item["links"] = [{"rel": "collection", "href": collection, "type": "application/json"}]
    path = tmp_path / "l1c.json"
    path.write_text(json.dumps(item))
    with pytest.raises(SceneError, match="a Level-1C product"):
        identify(path).require_l2a()
    item["links"] = [{"rel": "derived_from", "href": f"{collection}/items/x"}]  # not its own
    item["collection"] = "sentinel-2-l2a"
    path.write_text(json.dumps(item))
    identify(path).require_l2a()


def test_earth_search_older_flag_name_is_read(items, tmp_path) -> None:
    """Earth Search's items before 2023 named the flag sentinel:boa_offset_applied."""
    item = json.loads(items["earth_search_l2a_flag_true"].read_text())
    properties = item["properties"]
    properties["sentinel:boa_offset_applied"] = properties.pop("earthsearch:boa_offset_applied")
    for asset in item["assets"].values():  # absolute: the item file moves
        asset["href"] = str((items["earth_search_l2a_flag_true"].parent / asset["href"]).resolve())
    path = tmp_path / "older.json"
    path.write_text(json.dumps(item))
    with Scene(path) as scene:
        assert scene.radiometry.describe() == (
            "DN +0 (sentinel:boa_offset_applied of the STAC item: true)"
        )
