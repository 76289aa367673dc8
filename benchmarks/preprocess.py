"""P1: preprocessing throughput per worker, its scaling from 1 to 2 workers, and memory.

Side by side, repetitions interleaved, on a synthetic v1 archive (12 GeoTIFFs + a JSON per
patch, page cache warm for every variant alike):

* the project's command ``bigearthnet-preprocess --workers 1`` and ``--workers 2`` (its own
  "done in" time: planning, reading, upsampling, statistics, HDF5 writing, sha256, join);
* the common reader, as TorchGeo's BigEarthNet loader does it: ``rasterio.open`` per band
  and ``read(out_shape=(120, 120), resampling=bilinear)``, plus the labels JSON;
* the raw file-read rate: the bytes of the same 13 files per patch, nothing decoded;
* the project's reader alone (``read_patch`` + ``assemble``), to split the worker's time.

Peak RSS is that of the whole process tree (main process + workers), sampled every 50 ms.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import common
import numpy as np
from common import Figure

from bigearthnet.core import constants
from bigearthnet.preprocessing.archive import list_patches, read_patch
from bigearthnet.preprocessing.assembly import assemble, one_blas_thread

SHARD_SIZE = 250  # 9 shards for 2,000 patches: the 2 workers get balanced work


def common_reader(refs) -> None:
    """TorchGeo's BigEarthNet loader: one rasterio open + resampled read per band."""
    import rasterio
    from rasterio.enums import Resampling

    for ref in refs:
        bands = []
        for band in constants.BANDS:
            with rasterio.open(os.path.join(ref.folder, f"{ref.name}_{band}.tif")) as src:
                bands.append(
                    src.read(
                        indexes=1,
                        out_shape=(constants.PATCH_SIZE, constants.PATCH_SIZE),
                        out_dtype="int32",
                        resampling=Resampling.bilinear,
                    )
                )
        np.stack(bands)
        _labels(ref)


def raw_read(refs) -> None:
    """The bytes of every file of each patch (the I/O floor of any reader)."""
    for ref in refs:
        for band in constants.BANDS:
            with open(os.path.join(ref.folder, f"{ref.name}_{band}.tif"), "rb") as f:
                f.read()
        _labels(ref, parse=False)


def project_reader(refs) -> None:
    with one_blas_thread():
        for ref in refs:
            assemble(read_patch(ref, "v1"), "bilinear")


def _labels(ref, parse: bool = True) -> None:
    with open(os.path.join(ref.folder, f"{ref.name}_labels_metadata.json"), "rb") as f:
        text = f.read()
    if parse:
        json.loads(text)


def rate(fn, refs) -> float:
    start = time.perf_counter()
    fn(refs)
    return len(refs) / (time.perf_counter() - start)


def preprocess_run(archive: Path, out: Path, workers: int) -> dict:
    cmd = [
        common.PYTHON,
        "-m",
        "bigearthnet.cli.preprocess",
        str(archive),
        str(out),
        "--workers",
        str(workers),
        "--shard-size",
        str(SHARD_SIZE),
        "--no-progress",
        "--overwrite",
    ]
    result = common.run(cmd).check(f"preprocessing with {workers} worker(s)")
    seconds = common.parse_number(r"done in ([\d.]+) s", result.stdout)
    return {"seconds": seconds or result.wall_s, "peak_rss_mb": result.peak_rss_mb}


def run(args, work: Path) -> list[Figure]:
    archive = common.synthetic_archive(work, args.patches)
    refs = list_patches(archive, "v1").patches[: args.subset]
    runs: dict[int, list[dict]] = {1: [], 2: []}
    readers: dict[str, list[float]] = {"common": [], "raw": [], "project": []}

    def one(workers: int):
        def measure(_rep: int) -> float:
            runs[workers].append(preprocess_run(archive, work / f"p1-out-{workers}", workers))
            return args.patches / runs[workers][-1]["seconds"]

        return measure

    def readers_once(_rep: int) -> float:
        for name, fn in (("common", common_reader), ("raw", raw_read), ("project", project_reader)):
            readers[name].append(rate(fn, refs))
        readers.setdefault("cores", []).append(common.cores_available())
        return readers["common"][-1]

    common.say(f"P1: {args.patches} patches, readers on {len(refs)}, {args.repeats} repeats")
    rates = common.interleave(
        {"readers (common, patches/s)": readers_once, "1 worker": one(1), "2 workers": one(2)},
        args.repeats,
        common.say,
    )
    return figures(args, rates["1 worker"], rates["2 workers"], readers, runs)


def figures(args, w1, w2, readers, runs) -> list[Figure]:
    per_worker = common.paired_ratio(w1, readers["common"])
    vs_raw = common.paired_ratio(w1, readers["raw"])
    reader_only = common.paired_ratio(readers["project"], readers["common"])
    speedup = common.paired_ratio(w2, w1)
    rss = max(r["peak_rss_mb"] for r in runs[1] + runs[2])
    # Where a worker's time goes: the reader part (read + upsample) vs the rest (statistics,
    # HDF5 writing, sha256, planning) of the full command.
    reader_share = common.median(w1) / common.median(readers["project"])
    details = {
        "patches": args.patches,
        "reader_subset": args.subset,
        "workers1_patches_per_s": w1,
        "workers2_patches_per_s": w2,
        "common_reader_patches_per_s": readers["common"],
        "raw_read_patches_per_s": readers["raw"],
        "project_reader_patches_per_s": readers["project"],
        "reader_share_of_worker_time": reader_share,
        "cores_available": readers["cores"],
    }
    cores = common.median(readers["cores"])
    limit = (
        f"CPU: read+upsample is {100 * reader_share:.0f}% of a worker's time, the rest "
        "HDF5 write, sha256, band statistics; the common reader pays a GDAL open per band"
    )
    return [
        Figure(
            "P1",
            "preprocessing patches/s per worker / common reader (rasterio out_shape)",
            per_worker,
            "x",
            ">=",
            4.0,
            limit,
            details,
        ),
        Figure(
            "P1-raw",
            "preprocessing patches/s per worker / raw file-read rate",
            vs_raw,
            "x",
            limited_by="decoding + upsampling + writing cost more than reading the bytes",
        ),
        Figure(
            "P1-reader",
            "read+upsample only: project reader / common reader",
            reader_only,
            "x",
            limited_by="GeoTIFF header parsing in Python, BLAS products",
        ),
        Figure(
            "P1-scale",
            "preprocessing speed-up 1 -> 2 workers",
            speedup,
            "x",
            ">=",
            1.8,
            f"the cores: 2 spinning processes did {cores:.2f}x one's work meanwhile (co-tenants); "
            "serial plan + join",
            details,
        ),
        Figure(
            "P1-rss",
            f"peak RSS of the process tree, {args.patches} patches, <= 2 workers",
            rss,
            "MB",
            "<",
            1024.0,
            "one 32-patch block (11 MB) per worker + imports",
        ),
    ]


def build_parser():
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--patches", type=int, default=2000, help="archive size (>= 2000)")
    parser.add_argument("--subset", type=int, default=150, help="patches for reader rates")
    parser.set_defaults(repeats=3)
    return parser


if __name__ == "__main__":
    raise SystemExit(common.run_cli(build_parser(), run))
