"""``bigearthnet-map region``: scenes of a region over time -> a consistent land-cover series.

1. Each scene is mapped (all ranks, :func:`bigearthnet.maps.scene.mapping.map_scene`, clouds
   masked by default) into ``DIR/scenes/<name>.tif``, or its map from an earlier run is
   reused: a killed region job redoes only the scenes whose map is missing.
2. A scene that cannot be mapped (unreadable, truncated, other bands), a second scene of
   the same tile and date, and a scene dated far from every other are skipped with their
   reason (in ``consistency.json``); nothing mappable is exit 2.
3. Rank 0 builds the products (:mod:`.products`), unless ``--scenes-only``: a Slurm array
   task maps its share of the scenes, and a dependent step builds the products from all of
   them (``jobs/map_region.sbatch``).
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
from bigearthnet.maps.region.grid import Footprint, RegionGrid
from bigearthnet.maps.region.options import RegionOptions
from bigearthnet.maps.region.periods import Acquisition, duplicates, group_by_period
from bigearthnet.maps.region.products import SceneMap, build_products, memory_needed

log = distributed.log


def map_region(acquisitions: list[Acquisition], opts: RegionOptions) -> ConsistencyRecord | None:
    """Collective: map the scenes, then rank 0 builds the products; rank 0 returns the
    consistency record (None on other ranks, and with ``scenes_only``)."""
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
    tags = {**predictor.provenance, "stride_px": str(opts.stride),
            "clouds_masked": str(opts.mask_clouds)}  # fmt: skip
    return build_products(opts.out, mapped, period=opts.period, crs=opts.crs, cell=opts.cell,
                          persistence=opts.persistence, tags=tags, skipped=skipped)  # fmt: skip


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
    mapped), every scene inside the area of use of ``--crs``, and a grid whose products fit
    in memory; else InputError naming the scene to look at (a stray tile of another
    continent made a grid of 13,506 x 10,846 cells). Returns each readable scene's map tags
    (what its map is made as: :func:`bigearthnet.maps.scene.mapping.scene_map_tags`, with how its
    values are read: ``Scene.values_tags``)."""
    import psutil
    from rasterio.transform import array_bounds

    from bigearthnet.maps.radiometry import RadiometryError
    from bigearthnet.maps.scene.input import Scene
    from bigearthnet.maps.scene.mapping import scene_map_tags

    footprints: dict[str, Footprint] = {}
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
                made_as[acq.path] = scene_map_tags(
                    acq.scene, predictor, stride=opts.stride, resampling=predictor.resampling,
                    mask_clouds=opts.mask_clouds, values=scene.values_tags(),
                )  # fmt: skip
        except RadiometryError:
            raise  # undecidable or contradicted: exit 2 naming it, before any is mapped
        except InputError:
            continue  # mapping it names what is wrong, and skips it
    for path, fp in footprints.items():
        if fp.outside_area_of(opts.crs):
            raise InputError(
                f"{path}: outside the area of use of --crs {opts.crs}: a scene of another "
                "region, or a region for another --crs"
            )
    if not footprints:
        return made_as
    grid = RegionGrid.covering(list(footprints.values()), opts.crs, opts.cell)
    periods = len(group_by_period(wanted, opts.period))
    need = memory_needed(grid, predictor.num_classes, periods)
    free = psutil.virtual_memory().available
    if need > free // 2:
        centres = np.array([fp.centre_in(opts.crs) for fp in footprints.values()])
        farthest = list(footprints)[int(np.argmax(np.abs(centres - np.median(centres, 0)).sum(1)))]
        raise InputError(
            f"--cell {opts.cell:g} --crs {opts.crs}: the region's grid is {grid.width} x "
            f"{grid.height} cells, whose products need {need / 1e9:.1f} GB ({free / 1e9:.1f} GB "
            f"free); the scene farthest from the others is {farthest}"
        )
    return made_as


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
