"""Preprocessing, step 1: the plan every task computes alike (see
:mod:`bigearthnet.preprocessing.preprocess`).

List the archive, drop excluded patches, assign splits, order each split by a seeded
permutation and cut it into shards of ``--shard-size`` patches. The plan depends only on
the archive, the options and the seed, never on ``--workers`` or ``--num-tasks``, so shard
contents are reproducible; its id (a hash of all that) guards a rerun against mixing plans.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bigearthnet.core import constants
from bigearthnet.formats.shards import (
    FORMAT_VERSION,
    shard_name,
)
from bigearthnet.preprocessing import splits
from bigearthnet.preprocessing.archive import (
    V2_SPLITS,
    PatchRef,
    detect_version,
    list_patches,
)

PARTS = ".parts"  # OUT/.parts/<shard>.json: a finished shard's sidecar


@dataclass
class Options:
    archive: Path
    out: Path
    version: str = "auto"
    splits_dir: Path | None = None
    split_ratios: tuple[float, float, float] | None = None
    seed: int = 0
    exclude: list[Path] = field(default_factory=list)
    include_snow_cloud: bool = False
    resampling: str = "bilinear"
    band_config: str = constants.DEFAULT_BAND_CONFIG  # a key of constants.BAND_CONFIGS
    s1_archive: Path | None = None  # where S1 is (v2 default: ARCHIVE/BigEarthNet-S1)
    shard_size: int = 1000
    workers: int = 1
    num_tasks: int = 1
    task_index: int = 0
    strict: bool = False
    overwrite: bool = False
    join: bool = False
    progress: bool = True

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


def make_plan(opts: Options) -> Plan:
    """The deterministic assignment of patches to shards (see the module docstring)."""
    version = detect_version(opts.archive) if opts.version == "auto" else opts.version
    listing = list_patches(opts.archive, version, opts.bands, opts.s1_archive)
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
    plan_id = _plan_id(shards, opts, version)
    return Plan(
        version,
        shards,
        not_written + excluded_reasons,
        len(excluded_reasons),
        found,
        source,
        plan_id,
    )


def _apply_exclusions(refs: list[PatchRef], lists: list[Path]):
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


def _plan_id(shards: list[ShardPlan], opts: Options, version: str) -> str:
    digest = hashlib.sha256()
    digest.update(f"{version}|{opts.resampling}|{FORMAT_VERSION}".encode())
    if opts.band_config != constants.DEFAULT_BAND_CONFIG:  # s2 plans keep their old ids
        digest.update(f"|{opts.band_config}".encode())
    for shard in shards:
        digest.update(shard.file.encode())
        for ref in shard.refs:
            digest.update(b"\0" + ref.name.encode())
    return digest.hexdigest()[:16]
