"""P11-rss-tiles: a region series at 10 m, memory against the region's size - the products
step's peak RSS with 4 tiles / with 2 tiles, same dates, same tile size, side by side.

A synthetic region (``bigearthnet-synth region``: 4 tiles of ``--size`` px in UTM 32/33,
5 dates) gets scene maps at 10 m drawn from its truth (``synthetic/region_maps.py``: the
products step takes scene maps however they were made, and a 10 m map needs the dense
head, which this benchmark need not train). The products step (``build_products``: blocks,
mosaic across the zones, periods, smoother, changes, tables, COGs, STAC) then runs in its
own process on the maps of all 4 tiles and on those of the first 2, repetitions
interleaved, each into a fresh folder; its process tree's RSS is sampled every 50 ms.

* P11-rss-tiles = peak RSS with 4 tiles / with 2 tiles (median of the paired ratios).
  Target <= 1.3 (issue 50): the grid is computed in blocks of ``--block-size`` cells, so
  memory is a block's, not the region's.
* P11-cells-10m: grid cells x periods per second of the 4-tile step at 10 m.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import common
from common import Figure

DATES = 5  # the fewest a synthetic region has; memory per block does not grow with them
CELL = 10.0
TILES = (4, 2)


def region(work: Path, size: int) -> Path:
    folder = work / f"p11m-region-{size}"
    if not (folder / "truth.json").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        argv = [common.PYTHON, "-m", "bigearthnet.cli.synth", "region", str(folder),
                "--tiles", str(max(TILES)), "--dates", str(DATES), "--size", str(size),
                "--difficulty", "simple"]  # fmt: skip
        common.run(argv).check("bigearthnet-synth region")
    return folder


def scene_maps(work: Path, folder: Path, size: int) -> dict[int, Path]:
    """The 10 m maps of every scene, once; per tile count, a file listing its (scene, map)
    pairs: the first tiles' scenes."""
    from bigearthnet.synthetic.region import read_truth
    from bigearthnet.synthetic.region_maps import write_truth_maps

    maps = work / f"p11m-maps-{size}"
    listed = {tiles: maps / f"pairs-{tiles}.json" for tiles in TILES}
    if all(path.is_file() for path in listed.values()):
        return listed
    shutil.rmtree(maps, ignore_errors=True)
    pairs = write_truth_maps(folder, maps, cell=CELL, error=0.05, seed=1)
    names = [tile["name"] for tile in read_truth(folder)["tiles"]]
    for tiles, path in listed.items():
        kept = [(scene, str(m)) for scene, m in pairs if any(n in Path(scene).name
                                                             for n in names[:tiles])]  # fmt: skip
        path.write_text(json.dumps(kept))
    return listed


def run(args, work: Path) -> list[Figure]:
    folder = region(work, args.size)
    listed = scene_maps(work, folder, args.size)
    common.say(f"P11-rss-tiles: {args.size} px tiles at {CELL:g} m, --block-size "
               f"{args.block_size}, {DATES} dates")  # fmt: skip
    steps: dict[int, list[dict]] = {tiles: [] for tiles in TILES}

    def measure(tiles: int, rep: int) -> float:
        out = work / f"p11m-products-{tiles}-{rep}"
        shutil.rmtree(out, ignore_errors=True)
        argv = [common.PYTHON, str(Path(__file__)), "--worker", str(listed[tiles]), str(out),
                str(args.block_size)]  # fmt: skip
        result = common.run(argv).check(f"the products step, {tiles} tiles")
        body = json.loads(result.stdout.strip().splitlines()[-1])
        steps[tiles].append({**body, "rss_mb": result.peak_rss_mb})
        shutil.rmtree(out, ignore_errors=True)
        return result.peak_rss_mb

    rss = common.interleave(
        {f"{tiles} tiles": (lambda rep, tiles=tiles: measure(tiles, rep)) for tiles in TILES},
        args.repeats, common.say,
    )  # fmt: skip
    large, small = steps[TILES[0]], steps[TILES[1]]
    rate = common.median([s["cells"] * s["periods"] / s["seconds"] for s in large])
    return [
        Figure("P11-rss-tiles", f"peak RSS of the products step at {CELL:g} m, {TILES[0]} tiles "
               f"/ {TILES[1]} tiles ({args.size} px, {DATES} dates, --block-size "
               f"{args.block_size})", common.paired_ratio(rss[f"{TILES[0]} tiles"],
                                                          rss[f"{TILES[1]} tiles"]),
               "x", "<=", 1.3, "blocks of the grid computed one at a time, maps COGs copied "
               "from a mosaic of the blocks' files with GDAL's cache capped",
               {"peak_rss_mb": rss, "grid_cells": {t: steps[t][0]["cells"] for t in TILES},
                "blocks": {t: steps[t][0]["blocks"] for t in TILES}}),
        Figure("P11-cells-10m", f"products step at {CELL:g} m, {TILES[0]} tiles: grid cells x "
               "periods / s", rate, "cells/s",
               details={"seconds": [s["seconds"] for s in large + small]}),
    ]  # fmt: skip


def worker(pairs_file: Path, out: Path, block_size: int) -> None:
    """The products step alone, in this process: prints its seconds, cells and blocks."""
    import time

    from bigearthnet.maps.region.periods import from_product_name
    from bigearthnet.maps.region.products import SceneMap, build_products
    from bigearthnet.maps.region.series import DEFAULT_PERSISTENCE

    pairs = json.loads(pairs_file.read_text())
    maps = [SceneMap(from_product_name(scene), Path(path)) for scene, path in pairs]
    out.mkdir(parents=True)
    started = time.perf_counter()
    record = build_products(out, maps, period="scene-date", crs="EPSG:3035", cell=CELL,
                            persistence=DEFAULT_PERSISTENCE, block_size=block_size, tags={},
                            skipped=[])  # fmt: skip
    assert record is not None
    seconds = time.perf_counter() - started
    grid = record.grid
    blocks = -(-grid.width // block_size) * -(-grid.height // block_size)
    print(json.dumps({"seconds": seconds, "cells": grid.width * grid.height,
                      "periods": len(record.periods), "blocks": blocks}), flush=True)  # fmt: skip


def build_parser():
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1200,
                        help="tile side in 10 m px (a multiple of 120)")  # fmt: skip
    parser.add_argument("--block-size", type=int, default=512,
                        help="the products step's --block-size (cells a side)")  # fmt: skip
    return parser


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
        raise SystemExit(0)
    sys.exit(common.run_cli(build_parser(), run))
