"""``bigearthnet-map region``: scenes of a region over time -> a consistent land-cover series.

1. Each scene is mapped (all ranks, :func:`bigearthnet.maps.scene.mapping.map_scene`, clouds
   masked by default) into ``DIR/scenes/<name>.tif``, or its map from an earlier run is
   reused: a killed region job redoes only the scenes whose map is missing.
2. A scene that cannot be mapped (unreadable, truncated, other bands), a second scene of
   the same tile and date, and a scene dated far from every other are skipped with their
   reason (in ``consistency.json``); nothing mappable is exit 2.
3. Rank 0 builds the products (:mod:`.products`) block by block, unless ``--scenes-only``:
   a Slurm array task maps its share of the scenes, a second array's tasks compute their
   share of the blocks (``--blocks-only K/N``), and a dependent step combines them into the
   products (``jobs/map_region.sbatch``).
"""

from __future__ import annotations

import numpy as np

from bigearthnet.core import distributed
from bigearthnet.core.errors import InputError
from bigearthnet.formats import region_folder
from bigearthnet.formats.class_map import check_complete, linked_tags
from bigearthnet.formats.region_folder import ConsistencyRecord, SkippedScene
from bigearthnet.maps.inputs import MissingScene
from bigearthnet.maps.radiometry import dispute, disputed
from bigearthnet.maps.region.blocks import block_memory, products_disk
from bigearthnet.maps.region.grid import (
    CELL_STEP_M,
    FINEST_CELL_MAP_M,
    Footprint,
    RegionGrid,
    check_map_cell,
)
from bigearthnet.maps.region.options import BLOCK_STEP, RegionOptions
from bigearthnet.maps.region.periods import Acquisition, duplicates, group_by_period
from bigearthnet.maps.region.plan import SceneMap
from bigearthnet.maps.region.products import build_products
from bigearthnet.maps.scene.options import MapKind, map_kind

log = distributed.log


def map_region(acquisitions: list[Acquisition], opts: RegionOptions) -> ConsistencyRecord | None:
    """Collective: map the scenes, then rank 0 builds the products (or its share of their
    blocks); rank 0 returns the consistency record (None on other ranks, with
    ``scenes_only`` and with ``blocks_only``)."""
    from bigearthnet.maps.scene.mapping import map_scene

    region_folder.claim(opts.out)
    wanted, skipped = _usable(acquisitions, opts.max_gap_days)
    predictor = opts.model.open()
    made_as = _check_scenes(wanted, opts, predictor)
    mapped: list[SceneMap] = []
    for acq in wanted:
        path = region_folder.scene_map_path(opts.out, acq.path, acq.tile, acq.date)
        scene_map = SceneMap(acq, path)
        try:
            # An unreadable scene has no tags yet: its map is made, or skipped naming why.
            tags = made_as.get(acq.path)
            stale = _stale(scene_map, tags) if tags is not None else ""
            if stale is None:
                if tags and disputed(tags) and distributed.is_root():  # warned when mapped too
                    log.warning("%s: %s", acq.path, dispute(tags))
                mapped.append(scene_map)  # mapped by an earlier run: the map is written last
                continue
            if stale:
                log.warning("remapping %s: %s", scene_map.path, stale)
            if acq.scene is None:
                raise MissingScene(acq.path)
            map_scene(acq.scene, scene_map.path, opts.scene_map, predictor)
        except InputError as err:
            log.warning("skipped %s: %s", acq.path, err)
            skipped.append(SkippedScene(acq.path, str(err)))
            continue
        mapped.append(scene_map)
    if not mapped:
        raise InputError(f"no scene of the region could be mapped ({len(skipped)} skipped)")
    if opts.scenes_only or not distributed.is_root():
        return None
    kind = map_kind(
        opts, predictor.has_dense_head, opts.model.folder, predictor.provenance["model"]
    )
    tags = {**predictor.provenance, **kind.tags(), "clouds_masked": str(opts.mask_clouds)}
    return build_products(opts.out, mapped, period=opts.period, crs=opts.crs, cell=opts.cell,
                          persistence=opts.persistence, block_size=opts.block_size, tags=tags,
                          skipped=skipped, share=opts.share)  # fmt: skip


def _stale(scene_map: SceneMap, made_as: dict[str, str]) -> str | None:
    """None when an earlier run left this scene's map, complete, made as this run would make
    it (``made_as``: the same scene files, weights, classes and options); else why it must
    be (re)made ("" when there is none). Any other map is never reused: the series would
    silently mix two models, two scenes or stale inputs."""
    import rasterio

    if not scene_map.path.exists() and not scene_map.probabilities.exists():
        return ""
    damage = check_complete(scene_map.path)
    if damage is not None:
        return damage
    with rasterio.open(scene_map.path) as src:
        found = src.tags()
    # As the map keeps them: its paths relative to its folder. A tag written empty is not
    # kept (GDAL drops empty metadata items): missing reads "".
    expected = linked_tags(made_as, scene_map.path.parent)
    differ = [key for key, value in expected.items() if found.get(key, "") != value]
    return f"made with another {', '.join(differ)} than this run's" if differ else None


def _check_scenes(
    wanted: list[Acquisition], opts: RegionOptions, predictor
) -> dict[str, dict[str, str]]:
    """Before the first scene is mapped: no L1C product, every scene's reflectance offset
    decided (:mod:`bigearthnet.maps.radiometry`: metadata and pixels) and its identity taken
    (a digest of its files: an item's links once crashed it offline after other scenes were
    mapped), the scenes of one UTM zone on one 10 m grid, every scene inside the area of use
    of ``--crs``, a model whose maps are as fine as ``--cell`` needs, a block that fits in
    memory and products that fit on the disk; else InputError naming the scene or option
    to look at (a stray tile of another continent made a grid of 13,506 x 10,846 cells).
    Returns each readable scene's map tags (what its map is made as:
    :func:`bigearthnet.maps.scene.mapping.scene_map_tags`, with how its values are read:
    ``Scene.values_tags``)."""
    from rasterio.transform import array_bounds

    from bigearthnet.maps.radiometry import RadiometryError
    from bigearthnet.maps.scene.input import Scene
    from bigearthnet.maps.scene.mapping import check_window_fits, scene_map_tags

    kind = map_kind(
        opts, predictor.has_dense_head, opts.model.folder, predictor.provenance["model"]
    )
    _check_map_cell(opts, kind)
    if kind.pixels:
        check_window_fits(predictor, kind)  # before any scene, no model built
    footprints: dict[str, Footprint] = {}
    phases: dict[str, dict[tuple[float, float], str]] = {}  # CRS -> 10 m grid phase -> a scene
    made_as: dict[str, dict[str, str]] = {}
    for acq in wanted:
        if acq.scene is None:
            continue  # not there: mapping it names it, and skips it
        acq.scene.require_l2a()  # R29: an L1C listed in a CSV was mapped as L2A
        try:
            # Opened as map_scene opens it: the pixels' reading (clouds masked or not) is part
            # of what made a scene map, so its tags here and in the map agree.
            with Scene(acq.scene, bands=tuple(predictor.bands), boa_offset=opts.boa_offset,
                       mask_clouds=opts.mask_clouds) as scene:  # fmt: skip
                bounds = array_bounds(scene.height, scene.width, scene.transform)
                footprints[acq.path] = Footprint(str(scene.crs), bounds)
                phase = (scene.transform.c % CELL_STEP_M, scene.transform.f % CELL_STEP_M)
                phases.setdefault(str(scene.crs), {}).setdefault(_rounded(phase), acq.path)
                made_as[acq.path] = scene_map_tags(
                    acq.scene, predictor, kind=kind, resampling=predictor.resampling,
                    mask_clouds=opts.mask_clouds, values=scene.values_tags(),
                )  # fmt: skip
        except RadiometryError:
            raise  # undecidable or contradicted: exit 2 naming it, before any is mapped
        except InputError:
            continue  # mapping it names what is wrong, and skips it
    _check_one_grid_per_zone(phases)
    for path, fp in footprints.items():
        if fp.outside_area_of(opts.crs):
            raise InputError(
                f"{path}: outside the area of use of --crs {opts.crs}: a scene of another "
                "region, or a region for another --crs"
            )
    if footprints:
        periods = len(group_by_period(wanted, opts.period))
        _check_room(footprints, opts, predictor.num_classes, periods)
    return made_as


def _check_map_cell(opts: RegionOptions, kind: MapKind) -> None:
    """Cell maps (a model without the dense head, or ``--stride``) are of ``--stride`` x
    10 m (60 m at the finest): refused at once for a ``--cell`` under 60 m they cannot
    fill (the products step checks every map it is given by its own cell too); the dense
    head's 10 m maps fill any."""
    if kind.pixels or opts.cell >= FINEST_CELL_MAP_M:
        return
    check_map_cell(kind.cell_m, opts.cell, f"a cell map (--stride {kind.stride}): its scene map")


def _rounded(phase: tuple[float, float]) -> tuple[float, float]:
    """A grid's offset from the 10 m lattice, to the millimetre (a phase of 9.9999 is 0)."""
    return tuple(round(v, 3) % CELL_STEP_M for v in phase)  # type: ignore[return-value]


def _check_one_grid_per_zone(phases: dict[str, dict[tuple[float, float], str]]) -> None:
    """Every Sentinel-2 tile of a UTM zone lies on one 10 m pixel grid. Two scenes of a zone
    whose grids are offset by a fraction of a pixel are refused: one of them was resampled
    or carries a georeferencing error (5 m: a pixel's corner read as its centre), and its
    maps would shift every boundary by that much against the others'."""
    for crs, found in phases.items():
        if len(found) > 1:
            (first, a), (other, b) = list(found.items())[:2]
            dx, dy = ((q - p) % CELL_STEP_M for p, q in zip(first, other))
            raise InputError(
                f"{b}: its 10 m pixel grid is offset by ({dx:g}, {dy:g}) m from that of {a} "
                f"in the same {crs}: Sentinel-2 tiles of a zone share one grid, so one was "
                "resampled or is georeferenced wrong (a 5 m offset: a pixel's corner taken "
                "for its centre); fix or leave out the scene"
            )


def _check_room(footprints: dict[str, Footprint], opts: RegionOptions, classes: int,
                periods: int) -> None:  # fmt: skip
    """A block of the products that fits in half the available memory, and products that
    fit on ``--out``'s disk; else InputError with the figures."""
    import shutil

    import psutil

    need = block_memory(opts.block_size, classes, periods)
    free = psutil.virtual_memory().available
    if need > free // 2:
        fits = [size for size in range(BLOCK_STEP, opts.block_size, BLOCK_STEP)
                if block_memory(size, classes, periods) <= free // 2]  # fmt: skip
        advice = f"take --block-size {fits[-1]}" if fits else "no block size fits: free memory"
        raise InputError(
            f"--block-size {opts.block_size}: a block of the products needs {need / 1e9:.1f} GB "
            f"of memory ({classes} classes, {periods} periods), more than half the "
            f"{free / 1e9:.1f} GB available; {advice}"
        )
    grid = RegionGrid.covering(list(footprints.values()), opts.crs, opts.cell)
    disk = products_disk(grid.width * grid.height, classes, periods)
    space = shutil.disk_usage(opts.out).free  # claimed: it exists
    if disk > space:
        centres = np.array([fp.centre_in(opts.crs) for fp in footprints.values()])
        farthest = list(footprints)[int(np.argmax(np.abs(centres - np.median(centres, 0)).sum(1)))]
        raise InputError(
            f"--cell {opts.cell:g} --crs {opts.crs}: the region's grid is {grid.width:,} x "
            f"{grid.height:,} cells, whose products need {disk / 1e9:,.1f} GB on disk "
            f"({space / 1e9:,.1f} GB free under {opts.out}); the scene farthest from the others "
            f"is {farthest}"
        )


def _usable(
    acquisitions: list[Acquisition], max_gap_days: int
) -> tuple[list[Acquisition], list[SkippedScene]]:
    """The scenes to map, and the skipped ones with their reasons."""
    skipped = []
    second = {id(b) for _, b in duplicates(acquisitions)}
    for first, other in duplicates(acquisitions):
        why = f"a second scene of tile {other.tile} on {other.date} (the first: {first.path})"
        skipped.append(SkippedScene(other.path, why))
    kept = [a for a in acquisitions if id(a) not in second]
    far = {id(a) for a in kept if _gap_days(a, kept) > max_gap_days}
    for acq in (a for a in kept if id(a) in far):
        why = f"dated {acq.date}, over {max_gap_days} days from every other (--max-gap-days)"
        skipped.append(SkippedScene(acq.path, why))
    for entry in skipped:
        log.warning("skipped %s: %s", entry.path, entry.reason)
    return [a for a in kept if id(a) not in far], skipped


def _gap_days(acq: Acquisition, others: list[Acquisition]) -> float:
    gaps = [abs((o.date - acq.date).days) for o in others if o is not acq]
    return min(gaps) if gaps else 0.0
