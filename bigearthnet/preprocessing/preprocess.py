"""Preprocessing a BigEarthNet archive into upsampled HDF5 shards: running and joining.

The command is :mod:`bigearthnet.cli.preprocess` (``bigearthnet-preprocess ARCHIVE OUT``);
the plan is :mod:`bigearthnet.preprocessing.plan`, a shard's assembly
:mod:`bigearthnet.preprocessing.assembly`.

How the work is cut, so that it is deterministic, parallel and resumable:

1. *Plan* (every task computes the same one): list the archive, drop excluded patches,
   assign splits, order each split by a seeded permutation and cut it into shards of
   ``--shard-size`` patches. The plan depends only on the archive, the options and the
   seed, never on ``--workers`` or ``--num-tasks``, so shard contents are reproducible.
2. *Shards* are the unit of work: task ``I`` of ``K`` owns the shards whose global index
   is ``I mod K``; within a task, ``--workers`` processes take shards from a pool. A shard
   is written under a temporary name and renamed when complete, then a small sidecar
   ``OUT/.parts/<shard>.json`` records its count, checksum, band sums and rejects.
3. *Join*: once every shard has its sidecar, the manifest (with train-split band
   statistics from the summed float64 sums and, with reference maps, their figures) and
   ``rejects.csv`` are written, the manifest last. With one task this happens at the end
   of the run; with several, run the command again with ``--join`` (or let the last task
   to finish do it).

A rerun after a crash or ``kill -9`` skips shards that have a sidecar and redoes the rest;
``--overwrite`` starts over.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.errors import RunFailed, UsageError
from bigearthnet.core.folders import REPLACE_FLAG, claim_folder
from bigearthnet.core.util import atomic_write_json, overlapping, write_csv
from bigearthnet.formats.manifest import MANIFEST, Manifest, ShardEntry, write_manifest
from bigearthnet.formats.shards import REJECTS, channel_encoding
from bigearthnet.preprocessing import reference_maps
from bigearthnet.preprocessing.assembly import write_shard
from bigearthnet.preprocessing.plan import PARTS, Options, Plan, ShardPlan, make_plan

MARK = ".bigearthnet-preprocess"  # OUT/: the mark of a shards folder this command made
# What this command writes into OUT (a folder made before marks holds only these): shards,
# their temporary files, the sidecars, the manifest and the rejects.
OWN_NAMES = ("*.h5", ".*.tmp-*", PARTS, MANIFEST, REJECTS)


def run(opts: Options, argv: list[str] | None = None) -> int:
    """Preprocess per ``opts``; returns the exit code (0, 1 for --strict rejects)."""
    started = time.time()
    clash = overlapping(
        opts.out,
        {
            "the archive": opts.archive,
            "--s1-archive": opts.s1_archive,
            "--splits-dir": opts.splits_dir,
        },
    )
    if clash is not None:
        raise UsageError(f"{opts.out}: the output folder overlaps {clash}; choose another OUT")
    plan = make_plan(opts)  # first: a refused archive or split leaves no OUT behind
    _prepare_out(opts)
    _check_plan_id(opts.out, plan.plan_id)
    mine = [s for i, s in enumerate(plan.shards) if i % opts.tasks == opts.task]
    todo = [s for s in mine if not _part_path(opts.out, s).is_file()]
    _remove_stale_temps(opts.out, todo)
    if not opts.join:
        _log(
            opts,
            f"{plan.version} archive {opts.archive}: {plan.found} patches found, bands "
            f"{constants.describe_bands(opts.bands)}, "
            f"{len(plan.shards)} shards ({plan.split_source}); task {opts.task + 1}/"
            f"{opts.tasks}: {len(mine)} shards, {len(mine) - len(todo)} already done",
        )
        _process(todo, opts, plan)
    missing = [s.file for s in plan.shards if not _part_path(opts.out, s).is_file()]
    if missing:
        if opts.join:
            raise UsageError(
                f"{opts.out}: cannot join, {len(missing)} shards unfinished ({missing[0]}, ...)"
            )
        _log(
            opts,
            f"task done; {len(missing)} shards of other tasks still to come: run --join afterwards",
        )
        return 0
    manifest = join(opts, plan, argv)
    _print_summary(opts, manifest, time.time() - started)
    rejected = manifest.summary["rejected"]
    refused = manifest.reference_maps.refused if manifest.reference_maps else 0
    if opts.strict and (rejected or refused):
        # No manifest: its presence says "complete, train on me", and --strict said no.
        raise RunFailed(
            f"{rejected} patches rejected, {refused} reference maps refused (--strict): no "
            f"manifest written, see {opts.out / REJECTS}; without --strict the rest is kept"
        )
    write_manifest(opts.out, manifest)  # last: its presence marks a finished folder
    return 0


def _prepare_out(opts: Options) -> None:
    try:
        # Shards go only where this command writes: never beside the user's files (#46).
        claim_folder(opts.out, mark=MARK, made_by="bigearthnet-preprocess", option="OUT",
                     own_names=OWN_NAMES, error=UsageError)  # fmt: skip
        if opts.overwrite and opts.out.exists():
            _clear_outputs(opts.out)
        (opts.out / PARTS).mkdir(parents=True, exist_ok=True)
        probe = opts.out / PARTS / f".probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"{opts.out}: output folder not writable ({err.strerror})") from None


def _clear_outputs(out: Path) -> None:
    for path in out.iterdir():
        if path.name == PARTS:
            shutil.rmtree(path)
        elif path.suffix == ".h5" or path.name in (MANIFEST, REJECTS) or ".tmp-" in path.name:
            path.unlink()


def _check_plan_id(out: Path, plan_id: str) -> None:
    path = out / PARTS / "plan.json"
    if path.is_file():
        previous = json.loads(path.read_text()).get("plan_id")
        if previous != plan_id:
            raise UsageError(
                f"{out}: holds shards of a different archive or options (plan {previous}, now "
                f"{plan_id}); use {REPLACE_FLAG} to start over or another OUT"
            )
    else:
        atomic_write_json(path, {"plan_id": plan_id})


def _remove_stale_temps(out: Path, shards: list[ShardPlan]) -> None:
    """Temp files of a killed run, for shards this task is about to redo (never another
    task's: shards have exactly one owner)."""
    for shard in shards:
        for tmp in out.glob(f".{shard.file}.tmp-*"):
            tmp.unlink(missing_ok=True)


def _part_path(out: Path, shard: ShardPlan) -> Path:
    return out / PARTS / f"{shard.file}.json"


def _process(todo: list[ShardPlan], opts: Options, plan: Plan) -> None:
    total = sum(len(s.refs) for s in todo)
    bar = _progress_bar(opts, total)
    maps = opts.map_label_mismatch if plan.maps else None
    args = (opts.out, plan.version, opts.resampling, plan.plan_id, opts.bands, maps)
    try:
        if opts.workers <= 1 or len(todo) <= 1:
            for shard in todo:
                write_shard(shard, *args, progress=bar.update)
        else:
            _process_pool(todo, opts, args, bar)
    finally:
        bar.close()


def _process_pool(todo, opts, args, bar) -> None:
    # fork is cheapest, but forking a process that has started TensorFlow's threads (an
    # in-process test, a notebook) can deadlock; spawn then.
    ctx = mp.get_context("spawn" if "tensorflow" in sys.modules else "fork")
    queue = ctx.Queue()
    with ProcessPoolExecutor(
        opts.workers, mp_context=ctx, initializer=_init_worker, initargs=(queue,)
    ) as pool:
        pending = {pool.submit(_pool_task, shard, *args) for shard in todo}
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            _drain(queue, bar)
            for future in done:
                future.result()  # re-raise a worker's exception in the main process
        _drain(queue, bar)


_QUEUE = None


def _init_worker(queue) -> None:
    global _QUEUE
    _QUEUE = queue


def _pool_task(shard, out, version, resampling, plan_id, bands, maps) -> dict:
    assert _QUEUE is not None  # set by _init_worker in every pool process
    return write_shard(shard, out, version, resampling, plan_id, bands, maps, progress=_QUEUE.put)


def _drain(queue, bar) -> None:
    while not queue.empty():
        bar.update(queue.get())


def _progress_bar(opts: Options, total: int):
    from tqdm import tqdm

    return tqdm(
        total=total,
        unit="patch",
        desc="preprocess",
        disable=not opts.progress,
        dynamic_ncols=True,
        mininterval=1.0,
    )


def join(opts: Options, plan: Plan, argv: list[str] | None = None) -> Manifest:
    """Merge the shard sidecars into the manifest (which :func:`run` writes last, unless
    ``--strict`` refuses the rejects) and rejects.csv."""
    records = [json.loads(_part_path(opts.out, s).read_text()) for s in plan.shards]
    stale = [r["file"] for r in records if r.get("plan_id") != plan.plan_id]
    if stale:
        raise UsageError(
            f"{opts.out}: {stale[0]} belongs to another plan; rerun with {REPLACE_FLAG}"
        )
    rejects = plan.not_written + [tuple(x) for r in records for x in r["rejects"]]
    map_notes = [tuple(x) for r in records for x in r.get("map_notes", ())]
    _write_rejects(opts.out / REJECTS, rejects + map_notes)
    counts = {
        split: sum(r["count"] for r in records if r["split"] == split) for split in constants.SPLITS
    }
    mean, std = _band_stats([r for r in records if r["split"] == "train"])
    read_rejects = sum(len(r["rejects"]) for r in records)
    missing = sum(1 for _, reason in plan.not_written if not reason.startswith("excluded"))
    encodings = [channel_encoding(band) for band in opts.bands]
    manifest = Manifest(
        shards=tuple(ShardEntry(r["file"], r["split"], r["count"], r["sha256"]) for r in records),
        counts=counts,
        label_sets=(19, 43) if plan.version == "v1" else (19,),
        band_mean=None if mean is None else tuple(mean),
        band_std=None if std is None else tuple(std),
        resampling=opts.resampling,
        archive=str(opts.archive.resolve()),
        archive_version=plan.version,
        split_source=plan.split_source,
        seed=opts.seed,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        command=" ".join(["bigearthnet-preprocess", *(argv if argv is not None else sys.argv[1:])]),
        summary={
            "found": plan.found,
            "written": sum(counts.values()),
            "rejected": read_rejects + missing,
            "excluded": plan.excluded,
        },
        plan_id=plan.plan_id,
        bands=opts.bands,
        channel_scale=tuple(scale for scale, _ in encodings),
        channel_offset=tuple(offset for _, offset in encodings),
        origin=plan.origin.kind,
        origin_detail=plan.origin.detail,
        reference_maps=reference_maps.merge(records, opts.map_label_mismatch)
        if plan.maps
        else None,
    )
    return manifest


def _band_stats(records: list[dict]) -> tuple[list[float] | None, list[float] | None]:
    pixels = sum(r["pixel_count"] for r in records)
    if pixels == 0:
        return None, None
    total = np.sum([r["band_sum"] for r in records], axis=0)
    total_sq = np.sum([r["band_sumsq"] for r in records], axis=0)
    mean = total / pixels
    var = np.maximum(total_sq / pixels - mean**2, 0.0)
    return mean.tolist(), np.sqrt(var).tolist()


def _write_rejects(path: Path, rejects) -> None:
    write_csv(path, ("patch", "reason"), sorted(rejects))


def _print_summary(opts: Options, manifest: Manifest, seconds: float) -> None:
    s, counts = manifest.summary, manifest.counts
    rate = s["written"] / seconds if seconds > 0 else 0.0
    _log(
        opts,
        f"done in {seconds:.1f} s ({rate:.0f} patches/s): "
        + ", ".join(f"{k} {v}" for k, v in counts.items()),
    )
    _log(
        opts,
        f"found {s['found']} = written {s['written']} + rejected {s['rejected']} "
        f"+ excluded {s['excluded']}; manifest {opts.out / MANIFEST}",
    )
    maps_noted = False  # maps refused or dropped for patches that were written
    if manifest.reference_maps is not None:
        maps = manifest.reference_maps
        _log(
            opts,
            f"reference maps: {sum(maps.patches.values())} stored, {maps.refused} refused; "
            f"{maps.mismatched} patches whose map and labels disagree "
            f"(--map-label-mismatch {maps.mismatch_policy}); {maps.unknown_code_pixels} "
            "pixels with codes outside CORINE (stored as no label)",
        )
        maps_noted = bool(maps.refused or (maps.mismatched and maps.mismatch_policy == "drop-map"))
    if s["rejected"] or maps_noted:
        _log(opts, f"rejected patches, refused maps and reasons: {opts.out / REJECTS}")


def _log(opts: Options, message: str) -> None:
    print(f"[preprocess] {message}", flush=True)
