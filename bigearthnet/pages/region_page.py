"""``DIR/region.html``: one self-contained page for a region series (``bigearthnet-map
region``), from the folder's files alone: a map viewer (each period's raw and consistent maps
and a change map side by side, zoom and pan, a scale bar, the cursor's coordinates in the
grid's CRS and in longitude and latitude, unobserved cells hatched: no class has a pattern;
the pages' one viewer, :mod:`.map_viewer`, its data :mod:`.region_viewer`), class areas over
time, the transitions from the first to the last period, the consistency figures and the
scenes used and skipped, and a link to the page of the run whose model made it. It opens
offline after ``scp``: no request, one inline script of the project's own
(``templates/map_viewer.js.j2``), maps inlined as PNG, the chart as SVG. Areas are shown to
the decimals of one cell (:func:`bigearthnet.core.display.area_decimals`)."""

from __future__ import annotations

import csv
import datetime
from collections import defaultdict
from pathlib import Path

from bigearthnet.core import constants, display
from bigearthnet.formats import region_folder
from bigearthnet.formats.class_map import read_classes
from bigearthnet.pages import run_figures
from bigearthnet.pages.region_link import run_page_of
from bigearthnet.pages.region_viewer import viewer_data
from bigearthnet.pages.render import svg, write_page


def write_region_page(folder: Path) -> Path:
    """Write ``folder/region.html`` from the products of ``bigearthnet-map region``."""
    record = region_folder.read_consistency(folder)
    periods_of = list(record.periods)
    classes = _classes(folder, periods_of[0])
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
        periods=[
            {"label": label, "observed": record.cells_observed[label]} for label in periods_of
        ],
        viewer=viewer_data(folder, record, classes),
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
