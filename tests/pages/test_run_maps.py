"""The run page's map viewer (the region page's viewer: bigearthnet/pages/run_maps.py) in
headless Chromium, as a person sees it: the run's 10 m scene map from the dense head and
its 600 m cell map side by side in one view, read back from the screen and compared cell by
cell with the COGs (the 600 m map on the 10 m grid, 60 of its cells a cell); unobserved
pixels (a cloud, masked) hatched, in no class's colour; zoom, pan, the scale bar, the
cursor's coordinates and what both maps hold there; the page one file with no request.

A copy of the shared ``trained_head_run`` maps a 240 px scene (2.4 km) both ways."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import rasterio
from browser import assert_self_contained, open_page, wait_until_drawn
from pyproj import Transformer
from viewer_checks import (
    MapFile,
    View,
    check_map,
    hover,
    pan_and_zoom,
    scale_bar,
    viewer_canvases,
)

from bigearthnet.cli.map import main as map_main
from bigearthnet.cli.report import main as report_main
from bigearthnet.core import constants
from bigearthnet.formats.class_map import NODATA
from bigearthnet.pages.run_page import REPORT
from bigearthnet.synthetic.scene import SceneTruth, write_scene

pytestmark = pytest.mark.slow

TRUTH = SceneTruth(size=240, block=120, border=0, classes=((0, 8), (11, 16)),
                   cloud=(90, 60, 150, 130))  # fmt: skip
ZOOMS = 2  # "+" pressed: 4 x the whole scene's scale, ~8 px a 10 m pixel


@pytest.fixture(scope="module")
def mapped_run(trained_head_run: Path, tmp_path_factory) -> Path:
    """A copy of the run with its scene's 10 m map and 600 m map under RUN/maps/, as
    ``make demo`` lays them out, and its page written again."""
    root = tmp_path_factory.mktemp("run-viewer")
    run = root / "run"
    shutil.copytree(trained_head_run, run, ignore=shutil.ignore_patterns(REPORT))
    scene = write_scene(root / "scene", TRUTH, seed=4, layout="tif", difficulty="simple")
    for name, extra in (("scene.tif", ()), ("scene-600m.tif", ("--stride", "60"))):
        argv = ["scene", str(scene), "--run-dir", str(run), "--out", str(run / "maps" / name),
                "--no-progress", *extra]  # fmt: skip
        assert map_main(argv) == 0
    assert report_main([str(run)]) == 0
    return run


def _on_fine_grid(coarse: MapFile, shape: tuple[int, int], cells: int) -> MapFile:
    """A coarser map as the viewer places it on the finer grid (same corner): each cell
    ``cells`` x ``cells`` of the grid's, nodata past its edge."""
    values = np.full(shape, NODATA, np.uint8)
    fine = np.repeat(np.repeat(coarse.values, cells, axis=0), cells, axis=1)
    rows, cols = min(shape[0], fine.shape[0]), min(shape[1], fine.shape[1])
    values[:rows, :cols] = fine[:rows, :cols]
    return MapFile(values, coarse.colours, coarse.names)


def test_the_run_page_shows_its_10m_map_beside_the_600m_map(mapped_run: Path, tmp_path):
    from selenium.webdriver.common.by import By

    classes = list(constants.CLASSES_19)
    classes_rgb = {tuple(int(v) for v in c) for c in constants.class_colours(len(classes))}
    fine = MapFile.read(mapped_run / "maps" / "scene.tif", classes)
    coarse = MapFile.read(mapped_run / "maps" / "scene-600m.tif", classes)
    assert fine.values.shape == (240, 240) and coarse.values.shape == (4, 4)
    assert (fine.values == NODATA).any()  # the scene has unobserved pixels to show
    placed = _on_fine_grid(coarse, fine.values.shape, 60)
    page = mapped_run / REPORT
    with open_page(page) as visit:
        assert_self_contained(visit, page)
        wait_until_drawn(visit)
        canvases = viewer_canvases(visit)
        captions = visit.texts("#viewer figcaption")
        assert captions == [
            "maps/scene.tif: 10 m cells, dense head (per pixel)",
            "maps/scene-600m.tif: 600 m cells, classifier (120 px windows)",
        ]
        # Neither map is previewed again below the viewer.
        alts = [i.get_attribute("alt") for i in visit.driver.find_elements(By.CSS_SELECTOR, "img")]
        assert not {"maps/scene.png", "maps/scene-600m.png"} & set(alts)
        size = visit.driver.execute_script(
            "return [arguments[0].clientWidth, arguments[0].clientHeight]", canvases[0]
        )
        fit = min(size[0] / 240, size[1] / 240)
        view = View(120, 120, fit)
        # Pan: the cloud's corner to the centre; zoom in twice.
        target = (92, 62)
        pan_and_zoom(visit, canvases[0], view, target, ZOOMS)
        assert check_map(canvases[0], fine, view, classes_rgb) > 1000
        assert check_map(canvases[1], placed, view, classes_rgb) > 1000
        metres, px = scale_bar(visit)
        assert px == pytest.approx(metres * view.scale / 10.0, abs=0.6)
        assert visit.text("#shown").startswith("shown: 1 image pixel = 10 m (every cell)")
        # The cursor over a pixel of the cloud and one beside it: coordinates in the map's
        # CRS and in degrees, what each map holds.
        with rasterio.open(mapped_run / "maps" / "scene.tif") as src:
            left, top, crs = src.transform.c, src.transform.f, src.crs
        to_lonlat = Transformer.from_crs(crs, "EPSG:4326", always_xy=True)
        for row, col in (target, (target[0] - 4, target[1] - 4)):
            shown = hover(visit, canvases[1], view.offset(row, col))
            assert (int(shown["row"]), int(shown["col"])) == (row, col)
            x, y = (float(shown[k].replace(",", "")) for k in ("x", "y"))
            assert left + col * 10 - 1 <= x <= left + (col + 1) * 10 + 1
            assert top - (row + 1) * 10 - 1 <= y <= top - row * 10 + 1
            lon, lat = to_lonlat.transform(x, y)
            assert float(shown["lat"]) == pytest.approx(lat, abs=3e-5)
            assert float(shown["lon"]) == pytest.approx(lon, abs=3e-5)
            held = [m.names[m.values[row, col]] if m.values[row, col] != NODATA else
                    "not observed" for m in (fine, placed)]  # fmt: skip
            assert shown["held"].split(" | ") == held
        visit.screenshot(tmp_path / "run-viewer.png")
