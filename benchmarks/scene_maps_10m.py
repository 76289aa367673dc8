"""P12-10m: what a 10 m scene map costs against today's 600 m map of the same scene.

One ResNet-50 with the dense head (trained one epoch on the benchmark's v2 shards: the
weights do not change the cost), one synthetic L2A product (``--size`` px square, JPEG 2000
bands, the project's scene generator), one rank with one TensorFlow thread. In one worker
process, after a warm-up of each (the model rebuilt at the window, graphs traced; the 10 m
map's pixel model converted to ONNX there unless ``$BIGEARTHNET_CACHE`` already holds it:
~28 s once, outside the pairs, ``inference/onnx_pixels.py``), the
two maps are made alternately, each through ``map_scene`` whole (reading, the model,
writing the COGs and companions), and each is timed in process CPU seconds (every thread
of the process: core-seconds):

* P12-10m = core-s per km² of the 10 m map (the model's default window) / those of the 600 m map
  (``--stride 60``), the median of the pairs. Target <= 0.3; above 0.5 a miss to explain.
* P12-10m-abs and P12-600m-abs: the two figures themselves, in core-s per km², beside
  Dynamic World's ~0.017.

The default size, 1,728 px, was two 864 px window cores a side at the old 48 px margin
(1.23x the pixels computed, as a full tile's). ResNet-50's margin is 288 px
(``maps/scene/tiles.py``), and since 2026-11-28 windows keep their pixels up to the
scene's edges and the default window is sized to the memory: this scene is one 1,728 px
window, each pixel computed once (before: 2 x 2 windows, 4.0x; a 10,980 px tile: 5 x 5
windows of 2,688 px, 1.50x, with 17.9 GB free).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import common
from common import Figure
from scene_maps import scene

DYNAMIC_WORLD = 0.017  # core-s per km²: ~200 CPU-s per Sentinel-2 image (the issue)


def dense_run(work: Path) -> Path:
    """A ResNet-50 run with the dense head (v2 shards carry maps: the head is on)."""
    run = work / "p12-dense-run"
    if not (run / "checkpoints" / "best.json").is_file():
        common.train_run(common.train_shards(work, layout="v2"), run, 1, ["--epochs", "1"],
                         "train.py for P12 (ResNet-50 + dense head)")  # fmt: skip
    return run


def worker(run: Path, scene_dir: Path, out: Path, repeats: int) -> None:
    """Both maps, warmed up then alternated; prints their core-seconds and stages."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from bigearthnet.core import distributed
    from bigearthnet.inference.trained_run import load_model
    from bigearthnet.maps.inputs import identify
    from bigearthnet.maps.scene.mapping import map_scene
    from bigearthnet.maps.scene.options import SceneMapOptions

    distributed.init(threads=1)
    loaded = load_model(run, "best")
    form = identify(scene_dir)
    options = {
        "10m": SceneMapOptions(progress=False),  # the model's default window
        "600m": SceneMapOptions(stride=60, progress=False),
    }

    def measure(name: str, rep: int) -> dict:
        started, wall = time.process_time(), time.perf_counter()
        summary = map_scene(form, out / f"{name}-{rep}.tif", options[name], loaded)
        return {"core_s": time.process_time() - started, "wall_s": time.perf_counter() - wall,
                "read_s": summary["read_s"], "predict_s": summary["predict_s"],
                "map_s": summary["seconds"]}  # fmt: skip

    for name in options:  # warm-up: the pixel model built at the window, graphs traced
        measure(name, -1)
    results: dict[str, list[dict]] = {name: [] for name in options}
    for rep in range(repeats):
        for name in list(options)[rep % 2 :] + list(options)[: rep % 2]:
            results[name].append(measure(name, rep))
    print(json.dumps(results), flush=True)


def run(args, work: Path) -> list[Figure]:
    trained = dense_run(work)
    scene_dir = scene(work, args.size, "safe")
    out = work / "p12-maps"
    out.mkdir(exist_ok=True)
    common.say(f"P12-10m: a {args.size} px scene, ResNet-50 + dense head, 1 rank x 1 thread")
    argv = [str(Path(__file__)), "--worker", "--run", str(trained), "--scene", str(scene_dir),
            "--out", str(out), "--repeats", str(args.repeats)]  # fmt: skip
    result = common.launch(1, argv, env={"SLURM_CPUS_PER_TASK": "1"}).check("P12 worker")
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    return figures(args.size, measured)


def figures(size: int, measured: dict[str, list[dict]]) -> list[Figure]:
    km2 = (size * 10 / 1000) ** 2
    fine = [m["core_s"] / km2 for m in measured["10m"]]
    coarse = [m["core_s"] / km2 for m in measured["600m"]]
    stages = {name: [{k: round(v, 2) for k, v in m.items()} for m in runs]
              for name, runs in measured.items()}  # fmt: skip
    fine_abs = common.median(fine)
    return [
        Figure("P12-10m", "core-s per km² of the 10 m map (dense head, default windows) / of "
               "the 600 m map (--stride 60), ResNet-50, 1 rank x 1 thread, the same JPEG 2000 "
               "scene, reading + model + writing", common.paired_ratio(fine, coarse), "x",
               "<=", 0.3, "the model: ResNet-50's encoder over every pixel once (one window: "
               "the scene fits) against 4 times at stride 60, plus the decoder; reading "
               "JPEG 2000 and writing the COGs",
               {"size_px": size, "runs": stages}),
        Figure("P12-10m-abs", "core-s per km² of the 10 m map (Dynamic World: ~0.017)",
               fine_abs, "core-s/km2", limited_by=f"{fine_abs / DYNAMIC_WORLD:.1f}x Dynamic "
               "World's: ResNet-50 in float32 on a CPU"),
        Figure("P12-600m-abs", "core-s per km² of the 600 m map (--stride 60)",
               common.median(coarse), "core-s/km2", limited_by="4 windows over every pixel"),
    ]  # fmt: skip


def build_parser():
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1728, help="scene side in 10 m px")
    parser.add_argument("--worker", action="store_true", help="(internal) the measuring process")
    parser.add_argument("--run", type=Path, help="(internal) the run whose model maps")
    parser.add_argument("--scene", type=Path, help="(internal) the scene")
    parser.add_argument("--out", type=Path, help="(internal) where the maps go")
    return parser


if __name__ == "__main__":
    parsed = build_parser().parse_args()
    if parsed.worker:
        worker(parsed.run, parsed.scene, parsed.out, parsed.repeats)
        sys.exit(0)
    sys.exit(common.run_cli(build_parser(), run))
