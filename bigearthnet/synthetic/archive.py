"""Synthetic BigEarthNet archives in the real on-disk formats, with a learnable labelling rule.

``generate_archive`` (CLI: ``bigearthnet-synth``, :mod:`bigearthnet.cli.synth`) writes small
archives that readers, preprocessing, training and benchmarks can consume exactly like the
real data (the rule and rendering: :mod:`bigearthnet.synthetic.render`; the GeoTIFF
writing: :mod:`bigearthnet.synthetic.tiff`):

* ``v1``: ``OUT/<name>/<name>_<BAND>.tif`` for the 12 L2A bands plus
  ``<name>_labels_metadata.json`` (43-class labels, UTM corner coordinates, WKT projection,
  L1C tile source, acquisition date). Names look like ``S2A_MSIL2A_20170617T113321_36_85``;
  some drop the hour's leading zero (``..._20180510T94033_19_86``) as the real archive does.
* ``v2`` (reBEN): ``OUT/BigEarthNet-S2/<tile>/<patch_id>/<patch_id>_<BAND>.tif`` (nodata=0),
  ``OUT/metadata.parquet`` (19-class labels, 60/20/20 train/validation/test split, country,
  S1 and v1 names, snow/cloud flags) and ``OUT/metadata_for_patches_with_snow_cloud_or_shadow
  .parquet`` for the ~7 % of patches that are snowy or cloudy (on disk, not in the first file);
  ``OUT/Reference_Maps/<tile>/<patch_id>/<patch_id>_reference_map.tif`` (CORINE codes, as
  reBEN's) and, outside the layout, ``OUT/truth_maps.h5`` (:mod:`.reference_maps`).
* with ``s1`` (``--s1``), each patch's Sentinel-1 VV/VH as float32 dB GeoTIFFs: v2 in
  ``OUT/BigEarthNet-S1/<product>/<s1_name>/`` (named by ``s1_name``), v1 as the separate S1
  v1.0 archive ``OUT/BigEarthNet-S1-v1.0/<s1_name>/`` with labels JSONs naming the S2 patch.

GeoTIFFs are uint16, one band each, uncompressed and striped, 120/60/20 px for the 10/20/60 m
bands, in a WGS 84 / UTM north CRS (EPSG:326zz, several zones per archive) with a shared
upper-left corner. Patches of one Sentinel-2 tile lie on its 1.2 km grid:
``ulx = tile_x0 + col * 1200``, ``uly = tile_y0 - row * 1200``.

The labelling rule (identical for every archive, whatever the seed) is described and drawn
by :mod:`bigearthnet.synthetic.render`.

The archive seed only decides tiles, names, dates, which patches get which classes, region
shapes, textures and noise. Same seed -> byte-identical GeoTIFFs and identical metadata,
whatever ``workers`` is. Output is written to a folder beside OUT and renamed at the end
(:func:`bigearthnet.core.folders.publishing`), so an interrupted run never leaves a
complete-looking OUT, and ``--overwrite`` replaces only an archive this command made.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bigearthnet.core.constants import (
    CLASSES_19,
    CLASSES_43,
    DROPPED_IN_19,
    MAP_43_TO_19,
    PATCH_METRES,
)
from bigearthnet.core.declare import check_fields, option, reuse
from bigearthnet.core.errors import ConfigError, require_positive_int
from bigearthnet.core.folders import Owner, Replacing, check_output, publishing
from bigearthnet.core.room import Needs, check_room
from bigearthnet.formats.archive_origin import MARK as SYNTHETIC_MARK
from bigearthnet.formats.archive_origin import write_synthetic_mark
from bigearthnet.formats.truth_maps import TRUTH_MAPS
from bigearthnet.preprocessing.archive import V2_MAPS_DIR, V2_METADATA, V2_S2_DIR, V2_SNOW_CLOUD
from bigearthnet.preprocessing.sentinel1 import V1_S1_ARCHIVE, V2_S1_DIR
from bigearthnet.synthetic import sizes
from bigearthnet.synthetic.landscape import v1_classes
from bigearthnet.synthetic.look import LOOKS, SyntheticLook
from bigearthnet.synthetic.metadata import v1_labels_json, v1_s1_json, write_v2_tables
from bigearthnet.synthetic.places import plan_tiles, region_of, stamp
from bigearthnet.synthetic.reference_maps import write_truths
from bigearthnet.synthetic.render import (
    PatchJob,
    class_signatures,
    render_patch,
    representative43,
)
from bigearthnet.synthetic.tiff import write_band, write_jobs
from bigearthnet.synthetic.truth_table import TRUTH_FILE, write_truth

__all__ = [
    "LAYOUTS",
    "SyntheticPatch",
    "class_signatures",
    "ArchiveSpec",
    "generate_archive",
    "render_patch",
    "write_band",
]

LAYOUTS: tuple[str, ...] = ("v1", "v2")

_DROPPED_EXTRA_PROB = 0.12
_PATCHES_PER_TILE = 100
_TILE_GRID = 90  # a 109.8 km Sentinel-2 tile holds ~90 x 90 patches of 1.2 km


@dataclass(frozen=True)
class SyntheticPatch:
    """One generated patch: its name (v1 name or v2 patch_id), labels and location."""

    name: str
    labels: tuple[str, ...]  # 43-class names (v1) or 19-class names (v2)
    split: str | None  # train/validation/test for v2, None for v1
    crs: str  # "EPSG:326zz"
    ulx: int
    uly: int
    snow_or_cloud: bool = False  # v2 only: listed in the snow/cloud parquet, not metadata.parquet


@functools.cache
def _sources19() -> tuple[tuple[int, ...], ...]:
    return tuple(
        tuple(sorted(i for i, j in MAP_43_TO_19.items() if j == k)) for k in range(len(CLASSES_19))
    )


def _num_regions(rng: np.random.Generator) -> int:
    return int(rng.choice(3, p=(0.3, 0.4, 0.3))) + 1


def _draw_classes_v1(rng: np.random.Generator) -> tuple[int, ...]:
    """43-class indices, one per region; >= 1 of them survives in the 19-class map."""
    k = _num_regions(rng)
    with_dropped = k >= 2 and rng.random() < _DROPPED_EXTRA_PROB
    # Drawing the 19-class group first balances the 19 labels most experiments train on.
    groups = rng.choice(len(CLASSES_19), size=k - int(with_dropped), replace=False)
    classes = [int(rng.choice(_sources19()[g])) for g in groups]
    if with_dropped:
        classes.append(int(rng.choice(DROPPED_IN_19)))
    return tuple(classes)


def _draw_classes_v2(rng: np.random.Generator) -> tuple[int, ...]:
    """19-class indices, one per region."""
    return tuple(int(c) for c in rng.choice(len(CLASSES_19), size=_num_regions(rng), replace=False))


def _v2_splits(rng: np.random.Generator, num_patches: int, train: float = 0.6) -> list[str]:
    """A random train/validation/test assignment with exact counts: ``train``, then the
    rest halved (60/20/20 simple, 50/25/25 as reBEN realistic)."""
    n_train = round(train * num_patches)
    n_val = round((1 - train) / 2 * num_patches)
    ordered = ["train"] * n_train + ["validation"] * n_val
    ordered += ["test"] * (num_patches - len(ordered))
    return [ordered[i] for i in rng.permutation(num_patches)]


def plan_archive(
    num_patches: int, layout: str, seed: int, s1: bool = False, difficulty: str = "simple"
) -> tuple[list[SyntheticPatch], list[PatchJob], list[dict]]:
    """Decide every name, place, date, label and split from the seed (no pixels yet);
    ``s1`` adds each patch's Sentinel-1 folder (the same plan otherwise). The look of
    ``difficulty`` shares the splits, picks the snowy and cloudy patches and (realistic)
    draws labels from a truth (:mod:`bigearthnet.synthetic.look`)."""
    look = LOOKS[difficulty]
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0]))
    tiles = plan_tiles(rng, min(num_patches, max(2, math.ceil(num_patches / _PATCHES_PER_TILE))))
    tile_of = [i % len(tiles) for i in range(num_patches)]
    cells: list[list[int]] = [
        [int(c) for c in rng.choice(_TILE_GRID**2, size=tile_of.count(t), replace=False)]
        for t in range(len(tiles))
    ]
    v2 = layout == "v2"
    splits = _v2_splits(rng, num_patches, look.train_share) if v2 else [None] * num_patches
    overlays = look.overlays(rng, num_patches) if v2 else [None] * num_patches
    representative = representative43()
    patches, jobs, rows = [], [], []
    for i in range(num_patches):
        tile = tiles[tile_of[i]]
        cell = cells[tile_of[i]].pop()
        col, row = cell % _TILE_GRID, cell // _TILE_GRID
        ulx, uly = tile.x0 + col * PATCH_METRES, tile.y0 - row * PATCH_METRES
        v1_name = f"{tile.mission}_MSIL2A_{stamp(tile.when, tile.strip_hour)}_{col}_{row}"
        s1_product = f"{tile.s1_mission}_IW_GRDH_1SDV_{tile.s1_when:%Y%m%dT%H%M%S}"
        s1_name = f"{s1_product}_{tile.mgrs}_{col}_{row}"
        s1_json = None
        epsg = 32600 + tile.zone
        truth = look.patch_truth(rng)
        if layout == "v1":
            classes = v1_classes(rng, truth.labels) if truth else _draw_classes_v1(rng)
            labels = tuple(CLASSES_43[c] for c in sorted(set(classes)))
            name, rel_dir, rows_sig = v1_name, v1_name, classes
            metadata, nodata, map_dir = v1_labels_json(tile, labels, ulx, uly), None, None
            s1_dir = f"{V1_S1_ARCHIVE}/{s1_name}"
            s1_json = v1_s1_json(labels, v1_name)
        else:
            classes = truth.labels if truth else _draw_classes_v2(rng)
            labels = tuple(CLASSES_19[c] for c in sorted(classes))
            name = (
                f"{tile.mission}_MSIL2A_{tile.when:%Y%m%dT%H%M%S}_N9999_R{tile.orbit:03d}"
                f"_T{tile.mgrs}_{col}_{row}"
            )
            rel_dir = f"{V2_S2_DIR}/{name.rsplit('_', 2)[0]}/{name}"
            s1_dir = f"{V2_S1_DIR}/{s1_product}/{s1_name}"
            rows_sig = tuple(representative[c] for c in classes)
            metadata, nodata, map_dir = None, 0, rel_dir.replace(V2_S2_DIR, V2_MAPS_DIR, 1)
            rows.append(
                {
                    "patch_id": name,
                    "labels": list(labels),
                    "split": splits[i],
                    "country": tile.country,
                    "s1_name": s1_name,
                    "s2v1_name": v1_name,
                    "contains_seasonal_snow": overlays[i] == "snow",
                    "contains_cloud_or_shadow": overlays[i] == "cloud",
                }
            )
        patches.append(
            SyntheticPatch(
                name=name,
                labels=labels,
                split=splits[i],
                crs=f"EPSG:{epsg}",
                ulx=ulx,
                uly=uly,
                snow_or_cloud=overlays[i] is not None,
            )
        )
        job = PatchJob(i, rel_dir, name, epsg, ulx, uly, tuple(rows_sig), overlays[i], nodata,
                       metadata, map_dir=map_dir)  # fmt: skip
        if truth is not None:
            month, region = tile.when.month, region_of(tile.country)
            job = dataclasses.replace(job, signature_rows=(), truth=truth.fractions,
                                      parcels=truth.parcels, month=month,
                                      region=region)  # fmt: skip
        if s1:
            job = dataclasses.replace(
                job, s1_dir=s1_dir, s1_prefix=s1_name, s1_metadata_json=s1_json
            )
        jobs.append(job)
    return patches, jobs, rows


# --------------------------------------------------------------------------- archive


def _mp_context() -> multiprocessing.context.BaseContext:
    # fork is cheapest, but forking a process whose TensorFlow threads are running can deadlock.
    if "tensorflow" in sys.modules or "fork" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    return multiprocessing.get_context("fork")


def _run_jobs(root: str, seed: int, jobs: list[PatchJob], workers: int) -> dict[int, np.ndarray]:
    """Write every job; returns the truth (job index -> cells) of those with maps."""
    if workers <= 1 or len(jobs) < 2:
        return dict(write_jobs(root, seed, jobs))
    n_chunks = min(len(jobs), workers * 4)  # a few chunks per worker balances the load
    bounds = np.linspace(0, len(jobs), n_chunks + 1).astype(int)
    chunks = [jobs[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    with ProcessPoolExecutor(min(workers, n_chunks), mp_context=_mp_context()) as pool:
        done = pool.map(write_jobs, [root] * n_chunks, [seed] * n_chunks, chunks)
        return {index: truth for chunk in done for index, truth in chunk}


# What a folder of this command is; --overwrite replaces only such a folder (issue #46 D07:
# it emptied a folder of the user's files and replaced a copy of a shards folder). Made
# before marks: a realistic v2 archive (truth.parquet, which no real archive holds).
OWNER = Owner(
    "bigearthnet-synth", ".bigearthnet-synth", signature=TRUTH_FILE,
    names=frozenset({V2_S2_DIR, V2_S1_DIR, V2_METADATA, V2_SNOW_CLOUD, V2_MAPS_DIR,
                     TRUTH_MAPS, SYNTHETIC_MARK}),
)  # fmt: skip
MAX_PATCHES = 1_000_000  # more than the real archive holds (590,326 v1 patches)


def _patch_count(flag: str, value: int) -> int:
    require_positive_int(flag, value)
    if value > MAX_PATCHES:
        raise ConfigError(
            f"{flag} {value}: at most {MAX_PATCHES:,} (more than the real archive's 590,326)"
        )
    return value


@dataclass(frozen=True)
class ArchiveSpec(SyntheticLook):
    """What ``generate_archive`` writes; declared once: ``bigearthnet-synth``'s options
    (the look and seed: :class:`~bigearthnet.synthetic.look.SyntheticLook`)."""

    patches: int = option(100, f"number of patches to generate, at most {MAX_PATCHES:,}",
                          check=_patch_count, short="-n", metavar="N")  # fmt: skip
    layout: str = option(
        "v1", "v1: one folder per patch with a labels JSON (43 classes); v2: reBEN "
        "BigEarthNet-S2/<tile>/<patch>/ folders plus metadata parquet files (19 classes, "
        "train/validation/test splits, snow/cloud list), Reference_Maps/ (CORINE codes per "
        "10 m pixel) and OUT/truth_maps.h5 (the true class per pixel)", choices=LAYOUTS,
    )  # fmt: skip
    workers: int = option(
        1, "processes writing patches in parallel; output does not depend on it",
        check=require_positive_int, short="-j", metavar="W",
    )  # fmt: skip
    overwrite: bool = reuse(Replacing, "overwrite")
    s1: bool = option(
        False, "also Sentinel-1 VV/VH (float32 dB) of the same regions: v2 in "
        "OUT/BigEarthNet-S1, v1 as the S1 v1.0 archive OUT/BigEarthNet-S1-v1.0 (preprocess "
        "--s1-archive)",
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)

    def needs(self) -> Needs:
        return sizes.archive_needs(self.patches, self.workers, self.s1)


def generate_archive(out_dir: os.PathLike | str, spec: ArchiveSpec) -> list[SyntheticPatch]:
    """Write the synthetic archive ``spec`` describes to ``out_dir``; with ``spec.s1`` also
    its Sentinel-1 patches (v2: ``OUT/BigEarthNet-S1/``; v1: the S1 v1.0 archive as
    ``OUT/BigEarthNet-S1-v1.0/``, paired through its labels JSON).

    Returns the patches in generation order. Raises InputError if ``out_dir`` is a file, a
    folder of something else, an archive of this command without ``spec.overwrite``, or too
    large for its disk or this machine's memory.
    """
    out = Path(out_dir)
    check_output(out, OWNER, replace=spec.overwrite)
    check_room(out, spec.needs())
    layout, seed = spec.layout, spec.seed
    patches, jobs, rows = plan_archive(spec.patches, layout, seed, spec.s1, spec.difficulty)
    # Built beside OUT (same file system, so the final rename is atomic).
    with publishing(out, OWNER, replace=spec.overwrite) as work:
        truths = _run_jobs(str(work), seed, jobs, spec.workers)
        if layout == "v2":
            write_v2_tables(work, rows)
            write_truths(work, [p.name for p in patches], truths)
        write_synthetic_mark(work, layout=layout, difficulty=spec.difficulty, seed=seed,
                             patches=spec.patches)  # fmt: skip
        if spec.look.truth_table:
            write_truth(work, [p.name for p in patches], [job.truth or () for job in jobs])
    return patches
