"""P11: region series - what the mosaic and the series cost next to the scene maps, memory
with 8 periods against 2, the combine step's rate, and core-seconds per km² per period.

A synthetic region (``bigearthnet-synth region``: 4 tiles of ``--size`` px in UTM 32/33, 8
dates) is mapped with ResNet-50 on one rank, TensorFlow threads as the machine gives.

* P11 = scenes/s of ``bigearthnet-map region`` from scratch (scene maps, mosaic, periods,
  series, products) / scenes/s of the same command with ``--scenes-only`` (the scene maps
  alone, one model load for all, as the region command does), interleaved, each into a
  fresh folder. Target >= 0.85: the mosaic and the series cost little next to the model.
* P11-rss: peak RSS of the products step alone (its own process, no model: the scene maps
  read back, reprojected, combined and decoded) with 8 periods / with 2 (the first 2 dates'
  scenes). Target <= 1.2.
* P11-combine: grid cells x periods per second of that step (reading maps, reprojection,
  the nearest-tile rule, the means, Viterbi, the COGs, the tables, the STAC collection).
* P11-core-s-km2: core-seconds per km² per period of the whole pipeline (P11's region run:
  reading, model, mosaic, series) with ResNet-50 on this machine's cores, beside Dynamic
  World's ~0.017 (about 1M CPU-hours for 17.8M Sentinel-2 images of ~12,000 km² each).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import common
from common import Figure

DATES = 8
DYNAMIC_WORLD_CORE_S_PER_KM2 = 0.017


def region(work: Path, size: int) -> Path:
    folder = work / f"p11-region-{size}"
    if not (folder / "truth.json").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        argv = [common.PYTHON, "-m", "bigearthnet.cli.synth", "region", str(folder),
                "--tiles", "4", "--dates", str(DATES), "--size", str(size),
                "--difficulty", "simple"]  # fmt: skip
        common.run(argv).check("bigearthnet-synth region")
    return folder


def map_region(run: Path, scenes: list[Path], out: Path, *extra: str) -> common.Result:
    argv = [common.PYTHON, "-m", "bigearthnet.cli.map", "region", *map(str, scenes),
            "--run-dir", str(run), "--out", str(out), "--period", "scene-date",
            "--no-progress", *extra]  # fmt: skip
    return common.run(argv).check("bigearthnet-map region")


def run(args, work: Path) -> list[Figure]:
    from evaluation import trained_run

    trained = trained_run(work)
    folder = region(work, args.size)
    scenes = sorted((folder / "scenes").iterdir())
    common.say(f"P11: {len(scenes)} scenes of {args.size} px, ResNet-50, 1 rank")

    def fresh(tag: str, rep: int) -> Path:
        out = work / f"p11-{tag}-{rep}"
        shutil.rmtree(out, ignore_errors=True)
        return out

    results: dict[str, list] = {"region": [], "scenes": []}
    rates = common.interleave(
        {
            "region": lambda rep: _rate(results["region"], map_region(trained, scenes,
                                                                      fresh("region", rep))),
            "scenes": lambda rep: _rate(results["scenes"], map_region(
                trained, scenes, fresh("scenes", rep), "--scenes-only")),
        },
        args.repeats,
        common.say,
    )  # fmt: skip
    done = work / "p11-region-0"
    record = json.loads((done / "consistency.json").read_text())
    first_two = sorted({s.name.split("_")[2][:8] for s in scenes})[:2]
    two = [s for s in scenes if s.name.split("_")[2][:8] in first_two]
    products = {periods: products_worker(done, subset, work / f"p11-products-{periods}")
                for periods, subset in ((DATES, scenes), (2, two))}  # fmt: skip
    region_s = common.median([r.wall_s for r in results["region"]])
    area_km2 = record["observed_km2"]
    cores = common.cores_available()
    return [
        Figure("P11", "bigearthnet-map region scenes/s / its scene maps alone (--scenes-only), "
               f"ResNet-50, 1 rank, {len(scenes)} scenes", common.paired_ratio(
                   rates["region"], rates["scenes"]), "x", ">=", 0.85,
               "the products step: reading the maps back, reprojection, the series, COGs",
               {"scenes_per_s": rates}),
        Figure("P11-rss", f"peak RSS of the products step alone, {DATES} periods / 2 periods",
               products[DATES]["rss_mb"] / products[2]["rss_mb"], "x", "<=", 1.2,
               "periods built one at a time, the series decoded in row blocks from the period "
               "COGs; no TensorFlow in this step", {"peak_rss_mb": {str(k): v["rss_mb"]
                                                                 for k, v in products.items()}}),
        Figure("P11-combine", "products step alone (read the scene maps, reproject, nearest "
               "tile, period means, Viterbi, COGs, tables, STAC): grid cells x periods / s",
               products[DATES]["cells"] / products[DATES]["seconds"], "cells/s",
               limited_by="profiled (32 scenes, 8 periods, 2.7 s): the period means 0.93 s (each "
               "scene's grid window, PROJ's first transforms included, 0.47 s; warping 0.18 s), "
               "the STAC collection 0.63 s, the COGs 0.40 s, decoding the series 0.06 s",
               details={"seconds": products[DATES]["seconds"]}),
        Figure("P11-core-s-km2", "core-seconds per km² per period, whole pipeline, ResNet-50 "
               f"(Dynamic World: ~{DYNAMIC_WORLD_CORE_S_PER_KM2})",
               region_s * cores / (area_km2 * DATES), "core-s/km²",
               limited_by="ResNet-50 on CPU cores at stride 60 (each 10 m pixel seen 4 times)",
               details={"area_km2": area_km2, "cores": cores, "region_s": region_s}),
    ]  # fmt: skip


def products_worker(done: Path, scenes: list[Path], out: Path) -> dict:
    """The products step alone, in its own process (no model): seconds, cells, peak RSS."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(done / "scenes", out / "scenes")
    argv = [common.PYTHON, str(Path(__file__)), "--worker", str(out), *map(str, scenes)]
    result = common.run(argv).check("P11 products step")
    body = json.loads(result.stdout.strip().splitlines()[-1])
    return {**body, "rss_mb": result.peak_rss_mb}


def worker(out: Path, scenes: list[str]) -> None:
    import time

    from bigearthnet.formats.region_folder import scene_map_path
    from bigearthnet.maps.region.options import DEFAULT_BLOCK
    from bigearthnet.maps.region.periods import from_product_name
    from bigearthnet.maps.region.products import SceneMap, build_products
    from bigearthnet.maps.region.series import DEFAULT_PERSISTENCE

    acquisitions = [from_product_name(s) for s in scenes]
    maps = [SceneMap(a, scene_map_path(out, a.path, a.tile, a.date)) for a in acquisitions]
    started = time.perf_counter()
    record = build_products(out, maps, period="scene-date", crs="EPSG:3035", cell=600.0,
                            persistence=DEFAULT_PERSISTENCE, block_size=DEFAULT_BLOCK, tags={},
                            skipped=[])  # fmt: skip
    assert record is not None
    seconds = time.perf_counter() - started
    cells = record.grid.width * record.grid.height * len(record.periods)
    print(json.dumps({"seconds": seconds, "cells": cells}), flush=True)


def _rate(results: list, result: common.Result) -> float:
    results.append(result)
    scenes = common.parse_number(r"\[region\] (\d+) scenes", result.stdout)
    if scenes is None:
        raise RuntimeError(f"no scene count in the region command's output:\n{result.stdout}")
    return scenes / result.wall_s


def build_parser():
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=480, help="tile side in 10 m px")
    return parser


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(Path(sys.argv[2]), sys.argv[3:])
        raise SystemExit(0)
    sys.exit(common.run_cli(build_parser(), run))
