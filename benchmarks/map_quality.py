"""Q10: how well the 10 m maps match the truth of the realistic synthetic region (issue 50,
item 5), against today's 600 m maps resampled to 10 m.

A model with the dense head, trained by the demo's recipe (``configs/demo.yaml``: the tiny
CNN, 15 epochs, 2 ranks) on a realistic v2 archive (``--patches``, seed 0), maps every
scene of a realistic synthetic region (``bigearthnet-synth region``: its truth per point,
:mod:`bigearthnet.synthetic.region_truth`) twice: at 10 m from the dense head (the default)
and as 600 m cells (``--stride 60``), each 600 m cell taken to its 60 x 60 pixels. Both
are scored at each 10 m pixel both observed (clouds masked) against the class on the
ground at its centre:

* Q10-pixels, Q600-pixels: the share of pixels of the true class;
* Q10-boundary / Q10-inside (and Q600-...): the same for the pixels within 30 m of a class
  boundary (their centre within 30 m + half a pixel: ``region_score.BOUNDARY_M``) and for
  the others, inside the parcels;
* Q10-flicker-raw / Q10-flicker-consistent: the region series at ``--cell`` (default 10 m)
  from the 10 m maps, ``--period scene-date``, scored by ``bigearthnet-synth score``: the
  A -> B -> A triples of its raw and smoothed series, and its own agreement figures.
"""

from __future__ import annotations

import sys
from pathlib import Path

import common
import numpy as np
from common import Figure

NEAR_M = 30.0 + 5.0  # region_score.BOUNDARY_M + half a 10 m pixel


def trained_head(work: Path, patches: int) -> Path:
    """The demo's recipe on a realistic v2 archive (its maps turn the head on)."""
    run = work / f"q-demo-run-{patches}"
    if (run / "checkpoints" / "best.json").is_file():
        return run
    archive = common.synthetic_archive(work, patches, seed=0, difficulty="realistic", layout="v2")
    shards = common.shards(archive, work / f"shards-q-{patches}", "--shard-size", "100")
    argv = [common.HOROVODRUN, "-np", "2", "-H", "localhost:2", "--gloo", common.PYTHON,
            str(common.REPO / "train.py"), "--config", str(common.REPO / "configs/demo.yaml"),
            "--data", str(shards), "--run-dir", str(run), "--no-resume",
            "--no-eval-test"]  # fmt: skip
    common.run(argv).check("train.py (demo recipe)")
    return run


def region(work: Path, tiles: int, dates: int, size: int, block: float) -> Path:
    out = work / f"q-region-{tiles}x{dates}-{size}-{block:g}"
    if not (out / "truth.json").is_file():
        common.run([common.PYTHON, "-m", "bigearthnet.cli.synth", "region", str(out),
                    "--tiles", str(tiles), "--dates", str(dates), "--size", str(size),
                    "--block", str(block)]).check("bigearthnet-synth region")  # fmt: skip
    return out


def map_scene(run: Path, scene: Path, out: Path, *options: str) -> Path:
    if not out.is_file():
        common.run([common.PYTHON, "-m", "bigearthnet.cli.map", "scene", str(scene), "--run-dir",
                    str(run), "--out", str(out), "--no-progress", *options]).check(
            f"bigearthnet-map scene {scene.name}")  # fmt: skip
    return out


def score_scene(fine: Path, coarse: Path, truth: dict, date: int) -> dict[str, np.ndarray]:
    """Pixels of the true class / pixels seen by both maps, for each map, at a boundary
    and inside: {map: [right near, seen near, right inside, seen inside]}."""
    import rasterio
    from rasterio.warp import transform

    from bigearthnet.formats.class_map import NODATA
    from bigearthnet.synthetic.region_truth import cover_at

    with rasterio.open(fine) as src:
        top10, grid, crs = src.read(1), src.transform, src.crs
    with rasterio.open(coarse) as src:
        step = round(src.transform.a / grid.a)
        cells = np.repeat(np.repeat(src.read(1), step, 0), step, 1)
    top600 = cells[: top10.shape[0], : top10.shape[1]]
    rows, cols = np.mgrid[0 : top10.shape[0], 0 : top10.shape[1]]
    x, y = grid * (cols + 0.5, rows + 0.5)
    lx, ly = transform(crs, truth["crs"], x.ravel(), y.ravel())
    classes, distance = cover_at(truth, np.asarray(lx), np.asarray(ly), date)
    classes, near = classes.reshape(top10.shape), distance.reshape(top10.shape) <= NEAR_M
    seen = (top10 != NODATA) & (top600 != NODATA)
    counts = {}
    for name, top in (("10m", top10), ("600m", top600)):
        right = top == classes
        counts[name] = np.array([(right & seen & near).sum(), (seen & near).sum(),
                                 (right & seen & ~near).sum(), (seen & ~near).sum()])  # fmt: skip
    return counts


def run(args, work: Path) -> list[Figure]:
    from bigearthnet.synthetic.region import read_truth

    trained = trained_head(work, args.patches) if args.run is None else args.run
    place = region(work, args.tiles, args.dates, args.size, args.block)
    truth = read_truth(place)
    maps = work / f"q-maps-{trained.name}-{place.name}"
    maps.mkdir(exist_ok=True)
    totals = {"10m": np.zeros(4, np.int64), "600m": np.zeros(4, np.int64)}
    common.say(f"Q10: {len(truth['scenes'])} scenes of {place.name} at 10 m and 600 m")
    for scene in truth["scenes"]:
        path = place / scene.get("path", f"scenes/{scene['name']}")
        date = truth["dates"].index(scene["date"])
        fine = map_scene(trained, path, maps / f"{path.name}.10m.tif")
        coarse = map_scene(trained, path, maps / f"{path.name}.600m.tif", "--stride", "60")
        for name, counts in score_scene(fine, coarse, truth, date).items():
            totals[name] += counts
    series = work / f"q-series-{trained.name}-{place.name}-{args.cell}"
    if not (series / "consistency.json").is_file():
        scenes = [str(place / s.get("path", f"scenes/{s['name']}")) for s in truth["scenes"]]
        common.run([common.PYTHON, "-m", "bigearthnet.cli.map", "region", *scenes, "--run-dir",
                    str(trained), "--out", str(series), "--cell", str(args.cell), "--period",
                    "scene-date", "--no-progress"]).check("bigearthnet-map region")  # fmt: skip
    from bigearthnet.synthetic.region_score import score_series

    score = score_series(place, series)
    return figures(totals, score, args, place.name)


def figures(totals: dict[str, np.ndarray], score, args, place: str) -> list[Figure]:
    details = {"region": place, "counts [right near, near, right inside, inside]":
               {k: v.tolist() for k, v in totals.items()}, "series": score.summary()}  # fmt: skip
    found = []
    for name, (near_right, near, inside_right, inside) in totals.items():
        label = "10 m map (dense head)" if name == "10m" else "600 m map (--stride 60) at 10 m"
        found += [
            Figure(f"Q{name[:-1]}-pixels", f"pixel agreement with the truth, {label}",
                   (near_right + inside_right) / (near + inside), "share", details=details),
            Figure(f"Q{name[:-1]}-boundary", f"the same within 30 m of a boundary, {label}",
                   near_right / near, "share"),
            Figure(f"Q{name[:-1]}-inside", f"the same inside the parcels, {label}",
                   inside_right / inside, "share"),
        ]  # fmt: skip
    found += [
        Figure("Q10-flicker-raw", f"A -> B -> A triples of the raw series at {args.cell} m",
               score.flicker_raw, "share", details={"summary": score.summary()}),
        Figure("Q10-flicker-consistent", f"the same, the smoothed series at {args.cell} m",
               score.flicker_consistent, "share"),
    ]  # fmt: skip
    return found


def build_parser():
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--patches", type=int, default=4000, help="realistic archive to train on")
    parser.add_argument("--run", type=Path, help="a trained run with the dense head instead")
    parser.add_argument("--tiles", type=int, default=2)
    parser.add_argument("--dates", type=int, default=5)
    parser.add_argument("--size", type=int, default=480, help="tile side in 10 m px")
    parser.add_argument("--block", type=float, default=1200.0, help="land-cover block, metres")
    parser.add_argument("--cell", type=int, default=10, help="the region series' cell, metres")
    return parser


if __name__ == "__main__":
    sys.exit(common.run_cli(build_parser(), run))
