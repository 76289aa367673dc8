"""What a region series' products are made of, settled before any block is computed: the
grid, the periods with their dates and scene maps in a fixed order, the classes, how each
map goes onto the grid, the blocks, and a digest of all of it. Block results are combined
only under the digest they were made with, so a block computed by another process (a Slurm
task's share) or before a kill is reused only when everything that made it still matches.

Each scene map is taken as what it is, read from its file: its grid, its footprint, its
cell (a classifier's cell map, 60 to 1,200 m; the dense head's map, 10 m) and what its
probabilities are (its ``head`` tag: the dense head's softmax, exclusive classes, or a
classifier's independent sigmoid scores; the smoother weighs the two differently,
:func:`~.series.viterbi`). A grid finer than 60 m takes only maps at least as fine
(:func:`~.grid.check_map_cell`); a series takes maps of one head only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from rasterio.warp import Resampling

from bigearthnet.core.errors import InputError
from bigearthnet.formats.class_map import DENSE_HEAD, HEAD_TAG, probabilities_path, read_classes
from bigearthnet.maps.region.grid import (
    Footprint,
    GridWindow,
    RegionGrid,
    check_map_cell,
    map_resampling,
    window_of,
)
from bigearthnet.maps.region.periods import Acquisition, group_by_period

LAYOUT = 1  # the blocks' files and figures; another layout is another digest


@dataclass(frozen=True)
class SceneMap:
    """A mapped scene: its acquisition and its map file (probabilities beside it)."""

    acquisition: Acquisition
    path: Path

    @property
    def probabilities(self) -> Path:
        return probabilities_path(self.path)


@dataclass(frozen=True)
class MapOnGrid:
    """A scene map placed on the grid: its cells there, its footprint's centre (the overlap
    rule's distance) and how its probabilities are resampled."""

    scene: SceneMap
    window: GridWindow
    centre: tuple[float, float]
    resampling: Resampling


@dataclass(frozen=True)
class SeriesPlan:
    """The series to compute: per period (in time order) its dates, per date its maps."""

    grid: RegionGrid
    classes: tuple[str, ...]
    labels: tuple[str, ...]  # the periods
    periods: tuple[tuple[tuple[MapOnGrid, ...], ...], ...]
    persistence: float
    block_size: int
    digest: str
    exclusive: bool  # the maps' probabilities are the dense head's softmax

    @classmethod
    def of(
        cls,
        scenes: list[SceneMap],
        *,
        period: str,
        crs: str,
        cell: float,
        persistence: float,
        block_size: int,
    ) -> SeriesPlan:
        """InputError naming the map when a scene map is coarser than a grid under 60 m
        takes, or made by another head than the first map."""
        import rasterio

        footprints, cells, heads = {}, {}, {}
        for scene in scenes:  # each map's grid read once
            with rasterio.open(scene.path) as src:
                footprints[scene.path] = Footprint(str(src.crs), tuple(src.bounds))  # type: ignore[arg-type]
                cells[scene.path] = abs(float(src.transform.a))
                heads[scene.path] = src.tags().get(HEAD_TAG, "")
            check_map_cell(cells[scene.path], cell, f"the scene map {scene.path}")
        exclusive = _exclusive(scenes, heads)
        with rasterio.open(scenes[0].probabilities) as src:
            classes = tuple(read_classes(src.tags(), scenes[0].probabilities))
        grid = RegionGrid.covering(list(footprints.values()), crs, cell)

        def placed(scene: SceneMap) -> MapOnGrid:
            fp = footprints[scene.path]
            window = window_of(grid, fp)
            assert window is not None  # the grid covers every scene's footprint
            return MapOnGrid(scene, window, fp.centre_in(grid.crs),
                             map_resampling(cells[scene.path], grid.cell))  # fmt: skip

        groups = group_by_period([s.acquisition for s in scenes], period)
        periods = []
        for members in groups.values():
            of_period = [s for s in scenes if s.acquisition in members]
            dates = sorted({s.acquisition.date for s in of_period})
            # Maps of a date in the order of their names: the overlap rule's ties, and so
            # the products, do not depend on the order the scenes were given in.
            periods.append(tuple(
                tuple(placed(s) for s in sorted(of_period, key=lambda s: s.path.name)
                      if s.acquisition.date == date)
                for date in dates))  # fmt: skip
        labels = tuple(groups)
        made_of = {
            "layout": LAYOUT, "grid": asdict(grid.record()), "classes": classes,
            "periods": labels, "persistence": persistence, "block_size": block_size,
            "exclusive": exclusive,
            "maps": [[[_identity(m.scene) for m in date] for date in p] for p in periods],
        }  # fmt: skip
        digest = hashlib.sha256(json.dumps(made_of, default=str).encode()).hexdigest()[:16]
        return cls(
            grid, classes, labels, tuple(periods), persistence, block_size, digest, exclusive
        )

    @property
    def maps(self) -> list[MapOnGrid]:
        return [m for period in self.periods for date in period for m in date]

    def blocks(self, share: tuple[int, int] | None = None) -> list[GridWindow]:
        """The grid's blocks, row by row; with ``share`` (K, N) every N-th from the K-th:
        neighbouring blocks go to different shares, so each share holds its part of the
        scenes' footprints whatever the region's shape."""
        every = self.grid.blocks(self.block_size)
        if share is None:
            return every
        k, n = share
        return every[k - 1 :: n]


def _exclusive(scenes: list[SceneMap], heads: dict[Path, str]) -> bool:
    """Whether the maps' probabilities are the dense head's softmax; InputError naming the
    first map of another head than the first one's (their probabilities are not alike: a
    mean of the two kinds is neither)."""
    first = heads[scenes[0].path]
    for scene in scenes:
        if heads[scene.path] != first:
            raise InputError(f"the scene map {scene.path}: made by "
                             f"{heads[scene.path] or 'no head tag'!r}, "
                             f"{scenes[0].path.name} by {first or 'no head tag'!r}: map every "
                             "scene with one model and head")  # fmt: skip
    return first == DENSE_HEAD


def _identity(scene: SceneMap) -> list:
    """A scene map as the blocks depend on it: its name, and its files' sizes and times (a
    map remade has other ones)."""
    stats = [path.stat() for path in (scene.path, scene.probabilities)]
    return [scene.path.name, *((s.st_size, s.st_mtime_ns) for s in stats)]
