"""Preprocessing, step 1: the plan every task computes alike (see
:mod:`bigearthnet.preprocessing.preprocess`).

List the archive, drop excluded patches, assign splits, order each split by a seeded
permutation and cut it into shards of ``--shard-size`` patches. The plan depends only on
the archive, the options and the seed, never on ``--workers`` or ``--num-tasks``, so shard
contents are reproducible; its id (a hash of all that) guards a rerun against mixing plans.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.declare import check_fields, option, reuse
from bigearthnet.core.errors import ConfigError, require_non_negative_int, require_positive_int
from bigearthnet.core.folders import Replacing, folder_path
from bigearthnet.formats.archive_origin import UNKNOWN, ArchiveOrigin, read_origin
from bigearthnet.formats.shard_maps import MISMATCH_POLICIES
from bigearthnet.formats.shards import FORMAT_VERSION, shard_name
from bigearthnet.preprocessing import splits
from bigearthnet.preprocessing.archive import (
    V2_MAPS_DIR,
    V2_SPLITS,
    PatchRef,
    detect_version,
    list_patches,
)
from bigearthnet.preprocessing.archive_input import ArchiveInput

PARTS = ".parts"  # OUT/.parts/<shard>.json: a finished shard's sidecar


def slurm_task_defaults(environ=os.environ) -> tuple[int, int]:
    """(num_tasks, task_index) from a Slurm job array or a multi-task step, else (1, 0)."""
    if "SLURM_ARRAY_TASK_ID" in environ and "SLURM_ARRAY_TASK_COUNT" in environ:
        base = int(environ.get("SLURM_ARRAY_TASK_MIN", 0))
        return int(environ["SLURM_ARRAY_TASK_COUNT"]), int(environ["SLURM_ARRAY_TASK_ID"]) - base
    if "SLURM_STEP_ID" in environ and "SLURM_NTASKS" in environ and "SLURM_PROCID" in environ:
        return int(environ["SLURM_NTASKS"]), int(environ["SLURM_PROCID"])
    return 1, 0


@dataclass(frozen=True, kw_only=True)
class Options(ArchiveInput):
    """``bigearthnet-preprocess``'s options, declared once: the command's parser is
    generated from these fields (the archive's: :class:`ArchiveInput`)."""

    archive: Path = reuse(ArchiveInput, "archive", default=dataclasses.MISSING,
                          positional=True, metavar="ARCHIVE")  # fmt: skip
    resampling: str = reuse(ArchiveInput, "resampling", default="bilinear")
    out: Path = option(help="output folder for shards, manifest.json, rejects.csv (new, "
                       "empty, or one this command wrote)", positional=True, metavar="OUT",
                       parse=folder_path)  # fmt: skip
    splits_dir: Path | None = option(
        None, "folder with official train.csv, val.csv, test.csv (patch names in the first "
        "column, no header)", metavar="DIR",
    )  # fmt: skip
    split_ratios: tuple[float, float, float] | None = option(
        None, "seeded random train,val,test split, e.g. 0.6,0.2,0.2 (default when no official "
        "split is available; overrides the v2 split column)", parse=splits.parse_ratios,
        metavar="T,V,E",
    )  # fmt: skip
    seed: int = option(0, "seed of the random split and shard order",
                       check=require_non_negative_int)  # fmt: skip
    exclude: tuple[Path, ...] = option(
        (), "CSV lists of patch names to leave out (e.g. the snow and cloud lists)",
        metavar="FILE",
    )  # fmt: skip
    band_config: str = option(
        constants.DEFAULT_BAND_CONFIG, "band configuration: s2 = the 12 S2 bands; s2-10 = "
        "reBEN's 10 (no 60 m band); s1 = VV,VH; all = VV,VH then s2-10 (reBEN v0.2.0's order)",
        choices=tuple(constants.BAND_CONFIGS), flag="--bands",
    )  # fmt: skip
    map_label_mismatch: str = option(
        "keep", f"v2 with {V2_MAPS_DIR}/: a patch whose reference map holds a class its labels "
        "lack, or lacks one they name (counted in the manifest either way): keep = store both; "
        "drop-map = store the patch without its map; drop-patch = leave the patch out",
        choices=MISMATCH_POLICIES,
    )  # fmt: skip
    shard_size: int = option(1000, "patches per shard (~345 KB each)",
                             check=require_positive_int)  # fmt: skip
    workers: int = option(1, "processes on this node", check=require_positive_int)
    num_tasks: int | None = option(
        None, "tasks (nodes) splitting the archive; default from SLURM_ARRAY_TASK_COUNT or "
        "SLURM_NTASKS, else 1", check=require_positive_int,
    )  # fmt: skip
    task_index: int | None = option(
        None, "this task's index; default from SLURM_ARRAY_TASK_ID or SLURM_PROCID, else 0",
        check=require_non_negative_int,
    )  # fmt: skip
    join: bool = option(
        False, "only merge finished shards into manifest.json (after a multi-task run)"
    )
    strict: bool = option(False, "exit 1 when any patch is rejected or reference map refused")
    overwrite: bool = reuse(
        Replacing,
        "overwrite",
        help="delete earlier outputs in OUT first (only in a folder of this command)",
    )
    progress: bool = option(True, "a progress bar (logs stay)")

    def __post_init__(self) -> None:
        check_fields(self)
        tasks, index = slurm_task_defaults()
        tasks = tasks if self.num_tasks is None else self.num_tasks
        index = index if self.task_index is None else self.task_index
        object.__setattr__(self, "num_tasks", tasks)  # frozen: still being made
        object.__setattr__(self, "task_index", index)
        if not 0 <= index < tasks:
            raise ConfigError(f"--task-index {index} outside 0..{tasks - 1}")
        if not Path(self.archive).is_dir():
            raise ConfigError(f"{self.archive}: archive folder does not exist")

    @property
    def tasks(self) -> int:
        """Tasks splitting the archive (from Slurm when not given)."""
        assert self.num_tasks is not None  # set by __post_init__
        return self.num_tasks

    @property
    def task(self) -> int:
        """This task's index (from Slurm when not given)."""
        assert self.task_index is not None  # set by __post_init__
        return self.task_index

    @property
    def bands(self) -> tuple[str, ...]:
        return constants.BAND_CONFIGS[self.band_config]


@dataclass
class ShardPlan:
    split: str
    index: int
    count: int
    refs: list[PatchRef]

    @property
    def file(self) -> str:
        return shard_name(self.split, self.index, self.count)


@dataclass
class Plan:
    version: str
    shards: list[ShardPlan]
    not_written: list[tuple[str, str]]  # (name, reason): excluded or missing, known up front
    excluded: int
    found: int
    split_source: str
    plan_id: str
    origin: ArchiveOrigin = ArchiveOrigin(UNKNOWN)  # read with the listing, before any work
    maps: bool = False  # v2 with Reference_Maps/: shards hold each patch's reference map


def make_plan(opts: Options) -> Plan:
    """The deterministic assignment of patches to shards (see the module docstring)."""
    version = detect_version(opts.archive) if opts.version == "auto" else opts.version
    listing = list_patches(opts.archive, version, opts.bands, opts.s1_archive)
    origin = read_origin(opts.archive)
    if not listing.maps and opts.map_label_mismatch != "keep":
        raise ConfigError(
            f"--map-label-mismatch {opts.map_label_mismatch}: {opts.archive} has no "
            f"{V2_MAPS_DIR}/ folder, so no map to compare with the labels; leave the option out"
        )
    refs = list(listing.patches)
    not_written = [(name, reason) for name, reason in listing.missing]
    excluded_reasons: list[tuple[str, str]] = []
    if opts.include_snow_cloud:
        refs += listing.snow_cloud
    else:
        excluded_reasons += [
            (r.name, "excluded: snow/cloud/shadow table") for r in listing.snow_cloud
        ]
    in_archive = {r.name for r in refs}
    refs, dropped = _apply_exclusions(refs, opts.exclude)
    excluded_reasons += dropped
    if listing.bad_split and opts.splits_dir is None and opts.split_ratios is None:
        # Never a silent change of protocol: one bad value must not turn the official split
        # of every patch into a random one (test patches would leak into training).
        vocabulary = ", ".join(V2_SPLITS)
        raise splits.SplitError(
            f"{listing.bad_split} is none of {vocabulary}: fix the table, or give "
            "--split-ratios to split at random on purpose"
        )
    assignment, source, absent = _assign_splits(refs, opts, in_archive)
    not_written += absent
    kept = [r for r in refs if r.name in assignment]
    excluded_reasons += [
        (r.name, "excluded: not in any split file") for r in refs if r.name not in assignment
    ]
    shards = _cut_shards(kept, assignment, opts.shard_size, opts.seed)
    found = len(kept) + len(not_written) + len(excluded_reasons)
    plan_id = _plan_id(shards, opts, version, listing.maps)
    return Plan(
        version,
        shards,
        not_written + excluded_reasons,
        len(excluded_reasons),
        found,
        source,
        plan_id,
        origin,
        listing.maps,
    )


def _apply_exclusions(refs: list[PatchRef], lists: Sequence[Path]):
    if not lists:
        return refs, []
    banned: dict[str, str] = {}
    for path in lists:
        for name in splits.read_name_list(path):
            banned.setdefault(name, f"excluded: listed in {path.name}")
    kept = [r for r in refs if r.name not in banned]
    return kept, [(r.name, banned[r.name]) for r in refs if r.name in banned]


def _assign_splits(refs: list[PatchRef], opts: Options, in_archive: set[str]):
    """name -> split, a description of the source, and split-file names absent on disk."""
    if opts.splits_dir is not None:
        listed = splits.read_splits_dir(opts.splits_dir)
        absent = [
            (name, f"listed in {split}.csv but not in the archive")
            for name, split in sorted(listed.items())
            if name not in in_archive
        ]
        kept = {r.name for r in refs}
        return {n: s for n, s in listed.items() if n in kept}, "split files", absent
    if opts.split_ratios is None and all(r.split for r in refs):
        return {r.name: r.split for r in refs}, "v2 metadata split column", []
    ratios = opts.split_ratios or splits.DEFAULT_RATIOS
    source = f"random {','.join(f'{x:g}' for x in ratios)} seed {opts.seed}"
    return splits.random_split([r.name for r in refs], ratios, opts.seed), source, []


def _cut_shards(refs, assignment, shard_size: int, seed: int) -> list[ShardPlan]:
    shards = []
    for split_index, split in enumerate(constants.SPLITS):
        members = sorted((r for r in refs if assignment[r.name] == split), key=lambda r: r.name)
        # Shards mix the whole split: a seeded order keeps neighbouring tiles apart.
        order = np.random.default_rng([seed, split_index]).permutation(len(members))
        members = [members[i] for i in order]
        count = math.ceil(len(members) / shard_size)
        for i in range(count):
            shards.append(
                ShardPlan(split, i, count, members[i * shard_size : (i + 1) * shard_size])
            )
    return shards


def _plan_id(shards: list[ShardPlan], opts: Options, version: str, maps: bool) -> str:
    digest = hashlib.sha256()
    digest.update(f"{version}|{opts.resampling}|{FORMAT_VERSION}".encode())
    if opts.band_config != constants.DEFAULT_BAND_CONFIG:  # s2 plans keep their old ids
        digest.update(f"|{opts.band_config}".encode())
    if maps:  # shards with maps are other shards (plans without keep their old ids)
        digest.update(f"|maps|{opts.map_label_mismatch}".encode())
    for shard in shards:
        digest.update(shard.file.encode())
        for ref in shard.refs:
            digest.update(b"\0" + ref.name.encode())
    return digest.hexdigest()[:16]
