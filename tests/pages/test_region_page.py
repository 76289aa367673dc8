"""region.html and the STAC collection of a region series, as a person and a STAC client
meet them: self-contained (no request; its one script inline), the period selector, the
figures of consistency.json, areas to the decimals of one cell, the run page and the region
page linking each other, every STAC document valid offline and every asset present. The map
viewer at 10 m, as it shows on screen: test_region_viewer.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pystac
import pytest
from browser import assert_self_contained, open_page, wait_until_drawn

from bigearthnet.cli.map import main as map_main
from bigearthnet.cli.report import main as report_main
from bigearthnet.core import display
from bigearthnet.formats.stac_validation import validate_stac
from bigearthnet.synthetic.region import RegionSpec, generate_region

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def series(trained_run, tmp_path_factory) -> Path:
    """A region series mapped with a run that sits beside it, as ``make demo`` lays them out
    (the run's page written by train.py, then again once the series is there)."""
    root = tmp_path_factory.mktemp("region-page")
    generate_region(
        root / "synth", RegionSpec(tiles=2, dates=5, size=360, seed=2, difficulty="simple")
    )
    scenes = [str(p) for p in sorted((root / "synth" / "scenes").iterdir())]
    run, out = root / "run", root / "out"
    shutil.copytree(trained_run, run)
    argv = ["region", *scenes, "--run-dir", str(run), "--out", str(out), "--no-progress"]
    assert map_main(argv) == 0
    assert report_main([str(run)]) == 0
    return out


def test_the_page_shows_each_period(series, tmp_path):
    from selenium.webdriver.common.by import By

    record = json.loads((series / "consistency.json").read_text())
    page = series / "region.html"
    with open_page(page) as visit:
        assert_self_contained(visit, page)
        # The map viewer's data and script, inline: nothing to fetch.
        scripts = "return [...document.scripts].map(s => s.src)"
        assert visit.driver.execute_script(scripts) == ["", ""]
        shown = visit.text('[data-key="flicker_raw"]')
        assert shown == f"{100 * record['flicker_rate']['raw']:.2f}"
        periods = record["periods"]
        assert visit.texts("#periods label") == periods
        for index, label in enumerate(periods):
            visit.driver.find_element(By.CSS_SELECTOR, f'label[for="p{index}"]').click()
            assert visit.texts(".period-label") == [label, label]
            assert visit.text(".observed") == f"{record['cells_observed'][label]:,}"
        wait_until_drawn(visit)
        # Areas to the decimals one cell needs (600 m cells: 0.36 km², 2 decimals).
        cell_km2 = (record["grid"]["cell_m"] / 1000) ** 2
        decimals = display.area_decimals(cell_km2)
        for cell in visit.texts("#transitions td.num"):
            assert len(cell.rpartition(".")[2]) == decimals, cell
        visit.screenshot(tmp_path / "region.png")
        # The run whose model made it, linked relatively (the page is shared as a folder).
        link = visit.driver.find_element(By.CSS_SELECTOR, "#links a")
        assert link.text == "../run/report.html"
        link.click()
        assert visit.driver.current_url == (series.parent / "run" / "report.html").as_uri()
    assert str(series.parent) not in page.read_text()


def test_the_run_page_links_to_the_series(series):
    from selenium.webdriver.common.by import By

    page = series.parent / "run" / "report.html"
    with open_page(page) as visit:
        assert visit.text("#links a") == "../out/region.html"
        visit.driver.find_element(By.CSS_SELECTOR, "#links a").click()
        assert visit.driver.current_url == (series / "region.html").as_uri()


def test_the_stac_collection_is_valid_and_complete(series):
    """Validated as written (pystac's reader migrates extension versions on reading)."""
    folder = series / "stac"
    validate_stac(json.loads((folder / "collection.json").read_text()), "collection")
    record = json.loads((series / "consistency.json").read_text())
    collection = pystac.Collection.from_file(str(folder / "collection.json"))
    items = list(collection.get_items())
    assert [item.id for item in items] == record["periods"]
    for item in items:
        body = json.loads((folder / item.id / f"{item.id}.json").read_text())
        validate_stac(body, item.id)
        assert body["properties"]["proj:code"] == "EPSG:3035"
        classes = body["assets"]["classification"]["classification:classes"]
        assert [c["value"] for c in classes] == list(range(19))
        for asset in item.assets.values():
            assert Path(asset.get_absolute_href()).is_file(), asset.href
    for asset in collection.assets.values():
        assert Path(asset.get_absolute_href()).is_file(), asset.href
