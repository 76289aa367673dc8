"""The links between a run's page and the maps its model made: which run made a map or a
series (the ``run_dir`` tag of a map, of a series' period maps, which a model from a run and
one from its export both carry), and which series a run made (looked for under its ``maps/`` and
beside it). Links are relative, so a folder copied with its run keeps them."""

from __future__ import annotations

import os
from pathlib import Path

from bigearthnet.formats import region_folder, run_folder
from bigearthnet.pages.map_origin import map_run


def series_run(folder: Path) -> Path | None:
    """The run folder whose model made the region series in ``folder``; None when its maps
    do not say (or cannot be read), or the run is not there."""
    maps = sorted((folder / region_folder.PERIODS).glob("*.tif"))
    return map_run(maps[0], folder) if maps else None


def run_page_of(folder: Path) -> str | None:
    """The page of the run that made the series in ``folder``, relative to it; None when
    the run or its page is not there."""
    run = series_run(folder)
    if run is None or not (run / run_folder.REPORT).is_file():
        return None
    return os.path.relpath(run / run_folder.REPORT, folder)


def region_folders(root: Path, depth: int = 3) -> list[Path]:
    """Region series folders (those with their page) at most ``depth`` levels under ``root``."""
    if not root.is_dir():
        return []
    return sorted(
        page.parent
        for level in range(depth)
        for page in root.glob("/".join(["*"] * level + [region_folder.PAGE]))
    )


def region_pages(run_dir: Path) -> list[str]:
    """The pages of region series made with the model of ``run_dir``, found under its
    ``maps/`` or beside it, relative to the run folder."""
    candidates = region_folders(run_dir / run_folder.MAPS) + region_folders(run_dir.parent, 2)
    mine = run_dir.resolve()
    pages = []
    for folder in dict.fromkeys(candidates):
        made_by = series_run(folder)
        if made_by is not None and made_by.resolve() == mine:
            pages.append(os.path.relpath(folder / region_folder.PAGE, run_dir))
    return pages
