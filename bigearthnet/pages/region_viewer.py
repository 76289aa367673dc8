"""What the region page's map viewer (the pages' one viewer: :mod:`.map_viewer`) is given:
each period's raw and consistent maps, ``changes.tif`` and ``first_change.tif`` on the
series' grid, the legends (the classes and the change maps' categories), the grid's
coordinates, and the periods with their cells observed."""

from __future__ import annotations

from pathlib import Path

from bigearthnet.formats import region_folder
from bigearthnet.formats.region_folder import ConsistencyRecord
from bigearthnet.pages.map_viewer import (
    CLASSES,
    categories,
    class_colours,
    class_legend,
    finest_m,
    grid_data,
    lonlat_points,
    pyramid,
)

CHANGE_MAPS = (("first_change", region_folder.FIRST_CHANGE), ("changes", region_folder.CHANGES))


def viewer_data(folder: Path, record: ConsistencyRecord, classes: list[str]) -> dict:
    """The viewer's data for the series in ``folder`` (its record, its classes in order):
    the grid, its coordinates, every map's pyramid and legend, the periods."""
    colours = class_colours(classes)
    maps, legend_of = {}, {}
    for t, label in enumerate(record.periods):
        for kind, subfolder in (("raw", region_folder.PERIODS),
                                ("consistent", region_folder.CONSISTENT)):  # fmt: skip
            maps[f"{kind}-{t}"] = pyramid(folder / subfolder / f"{label}.tif", colours)
            legend_of[f"{kind}-{t}"] = CLASSES
    legends = {CLASSES: class_legend(classes)}
    for key, name in CHANGE_MAPS:
        change_colours, legends[key] = categories(folder / name)
        maps[key] = pyramid(folder / name, change_colours)
        legend_of[key] = key
    return {
        "grid": grid_data(record.grid),
        "lonlat": lonlat_points(record.grid),
        "maps": maps,
        "legend_of": legend_of,
        "periods": list(record.periods),
        "observed": [record.cells_observed[label] for label in record.periods],
        "legends": legends,
        "finest": finest_m(maps, record.grid),
    }
