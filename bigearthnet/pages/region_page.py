"""``DIR/region.html``: one self-contained page for a region series (``bigearthnet-map
region``), from the folder's files alone: the periods one after the other (a selector of
periods, raw and consistent maps side by side, no script), class areas over time, the
transitions from the first to the last period, the consistency figures and the scenes used
and skipped, and a link to the page of the run whose model made it. Maps are inlined as PNG,
the chart as SVG: it opens offline after ``scp``. Areas are shown to the decimals of one
cell (:func:`bigearthnet.core.display.area_decimals`)."""

from __future__ import annotations

import base64
import csv
import datetime
import io
from collections import defaultdict
from pathlib import Path

import numpy as np

from bigearthnet.core import constants, display
from bigearthnet.formats import region_folder
from bigearthnet.formats.class_map import NODATA, read_classes
from bigearthnet.pages import run_figures
from bigearthnet.pages.region_link import run_page_of
from bigearthnet.pages.render import svg, write_page

PIXELS_PER_CELL_MAX = 8


def write_region_page(folder: Path) -> Path:
    """Write ``folder/region.html`` from the products of ``bigearthnet-map region``."""
    record = region_folder.read_consistency(folder)
    periods_of = list(record.periods)
    classes = _classes(folder, periods_of[0])
    periods = [
        {
            "label": label,
            "raw": _png(folder / "periods" / f"{label}.tif", classes),
            "consistent": _png(folder / "consistent" / f"{label}.tif", classes),
            "observed": record.cells_observed[label],
        }
        for label in periods_of
    ]
    areas = _areas(folder / "areas.csv", periods_of)
    decimals = display.area_decimals((record.grid.cell_m / 1000) ** 2)  # equal-area cells
    plt = run_figures.pyplot()
    figure = _areas_figure(plt, areas, periods_of, classes)
    chart = svg(figure, title="class areas per period, consistent series")
    plt.close(figure)
    return write_page(
        folder / region_folder.PAGE,
        "region.html.j2",
        record=record,
        periods=periods,
        chart=chart,
        legend=_legend(classes, areas),
        transitions=_first_to_last(folder / "transitions.csv", periods_of, decimals),
        skipped=[
            (display.shown_path(s.path, folder), display.shown_text(s.reason, folder))
            for s in record.skipped
        ],
        run_page=run_page_of(folder),
        written=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    )


def _classes(folder: Path, label: str) -> list[str]:
    import rasterio

    path = folder / region_folder.PERIODS / f"{label}.tif"
    with rasterio.open(path) as src:
        return read_classes(src.tags(), path)


def _png(path: Path, classes: list[str]) -> str:
    """The class map as a data: URI, CORINE colours, nodata white, cells as square blocks."""
    import rasterio
    from PIL import Image

    with rasterio.open(path) as src:
        labels = src.read(1)
    colours = constants.class_colours(len(classes))
    rgb = np.full((*labels.shape, 3), 255, np.uint8)
    known = labels != NODATA
    rgb[known] = colours[labels[known]]
    scale = max(1, min(PIXELS_PER_CELL_MAX, 480 // max(labels.shape)))
    image = Image.fromarray(rgb).resize(
        (labels.shape[1] * scale, labels.shape[0] * scale), Image.Resampling.NEAREST
    )
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _areas(path: Path, periods: list[str]) -> dict[str, list[float]]:
    """class -> km² per period of the consistent series."""
    found: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(periods))
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["series"] == "consistent":
                found[row["class"]][periods.index(row["period"])] = float(row["km2"])
    return dict(found)


def _areas_figure(plt, areas: dict[str, list[float]], periods: list[str], classes: list[str]):
    colours = constants.class_colours(len(classes)) / 255.0
    figure, axis = plt.subplots(figsize=(8, 3.2))
    for name, values in sorted(areas.items(), key=lambda item: -max(item[1])):
        axis.plot(periods, values, marker="o", color=colours[classes.index(name)], label=name)
    axis.set_ylabel("km²")
    axis.set_xlabel("period")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def _legend(classes: list[str], areas: dict[str, list[float]]) -> list[dict]:
    colours = constants.class_hex_colours(len(classes))
    return [
        {"name": name, "colour": f"#{colours[index]}"}
        for index, name in enumerate(classes)
        if name in areas
    ]


def _first_to_last(path: Path, periods: list[str], decimals: int) -> list[dict]:
    """The first -> last rows of transitions.csv, largest first, km² shown to ``decimals``."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = [
            row
            for row in csv.DictReader(f)
            if row["from_period"] == periods[0] and row["to_period"] == periods[-1]
        ]
    rows.sort(key=lambda r: -float(r["km2"]))
    return [{**row, "km2": display.km2(float(row["km2"]), decimals)} for row in rows]
