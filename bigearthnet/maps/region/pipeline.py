"""``bigearthnet-map region``: scenes of a region over time -> a consistent land-cover series.

1. Each scene is mapped (all ranks, :func:`bigearthnet.maps.scene.map_scene`, clouds
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

from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core import distributed
from bigearthnet.core.errors import InputError
from bigearthnet.core.util import first_line
from bigearthnet.maps.region.periods import Acquisition, duplicates
from bigearthnet.maps.region.products import SceneMap, build_products
from bigearthnet.maps.region.series import DEFAULT_PERSISTENCE

log = distributed.log
MAX_GAP_DAYS = 730  # a scene two years from every other is a date typo, not a series


@dataclass(frozen=True)
class RegionOptions:
    out: Path
    run_dir: str | None = None
    model_dir: str | None = None
    checkpoint: str = "best"
    stats_from: str | None = None
    period: str = "month"
    crs: str = "EPSG:3035"
    cell: float = 600.0
    stride: int = 60
    mask_clouds: bool = True
    persistence: float = DEFAULT_PERSISTENCE
    batch_size: int = 64
    progress: bool = True
    scenes_only: bool = False  # map the scenes and stop (a Slurm array task)


def map_region(acquisitions: list[Acquisition], opts: RegionOptions) -> dict | None:
    """Collective: map the scenes, then rank 0 builds the products; rank 0 returns the
    consistency record (None on other ranks, and with ``scenes_only``)."""
    from bigearthnet.inference.predictor import open_predictor
    from bigearthnet.maps.scene import map_scene

    wanted, skipped = _usable(acquisitions)
    predictor = open_predictor(run_dir=opts.run_dir, model_dir=opts.model_dir,
                               checkpoint=opts.checkpoint, stats_from=opts.stats_from)  # fmt: skip
    tags = {**predictor.provenance, "stride_px": str(opts.stride),
            "clouds_masked": str(opts.mask_clouds)}  # fmt: skip
    mapped: list[SceneMap] = []
    for acq in wanted:
        scene_map = SceneMap(acq, opts.out / "scenes" / f"{Path(acq.path).name}.tif")
        stale = _stale(scene_map, tags)
        if stale is None:
            mapped.append(scene_map)  # mapped by an earlier run: the map is written last
            continue
        if stale:
            log.warning("remapping %s: %s", scene_map.path, stale)
        try:
            map_scene(Path(acq.path), out=scene_map.path, stride=opts.stride,
                      resampling=None, batch_size=opts.batch_size, progress=opts.progress,
                      mask_clouds=opts.mask_clouds, predictor=predictor)  # fmt: skip
        except InputError as err:
            log.warning("skipped %s: %s", acq.path, err)
            skipped.append({"path": acq.path, "reason": str(err)})
            continue
        mapped.append(scene_map)
    if not mapped:
        raise InputError(f"no scene of the region could be mapped ({len(skipped)} skipped)")
    if opts.scenes_only or not distributed.is_root():
        return None
    return build_products(opts.out, mapped, period=opts.period, crs=opts.crs, cell=opts.cell,
                          persistence=opts.persistence, tags=tags, skipped=skipped)  # fmt: skip


def _stale(scene_map: SceneMap, tags: dict[str, str]) -> str | None:
    """None when an earlier run left this scene's map made as this run would make it; else
    why it must be (re)made ("" when there is none). A map of another model or settings is
    never reused: the series would silently mix two models."""
    import rasterio

    if not (scene_map.path.is_file() and scene_map.probabilities.is_file()):
        return ""
    try:
        with rasterio.open(scene_map.path) as src:
            found = src.tags()
    except rasterio.RasterioIOError as err:
        return f"unreadable ({first_line(err)})"
    for key, value in tags.items():
        if found.get(key) != value:
            return f"made with {key}={found.get(key)!r}, this run has {value!r}"
    return None


def _usable(acquisitions: list[Acquisition]) -> tuple[list[Acquisition], list[dict]]:
    """The scenes to map, and the skipped ones with their reasons."""
    skipped = []
    second = {id(b) for _, b in duplicates(acquisitions)}
    for first, other in duplicates(acquisitions):
        skipped.append({"path": other.path,
                        "reason": f"a second scene of tile {other.tile} on {other.date} "
                                  f"(the first: {first.path})"})  # fmt: skip
    kept = [a for a in acquisitions if id(a) not in second]
    far = {id(a) for a in kept if _gap_days(a, kept) > MAX_GAP_DAYS}
    for acq in (a for a in kept if id(a) in far):
        skipped.append({"path": acq.path,
                        "reason": f"dated {acq.date}, over {MAX_GAP_DAYS} days from every "
                                  "other scene: outside the series' date range"})  # fmt: skip
    for entry in skipped:
        log.warning("skipped %s: %s", entry["path"], entry["reason"])
    return [a for a in kept if id(a) not in far], skipped


def _gap_days(acq: Acquisition, others: list[Acquisition]) -> float:
    gaps = [abs((o.date - acq.date).days) for o in others if o is not acq]
    return min(gaps) if gaps else 0.0
