"""Reading a page's map viewer (bigearthnet/pages/templates/map_viewer.js.j2) as a person
sees it, for the region page's and the run page's tests: the maps' COGs as they hold them,
the view worked out apart from the page, the canvases' pixels on screen checked cell by
cell against the COGs, a drag, the cursor's line, the scale bar."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from browser import PageVisit

from bigearthnet.formats.class_map import NODATA, read_category_names

HATCH = {(255, 255, 255), (154, 154, 154)}  # the page's hatch of unobserved cells
BACKGROUND = (238, 240, 243)  # the canvas outside the grid


@dataclass(frozen=True)
class MapFile:
    """A map as its COG holds it: values, the colour of each, and names (category or class)."""

    values: np.ndarray
    colours: dict[int, tuple[int, int, int]]
    names: list[str]

    @classmethod
    def read(cls, path: Path, names: list[str] | None = None) -> MapFile:
        with rasterio.open(path) as src:
            values = src.read(1)
            colours = {v: tuple(c[:3]) for v, c in src.colormap(1).items() if v != NODATA}
        return cls(values, colours, names if names is not None else read_category_names(path))


@dataclass
class View:
    """The view the viewer should show, worked out from what was done to it: the grid
    cell at the canvases' centre and screen px a cell."""

    cx: float
    cy: float
    scale: float

    def offset(self, row: float, col: float) -> tuple[int, int]:
        """Screen px from a canvas's centre to the centre of cell (row, col), rounded."""
        return round((col + 0.5 - self.cx) * self.scale), round((row + 0.5 - self.cy) * self.scale)


def viewer_canvases(visit: PageVisit) -> list:
    from selenium.webdriver.common.by import By

    return visit.driver.find_elements(By.CSS_SELECTOR, "#viewer canvas")  # type: ignore[attr-defined]


def screen_of(canvas) -> np.ndarray:
    """The canvas's content box as shown on screen, (h, w, 3) RGB (the 1 px border cut)."""
    from PIL import Image

    shot = np.asarray(Image.open(io.BytesIO(canvas.screenshot_as_png)).convert("RGB"))
    return shot[1:-1, 1:-1]


def check_map(canvas, shown: MapFile, view: View, classes_rgb: set) -> int:
    """Every cell whose square lies wholly on the canvas: its centre in its value's colour,
    or hatched where it is unobserved (two colours, no class's); returns cells checked."""
    screen = screen_of(canvas)
    height, width = screen.shape[:2]
    half = view.scale / 2
    rows, cols = shown.values.shape
    checked = unobserved = 0
    for row in range(rows):
        for col in range(cols):
            x = width / 2 + (col + 0.5 - view.cx) * view.scale
            y = height / 2 + (row + 0.5 - view.cy) * view.scale
            if not (half <= x < width - half and half <= y < height - half):
                continue
            value = int(shown.values[row, col])
            if value == NODATA:
                inner = int(0.3 * view.scale)
                square = screen[int(y) - inner : int(y) + inner, int(x) - inner : int(x) + inner]
                found = {tuple(int(v) for v in px) for px in square.reshape(-1, 3)}
                assert len(found) >= 2 and not found & classes_rgb, (row, col, found)
                unobserved += 1
            else:
                pixel = tuple(int(v) for v in screen[int(y), int(x)])
                assert pixel == shown.colours[value], (row, col, value, pixel)
            checked += 1
    return checked


def drag(visit: PageVisit, canvas, dx: int, dy: int) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    chain = ActionChains(visit.driver).move_to_element(canvas).click_and_hold()  # type: ignore[arg-type]
    chain.move_by_offset(dx, dy).release().perform()


def pan_and_zoom(
    visit: PageVisit, canvas, view: View, target: tuple[float, float], zooms: int
) -> None:
    """Drag ``target`` (map px) to the canvas's centre, press "+" ``zooms`` times, and move
    ``view`` as the page moved; returns once the maps are drawn again."""
    from browser import wait_until_drawn
    from selenium.webdriver.common.by import By

    dx, dy = (-v for v in view.offset(*target))
    drag(visit, canvas, dx, dy)
    view.cx -= dx / view.scale
    view.cy -= dy / view.scale
    plus = visit.driver.find_element(By.ID, "zoom-in")
    for _ in range(zooms):
        plus.click()
    view.scale *= 2**zooms
    wait_until_drawn(visit)


def hover(visit: PageVisit, canvas, offset: tuple[int, int]) -> dict:
    """The cursor line when pointing at ``offset`` px from the canvas's centre, parsed."""
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(visit.driver).move_to_element_with_offset(canvas, *offset).perform()  # type: ignore[arg-type]
    return cursor(visit)


CURSOR = re.compile(
    r"x (?P<x>[\d,]+) m, y (?P<y>[\d,]+) m \((?P<crs>[^)]+)\); (?P<lat>[\d.]+)° (?P<ns>[NS]), "
    r"(?P<lon>[\d.]+)° (?P<ew>[EW]); cell row (?P<row>\d+), column (?P<col>\d+): (?P<held>.*)"
)


def cursor(visit: PageVisit) -> dict:
    text = visit.text("#cursor")
    found = CURSOR.fullmatch(text)
    assert found, text
    return found.groupdict()


def scale_bar(visit: PageVisit) -> tuple[float, float]:
    """(the bar's label in metres, the distance between its ticks' centres in px)."""
    label = visit.text("#scalebar-label")
    number, unit = label.split()
    width = visit.driver.execute_script(  # type: ignore[attr-defined]
        "return document.getElementById('scalebar-bar').getBoundingClientRect().width"
    )
    return float(number) * (1000 if unit == "km" else 1), float(width) - 2  # 2 px ticks
