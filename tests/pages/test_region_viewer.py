"""The region page's map viewer on a 10 m series, in headless Chromium, as a person sees it:
the pixels on screen are read back and compared, cell by cell, with the COGs the page was
made from, at a view worked out apart from the page (the canvas's size, the buttons pressed,
the drag made). Checked: the period maps and a change map side by side; every visible cell
in its class's colour where the cell is; unobserved cells hatched, in no class's colour;
pan (drag), zoom (buttons and the wheel, which keeps the cell under the cursor); the scale
bar's length in ground metres; the cursor's coordinates in the grid's CRS and in longitude
and latitude, and what each map holds there; the period and change-map selectors.

The series is made from scene maps at 10 m drawn from the synthetic region's truth (no model:
the products take scene maps however they were made), 372 x 256 cells."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest
import rasterio
from browser import assert_self_contained, open_page, wait_until_drawn
from pyproj import Transformer
from viewer_checks import (
    BACKGROUND,
    HATCH,
    MapFile,
    View,
    check_map,
    cursor,
    hover,
    pan_and_zoom,
    scale_bar,
    viewer_canvases,
)

from bigearthnet.core import constants
from bigearthnet.formats import region_folder
from bigearthnet.formats.class_map import NODATA, write_class_map
from bigearthnet.formats.region_folder import GridRecord
from bigearthnet.maps.region.periods import from_product_name
from bigearthnet.maps.region.plan import SceneMap
from bigearthnet.maps.region.products import build_products
from bigearthnet.pages.map_viewer import MAX_SIDE, MIN_SIDE, lonlat_points, pyramid
from bigearthnet.pages.region_page import write_region_page
from bigearthnet.synthetic.region_maps import write_truth_maps

pytestmark = pytest.mark.slow

CELL = 10.0
ZOOMS = 4  # "+" pressed: 16 x the whole region's scale, ~15 px a cell


@pytest.fixture(scope="module")
def series(fine_region, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("region-10m") / "series"
    pairs = write_truth_maps(fine_region, out, cell=CELL, error=0.05, seed=1)
    maps = [SceneMap(from_product_name(scene), path) for scene, path in pairs]
    build_products(out, maps, period="scene-date", crs="EPSG:3035", cell=CELL,
                   persistence=0.99, block_size=1024, tags={}, skipped=[])  # fmt: skip
    write_region_page(out)
    return out


def _cloud_edge(values: np.ndarray) -> tuple[int, int]:
    """The view's target: an unobserved cell (a cloud) with observed ones around it, the
    nearest such to the grid's centre."""
    height, width = values.shape
    edge = [
        (int(r), int(c)) for r, c in np.argwhere(values == NODATA)
        if 6 <= r < height - 6 and 6 <= c < width - 6
        and (values[r - 4 : r + 5, c - 4 : c + 5] != NODATA).sum() > 20
    ]  # fmt: skip
    assert edge, "no cloud edge in the first period"
    return min(edge, key=lambda rc: abs(rc[0] - height / 2) + abs(rc[1] - width / 2))


def test_the_viewer_shows_10m_cells_where_they_are(series):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    record = region_folder.read_consistency(series)
    grid = record.grid
    assert grid.cell_m == CELL and grid.width > 300
    classes = list(constants.CLASSES_19)
    classes_rgb = {tuple(int(v) for v in c) for c in constants.class_colours(len(classes))}
    assert not classes_rgb & (HATCH | {BACKGROUND})  # the premise: no class looks unobserved
    first, last = record.periods[0], record.periods[-1]
    raw = MapFile.read(series / region_folder.PERIODS / f"{first}.tif", classes)
    consistent = MapFile.read(series / region_folder.CONSISTENT / f"{first}.tif", classes)
    first_change = MapFile.read(series / region_folder.FIRST_CHANGE)
    target = _cloud_edge(raw.values)
    page = series / region_folder.PAGE
    with open_page(page) as visit:
        assert_self_contained(visit, page)
        wait_until_drawn(visit)
        canvases = viewer_canvases(visit)
        # The change map beside the periods: three maps in a row.
        assert [c.get_attribute("data-map") for c in canvases] == ["raw", "consistent", "change"]
        boxes = [c.rect for c in canvases]
        assert len({round(b["y"]) for b in boxes}) == 1
        assert boxes[0]["x"] < boxes[1]["x"] < boxes[2]["x"]
        size = visit.driver.execute_script(
            "return [arguments[0].clientWidth, arguments[0].clientHeight]", canvases[0]
        )
        fit = min(size[0] / grid.width, size[1] / grid.height)
        view = View(grid.width / 2, grid.height / 2, fit)
        # Pan: drag the target to the centre (at the whole region's scale, whole px).
        pan_and_zoom(visit, canvases[0], view, target, ZOOMS)
        # What each map holds, where it holds it.
        for canvas, shown in zip(canvases, (raw, consistent, first_change)):
            assert check_map(canvas, shown, view, classes_rgb) > 300
        # The scale bar: its label's ground metres over the screen px they span.
        metres, px = scale_bar(visit)
        assert px == pytest.approx(metres * view.scale / CELL, abs=0.6)
        assert 40 <= px <= 120
        # The cursor: the cell under it, its coordinates, what each map holds there.
        to_lonlat = Transformer.from_crs(grid.crs, "EPSG:4326", always_xy=True)
        left, top = grid.transform[2], grid.transform[5]
        for row, col in (target, (target[0] + 3, target[1] - 5)):
            shown = hover(visit, canvases[1], view.offset(row, col))
            assert (int(shown["row"]), int(shown["col"])) == (row, col)
            x, y = (float(shown[k].replace(",", "")) for k in ("x", "y"))
            assert left + col * CELL - 1 <= x <= left + (col + 1) * CELL + 1
            assert top - (row + 1) * CELL - 1 <= y <= top - row * CELL + 1
            assert shown["crs"] == grid.crs and shown["ns"] == "N" and shown["ew"] == "E"
            lon, lat = to_lonlat.transform(x, y)
            decimals = len(shown["lat"].partition(".")[2])
            assert decimals == 5  # the interpolation holds a metre over 4 km
            assert float(shown["lat"]) == pytest.approx(lat, abs=1e-5 + 2e-5)  # + x, y to 1 m
            assert float(shown["lon"]) == pytest.approx(lon, abs=1e-5 + 2e-5)
            names = [
                m.names[m.values[row, col]] if m.values[row, col] != NODATA else "not observed"
                for m in (raw, consistent, first_change)
            ]
            assert shown["held"].split(" | ") == names
        assert hover(visit, canvases[0], view.offset(*target))["held"].startswith("not observed")
        # The wheel zooms about the cursor: the cell under it stays there.
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.actions.wheel_input import ScrollOrigin

        spot = view.offset(target[0] - 4, target[1] + 2)
        before = hover(visit, canvases[2], spot)
        origin = ScrollOrigin.from_element(canvases[2], *spot)
        ActionChains(visit.driver).scroll_from_origin(origin, 0, -300).perform()
        after = cursor(visit)
        assert (after["row"], after["col"]) == (before["row"], before["col"])
        zoomed_metres, zoomed_px = scale_bar(visit)
        assert zoomed_metres / zoomed_px < 0.8 * metres / px
        # Another period and the other change map: the maps follow the selectors.
        index = len(record.periods) - 1
        visit.driver.find_element(By.CSS_SELECTOR, f'label[for="p{index}"]').click()
        Select(visit.driver.find_element(By.ID, "change-kind")).select_by_value("changes")
        visit.driver.find_element(By.ID, "zoom-fit").click()
        for _ in range(ZOOMS):
            visit.driver.find_element(By.ID, "zoom-in").click()
        wait_until_drawn(visit)
        view = View(grid.width / 2, grid.height / 2, fit * 2**ZOOMS)
        last_raw = MapFile.read(series / region_folder.PERIODS / f"{last}.tif", classes)
        changes = MapFile.read(series / region_folder.CHANGES)
        assert not np.array_equal(last_raw.values, raw.values)
        assert check_map(canvases[0], last_raw, view, classes_rgb) > 300
        assert check_map(canvases[2], changes, view, classes_rgb) > 300
        assert visit.texts(".period-label") == [last, last]
        legends = visit.driver.find_elements(By.CSS_SELECTOR, ".change-legend")
        assert [g.get_attribute("data-map") for g in legends if g.is_displayed()] == ["changes"]


def test_a_grid_wider_than_the_page_is_shown_by_levels(tmp_path):
    """A map of 2,500 x 600 cells: levels of 4, 8 and 16 cells a pixel (the finest within
    1,024 px, the coarsest within 256), each a palette PNG whose indices are the COG's
    values read at that scale (from its overviews), unobserved cells transparent."""
    from PIL import Image
    from rasterio.enums import Resampling
    from rasterio.transform import Affine

    rng = np.random.default_rng(0)
    values = rng.integers(0, 19, (600, 2500)).astype(np.uint8)
    values[:, :300] = NODATA
    path = tmp_path / "map.tif"
    where = {"crs": "EPSG:3035", "transform": Affine(10.0, 0, 4e6, 0, -10.0, 3e6)}
    write_class_map(path, values, where, constants.CLASSES_19, {})
    colours = {v: tuple(int(c) for c in rgb) for v, rgb in enumerate(constants.class_colours(19))}
    levels = pyramid(path, colours)
    assert [(v["f"], v["width"], v["height"]) for v in levels] == [
        (4, 625, 150), (8, 313, 75), (16, 157, 38)
    ]  # fmt: skip
    assert levels[0]["width"] <= MAX_SIDE and levels[-1]["width"] <= MIN_SIDE
    for level in levels:
        png = base64.b64decode(level["src"].partition(",")[2])
        image = Image.open(io.BytesIO(png))
        with rasterio.open(path) as src:
            shape = (level["height"], level["width"])
            expected = src.read(1, out_shape=shape, resampling=Resampling.nearest)
        np.testing.assert_array_equal(np.asarray(image), expected)
        assert image.info["transparency"] == NODATA


def test_coordinates_are_shown_to_the_decimals_they_hold():
    """Longitude and latitude interpolated between control points: a region of a few km
    to 5 decimals with 33 points a side; 1,200 km in the north of Europe needs more points
    and fewer decimals, each within half its last digit of the truth midway between points."""
    small = lonlat_points(
        GridRecord("EPSG:3035", 10.0, 400, 300, (10.0, 0, 4.4e6, 0, -10.0, 2.8e6))
    )
    assert (small["n"], small["decimals"]) == (33, 5)
    large = lonlat_points(GridRecord("EPSG:3035", 1000.0, 1200, 1200,
                                     (1000.0, 0, 2.6e6, 0, -1000.0, 5.4e6)))  # fmt: skip
    assert large["n"] > 33 and large["decimals"] < 5
    n = large["n"]
    lon, lat = (np.reshape(large[k], (n, n)) for k in ("lon", "lat"))
    step = 1.2e6 / (n - 1)
    x = 2.6e6 + step * (np.arange(n - 1) + 0.5)
    y = 5.4e6 - step * (np.arange(n - 1) + 0.5)
    true_lon, true_lat = Transformer.from_crs("EPSG:3035", "EPSG:4326", always_xy=True).transform(
        *np.meshgrid(x, y)
    )
    for shown, truth in ((lon, true_lon), (lat, true_lat)):
        midway = (shown[:-1, :-1] + shown[:-1, 1:] + shown[1:, :-1] + shown[1:, 1:]) / 4
        assert np.abs(midway - truth).max() <= 0.5 * 10.0 ** -large["decimals"]
