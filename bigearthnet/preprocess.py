"""``bigearthnet-preprocess ARCHIVE OUT``: a BigEarthNet archive -> upsampled HDF5 shards.

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
   statistics from the summed float64 sums) and ``rejects.csv`` are written, the manifest
   last. With one task this happens at the end of the run; with several, run the command
   again with ``--join`` (or let the last task to finish do it).

A rerun after a crash or ``kill -9`` skips shards that have a sidecar and redoes the rest;
``--overwrite`` starts over.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import multiprocessing as mp
import os
import shutil
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from bigearthnet import constants as C
from bigearthnet import splits as S
from bigearthnet.archive import (
    ArchiveError,
    PatchError,
    PatchRef,
    detect_version,
    list_patches,
    read_patch,
)
from bigearthnet.resample import METHODS, upsample
from bigearthnet.shards import (
    FORMAT_VERSION,
    IMAGE_SHAPE,
    MANIFEST,
    REJECTS,
    ShardWriter,
    shard_name,
)
from bigearthnet.util import atomic_write_json, atomic_write_text, first_line, sha256_file

PARTS = ".parts"
BLOCK = 32  # patches assembled in memory before a write: ~11 MB, bounds RSS per worker
BAND_INDEX = {band: i for i, band in enumerate(C.BANDS)}
RES_GROUPS = tuple(
    (res, [BAND_INDEX[b] for b in C.BANDS if C.BAND_RESOLUTION_M[b] == res]) for res in (10, 20, 60)
)


class UsageError(ValueError):
    """A problem with the command line or the environment; exit code 2."""


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
    shard_size: int = 1000
    workers: int = 1
    num_tasks: int = 1
    task_index: int = 0
    strict: bool = False
    overwrite: bool = False
    join: bool = False
    progress: bool = True


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


# --------------------------------------------------------------------------- plan


def make_plan(opts: Options) -> Plan:
    """The deterministic assignment of patches to shards (see the module docstring)."""
    version = detect_version(opts.archive) if opts.version == "auto" else opts.version
    listing = list_patches(opts.archive, version)
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
        for name in S.read_name_list(path):
            banned.setdefault(name, f"excluded: listed in {path.name}")
    kept = [r for r in refs if r.name not in banned]
    return kept, [(r.name, banned[r.name]) for r in refs if r.name in banned]


def _assign_splits(refs: list[PatchRef], opts: Options, in_archive: set[str]):
    """name -> split, a description of the source, and split-file names absent on disk."""
    if opts.splits_dir is not None:
        listed = S.read_splits_dir(opts.splits_dir)
        absent = [
            (name, f"listed in {split}.csv but not in the archive")
            for name, split in sorted(listed.items())
            if name not in in_archive
        ]
        kept = {r.name for r in refs}
        return {n: s for n, s in listed.items() if n in kept}, "split files", absent
    if opts.split_ratios is None and all(r.split for r in refs):
        return {r.name: r.split for r in refs}, "v2 metadata split column", []
    ratios = opts.split_ratios or S.DEFAULT_RATIOS
    source = f"random {','.join(f'{x:g}' for x in ratios)} seed {opts.seed}"
    return S.random_split([r.name for r in refs], ratios, opts.seed), source, []


def _cut_shards(refs, assignment, shard_size: int, seed: int) -> list[ShardPlan]:
    shards = []
    for split_index, split in enumerate(C.SPLITS):
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
    for shard in shards:
        digest.update(shard.file.encode())
        for ref in shard.refs:
            digest.update(b"\0" + ref.name.encode())
    return digest.hexdigest()[:16]


# --------------------------------------------------------------------------- shards


def assemble(patch, resampling: str, out: np.ndarray | None = None) -> np.ndarray:
    """(120, 120, 12) uint16 in canonical band order; 10 m bands copied bit-exact.

    ``out`` (a row of a block being assembled) is filled in place instead of a new array.
    """
    image = np.empty(IMAGE_SHAPE, dtype=np.uint16) if out is None else out
    for _res, indices in RES_GROUPS:
        stack = np.stack([patch.bands[C.BANDS[i]] for i in indices])
        image[:, :, indices] = upsample(stack, C.PATCH_SIZE, resampling).transpose(1, 2, 0)
    return image


def write_shard(
    shard: ShardPlan, out: Path, version: str, resampling: str, plan_id: str, progress=None
) -> dict:
    """Read, upsample and write one shard; returns (and saves) its sidecar record."""
    with43 = version == "v1"
    attrs = {
        "bands": list(C.BANDS),
        "classes19": list(C.CLASSES_19),
        "classes43": list(C.CLASSES_43) if with43 else [],
        "resampling": resampling,
        "source_version": version,
    }
    writer = ShardWriter(out / shard.file, shard.split, len(shard.refs), attrs, with43)
    sums = np.zeros((2, len(C.BANDS)), dtype=np.float64)
    rejects: list[tuple[str, str]] = []
    try:
        with one_blas_thread():
            for start in range(0, len(shard.refs), BLOCK):
                refs = shard.refs[start : start + BLOCK]
                block = _read_block(refs, version, resampling, rejects, sums, with43)
                if block is not None:
                    writer.append(block)
                if progress is not None:
                    progress(len(refs))
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    record = {
        "file": shard.file,
        "split": shard.split,
        "count": writer.rows,
        "sha256": sha256_file(out / shard.file),
        "pixel_count": writer.rows * C.PATCH_SIZE * C.PATCH_SIZE,
        "band_sum": sums[0].tolist(),
        "band_sumsq": sums[1].tolist(),
        "rejects": rejects,
        "plan_id": plan_id,
    }
    atomic_write_json(out / PARTS / f"{shard.file}.json", record)
    return record


def _read_block(refs, version, resampling, rejects, sums, with43) -> dict | None:
    # Patches are assembled straight into the block that is written (no per-patch copies).
    images = np.empty((len(refs), *IMAGE_SHAPE), dtype=np.uint16)
    names: list[str] = []
    labels19: list[np.ndarray] = []
    labels43: list[np.ndarray] = []
    crs: list[str] = []
    ulxy: list[tuple[float, float]] = []
    for ref in refs:
        try:
            patch = read_patch(ref, version)
        except PatchError as err:
            rejects.append((ref.name, str(err)))
            continue
        assemble(patch, resampling, out=images[len(names)])
        names.append(patch.name)
        labels19.append(patch.labels19)
        if patch.labels43 is not None:  # v1 archives (with43); v2 patches have none
            labels43.append(patch.labels43)
        crs.append(patch.crs)
        ulxy.append((patch.ulx, patch.uly))
    if not names:
        return None
    images = images[: len(names)]
    sums += band_sums(images)
    block = {
        "images": images,
        "labels19": np.stack(labels19),
        "names": names,
        "crs": crs,
        "ulxy": np.asarray(ulxy, dtype=np.float64),
    }
    if with43:
        block["labels43"] = np.stack(labels43)
    return block


def band_sums(images: np.ndarray) -> np.ndarray:
    """(2, bands) float64: per-band sum and sum of squares over every pixel of ``images``.

    Exact: per image every partial sum is an integer below 2**53. The products with a
    vector of ones run as BLAS matrix-vector products, twice as fast as reductions along
    the pixel axis of a channels-last array.
    """
    ones = np.ones(images.shape[1] * images.shape[2])
    sums = np.zeros((2, images.shape[-1]))
    for image in images:
        flat = image.reshape(len(ones), -1).astype(np.float64)
        sums[0] += ones @ flat
        flat *= flat
        sums[1] += ones @ flat
    return sums


@contextlib.contextmanager
def one_blas_thread():
    """Run BLAS single-threaded: the per-patch upsampling products are tiny, so BLAS
    threads only add hand-offs and contend with the other workers for the cores
    (measured: 2 BLAS threads made one worker ~1.5x slower on 2 cores)."""
    try:
        from threadpoolctl import threadpool_limits  # installed with scikit-learn
    except ImportError:  # pragma: no cover - the default thread count is merely slower
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


# --------------------------------------------------------------------------- running


def run(opts: Options, argv: list[str] | None = None) -> int:
    """Preprocess per ``opts``; returns the exit code (0, 1 for --strict rejects)."""
    started = time.time()
    _prepare_out(opts)
    plan = make_plan(opts)
    _check_plan_id(opts.out, plan.plan_id)
    mine = [s for i, s in enumerate(plan.shards) if i % opts.num_tasks == opts.task_index]
    todo = [s for s in mine if not _part_path(opts.out, s).is_file()]
    _remove_stale_temps(opts.out, todo)
    if not opts.join:
        _log(
            opts,
            f"{plan.version} archive {opts.archive}: {plan.found} patches found, "
            f"{len(plan.shards)} shards ({plan.split_source}); task {opts.task_index + 1}/"
            f"{opts.num_tasks}: {len(mine)} shards, {len(mine) - len(todo)} already done",
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
    rejected = manifest["summary"]["rejected"]
    if opts.strict and rejected:
        print(
            f"error: {rejected} patches rejected (--strict); see {opts.out / REJECTS}",
            file=sys.stderr,
        )
        return 1
    return 0


def _prepare_out(opts: Options) -> None:
    try:
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
                f"{plan_id}); use --overwrite to start over or another OUT"
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
    args = (opts.out, plan.version, opts.resampling, plan.plan_id)
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


def _pool_task(shard, out, version, resampling, plan_id) -> dict:
    assert _QUEUE is not None  # set by _init_worker in every pool process
    return write_shard(shard, out, version, resampling, plan_id, progress=_QUEUE.put)


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


def join(opts: Options, plan: Plan, argv: list[str] | None = None) -> dict:
    """Merge the shard sidecars into manifest.json (written last) and rejects.csv."""
    records = [json.loads(_part_path(opts.out, s).read_text()) for s in plan.shards]
    stale = [r["file"] for r in records if r.get("plan_id") != plan.plan_id]
    if stale:
        raise UsageError(f"{opts.out}: {stale[0]} belongs to another plan; rerun with --overwrite")
    rejects = plan.not_written + [tuple(x) for r in records for x in r["rejects"]]
    _write_rejects(opts.out / REJECTS, rejects)
    counts = {split: sum(r["count"] for r in records if r["split"] == split) for split in C.SPLITS}
    mean, std = _band_stats([r for r in records if r["split"] == "train"])
    read_rejects = sum(len(r["rejects"]) for r in records)
    missing = sum(1 for _, reason in plan.not_written if not reason.startswith("excluded"))
    manifest = {
        "format_version": FORMAT_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(
            ["bigearthnet-preprocess", *(argv if argv is not None else sys.argv[1:])]
        ),
        "archive": str(opts.archive.resolve()),
        "archive_version": plan.version,
        "bands": list(C.BANDS),
        "image_shape": list(IMAGE_SHAPE),
        "dtype": "uint16",
        "classes19": list(C.CLASSES_19),
        "classes43": list(C.CLASSES_43) if plan.version == "v1" else None,
        "label_sets": [19, 43] if plan.version == "v1" else [19],
        "resampling": opts.resampling,
        "split_source": plan.split_source,
        "seed": opts.seed,
        "counts": counts,
        "band_mean": mean,
        "band_std": std,
        "shards": [{k: r[k] for k in ("file", "split", "count", "sha256")} for r in records],
        "summary": {
            "found": plan.found,
            "written": sum(counts.values()),
            "rejected": read_rejects + missing,
            "excluded": plan.excluded,
        },
        "plan_id": plan.plan_id,
    }
    atomic_write_json(opts.out / MANIFEST, manifest)
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
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["patch", "reason"])
    writer.writerows(sorted(rejects))
    atomic_write_text(path, buf.getvalue())


def _print_summary(opts: Options, manifest: dict, seconds: float) -> None:
    s, counts = manifest["summary"], manifest["counts"]
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
    if s["rejected"]:
        _log(opts, f"rejected patches and reasons: {opts.out / REJECTS}")


def _log(opts: Options, message: str) -> None:
    print(f"[preprocess] {message}", flush=True)


# --------------------------------------------------------------------------- CLI


def slurm_task_defaults(environ=os.environ) -> tuple[int, int]:
    """(num_tasks, task_index) from a Slurm job array or a multi-task step, else (1, 0)."""
    if "SLURM_ARRAY_TASK_ID" in environ and "SLURM_ARRAY_TASK_COUNT" in environ:
        base = int(environ.get("SLURM_ARRAY_TASK_MIN", 0))
        return int(environ["SLURM_ARRAY_TASK_COUNT"]), int(environ["SLURM_ARRAY_TASK_ID"]) - base
    if "SLURM_STEP_ID" in environ and "SLURM_NTASKS" in environ and "SLURM_PROCID" in environ:
        return int(environ["SLURM_NTASKS"]), int(environ["SLURM_PROCID"])
    return 1, 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bigearthnet-preprocess",
        description="Turn a BigEarthNet-S2 archive (v1 folders + JSON, or v2 tiles + "
        "metadata.parquet) into 120x120x12 uint16 HDF5 shards with a manifest.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "archive",
        type=Path,
        help="archive root (v1: patch folders; v2: folder "
        "with metadata.parquet and BigEarthNet-S2/)",
    )
    p.add_argument("out", type=Path, help="output folder for shards, manifest.json, rejects.csv")
    p.add_argument(
        "--version",
        choices=("auto", "v1", "v2"),
        default="auto",
        help="archive layout; auto detects it",
    )
    p.add_argument(
        "--splits-dir",
        type=Path,
        help="folder with official train.csv, val.csv, "
        "test.csv (patch names in the first column, no header)",
    )
    p.add_argument(
        "--split-ratios",
        help="seeded random train,val,test split, e.g. 0.6,0.2,0.2 "
        "(default when no official split is available; overrides the v2 split column)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random split and shard order")
    p.add_argument(
        "--exclude",
        type=Path,
        nargs="+",
        default=[],
        metavar="FILE",
        help="CSV lists of patch names to leave out (e.g. the snow and cloud lists)",
    )
    p.add_argument(
        "--include-snow-cloud",
        action="store_true",
        help="v2: also use patches of the snow/cloud/shadow parquet",
    )
    p.add_argument(
        "--resampling",
        choices=METHODS,
        default="bilinear",
        help="upsampling of the 20 m and 60 m bands (pixel centres aligned)",
    )
    p.add_argument("--shard-size", type=int, default=1000, help="patches per shard (~345 KB each)")
    p.add_argument("--workers", type=int, default=1, help="processes on this node")
    p.add_argument(
        "--num-tasks",
        type=int,
        help="tasks (nodes) splitting the archive; default "
        "from SLURM_ARRAY_TASK_COUNT or SLURM_NTASKS, else 1",
    )
    p.add_argument(
        "--task-index",
        type=int,
        help="this task's index; default from SLURM_ARRAY_TASK_ID or SLURM_PROCID, else 0",
    )
    p.add_argument(
        "--join",
        action="store_true",
        help="only merge finished shards into manifest.json (after a multi-task run)",
    )
    p.add_argument("--strict", action="store_true", help="exit 1 when any patch is rejected")
    p.add_argument("--overwrite", action="store_true", help="delete earlier outputs in OUT first")
    p.add_argument(
        "--no-progress", dest="progress", action="store_false", help="no progress bar (logs stay)"
    )
    return p


def options_from_args(args: argparse.Namespace) -> Options:
    num_tasks, task_index = slurm_task_defaults()
    opts = Options(
        archive=args.archive,
        out=args.out,
        version=args.version,
        splits_dir=args.splits_dir,
        split_ratios=S.parse_ratios(args.split_ratios) if args.split_ratios else None,
        seed=args.seed,
        exclude=args.exclude,
        include_snow_cloud=args.include_snow_cloud,
        resampling=args.resampling,
        shard_size=args.shard_size,
        workers=args.workers,
        num_tasks=args.num_tasks if args.num_tasks is not None else num_tasks,
        task_index=args.task_index if args.task_index is not None else task_index,
        strict=args.strict,
        overwrite=args.overwrite,
        join=args.join,
        progress=args.progress,
    )
    if opts.shard_size < 1 or opts.workers < 1 or opts.num_tasks < 1:
        raise UsageError("--shard-size, --workers and --num-tasks must be at least 1")
    if not 0 <= opts.task_index < opts.num_tasks:
        raise UsageError(f"--task-index {opts.task_index} outside 0..{opts.num_tasks - 1}")
    if not opts.archive.is_dir():
        raise UsageError(f"{opts.archive}: archive folder does not exist")
    return opts


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        opts = options_from_args(args)
        return run(opts, argv)
    except (UsageError, ArchiveError, S.SplitError) as err:
        print(f"bigearthnet-preprocess: error: {first_line(err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
