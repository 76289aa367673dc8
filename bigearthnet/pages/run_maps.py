"""The run page's map viewer (the region page's: :mod:`.map_viewer`): the run's scene maps
under ``RUN/maps/``, read at their own cell, the finest (a 10 m map from the dense head)
and beside it, in the same view, the run's other maps of that scene (its 600 m cell map:
the difference the dense head makes).

Only maps of this run are shown: a scene map that is not complete (truncated, its
probabilities companion missing: :func:`~bigearthnet.formats.class_map.check_complete`) or
that another run's model made (its ``run_dir`` tag names another run, or its weights'
digest is not that of the checkpoint or export it names: :mod:`.map_origin`) is left out
of the viewer and of the previews, and the page says which and why. A map of this run on
another grid (another scene, another CRS, an origin off the finest map's cells) keeps its
preview."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bigearthnet.core import constants, display
from bigearthnet.core.util import first_line
from bigearthnet.formats.class_map import areas_path, check_complete, read_classes
from bigearthnet.formats.region_folder import GridRecord
from bigearthnet.pages.map_origin import made_by_these_weights, map_run, map_tags
from bigearthnet.pages.map_viewer import (
    CLASSES,
    class_colours,
    class_legend,
    finest_m,
    grid_data,
    lonlat_points,
    pyramid,
)

MAX_SHOWN = 3  # maps side by side in the viewer
GRID_TOLERANCE = 1e-6  # of a cell: an origin or a cell size within it is on the grid


@dataclass(frozen=True)
class SceneMapFile:
    """A scene map of the run as the viewer places it."""

    path: Path
    name: str  # relative to the run folder
    grid: GridRecord
    classes: list[str]
    head: str  # what made it, as its tags say ("" for a map made before they did)


@dataclass(frozen=True)
class RunMaps:
    """What the run page shows of its scene maps: the viewer's data and the maps in it (none
    without a scene map of this run), the classes' legend, the maps left out and why, and
    the maps the previews leave out (shown in the viewer, or left out)."""

    viewer: dict | None = None
    shown: list[SceneMapFile] = field(default_factory=list)
    legend: list[dict] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    not_previewed: frozenset[Path] = frozenset()


def run_maps(run_dir: Path, maps_dir: Path, regions: list[Path]) -> RunMaps:
    """The scene maps under ``maps_dir`` (those of region series in ``regions`` excepted:
    their own page shows them) as the run page shows them."""
    found = sorted(
        path
        for path in maps_dir.rglob("*.tif")
        if areas_path(path).is_file() and not any(path.is_relative_to(r) for r in regions)
    )
    mine, left_out, hidden = [], [], set()
    for path in found:
        name = display.shown_path(path, run_dir)
        problem = _problem(path, run_dir)
        if problem is None:
            try:
                mine.append(_read(path, name))
                continue
            except ValueError as err:
                problem = first_line(err).removeprefix(f"{path}: ")
        left_out.append(f"{name}: {problem}; not shown")
        hidden.add(path)
    if not mine:
        return RunMaps(left_out=left_out, not_previewed=frozenset(hidden))
    lead = min(mine, key=lambda m: (m.grid.cell_m, m.name))
    shown = [lead, *[m for m in mine if m is not lead and _on_grid(m, lead)]][:MAX_SHOWN]
    colours = class_colours(lead.classes)
    maps = {f"m{i}": pyramid(m.path, colours, cells=round(m.grid.cell_m / lead.grid.cell_m),
                             at=_origin(m, lead)) for i, m in enumerate(shown)}  # fmt: skip
    viewer = {
        "grid": grid_data(lead.grid),
        "lonlat": lonlat_points(lead.grid),
        "maps": maps,
        "legend_of": dict.fromkeys(maps, CLASSES),
        "legends": {CLASSES: class_legend(lead.classes)},
        "finest": finest_m(maps, lead.grid),
    }
    hex_colours = constants.class_hex_colours(len(lead.classes))
    legend = [{"name": c, "colour": f"#{hex_colours[i]}"} for i, c in enumerate(lead.classes)]
    hidden.update(m.path for m in shown)
    return RunMaps(viewer, shown, legend, left_out, frozenset(hidden))


def _problem(path: Path, run_dir: Path) -> str | None:
    """Why the scene map at ``path`` is not shown as this run's, or None."""
    incomplete = check_complete(path)
    if incomplete is not None:
        return f"not complete ({incomplete})"
    made_by = map_run(path)
    if made_by is None:
        return "its tags name no run that is here"
    if made_by.resolve() != run_dir.resolve():
        return f"made by another run's model ({made_by.resolve().name})"
    if not made_by_these_weights(path, map_tags(path) or {}):
        return ("made by other weights than those of the checkpoint or export its tags name "
                "(another run's map, or a model retrained since)")  # fmt: skip
    return None


def _read(path: Path, name: str) -> SceneMapFile:
    import rasterio

    with rasterio.open(path) as src:
        tags = src.tags()
        a, b, left, d, e, top = tuple(src.transform)[:6]
        if b or d or e != -a:
            raise ValueError(f"{path}: not a north-up grid of square cells")
        grid = GridRecord(str(src.crs), a, src.width, src.height, (a, b, left, d, e, top))
    return SceneMapFile(path, name, grid, read_classes(tags, path), tags.get("head", ""))


def _origin(m: SceneMapFile, lead: SceneMapFile) -> tuple[int, int]:
    """The lead's grid column and row of ``m``'s top-left corner."""
    cell = lead.grid.cell_m
    return (round((m.grid.transform[2] - lead.grid.transform[2]) / cell),
            round((lead.grid.transform[5] - m.grid.transform[5]) / cell))  # fmt: skip


def _on_grid(m: SceneMapFile, lead: SceneMapFile) -> bool:
    """Whether ``m`` lies on the lead's grid (same CRS and classes, a whole number of its
    cells a cell, its corner on a cell's) and overlaps it."""
    cell = lead.grid.cell_m
    ratio = m.grid.cell_m / cell
    shifts = ((m.grid.transform[2] - lead.grid.transform[2]) / cell,
              (lead.grid.transform[5] - m.grid.transform[5]) / cell)  # fmt: skip
    aligned = all(abs(v - round(v)) <= GRID_TOLERANCE for v in (ratio, *shifts))
    if m.grid.crs != lead.grid.crs or m.classes != lead.classes or not aligned:
        return False
    left, bottom, right, top = m.grid.bounds
    l2, b2, r2, t2 = lead.grid.bounds
    return left < r2 and l2 < right and bottom < t2 and b2 < top
