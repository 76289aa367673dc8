"""Run every benchmark on synthetic data, print one table, write benchmarks/results.json.

The benchmarks run one after the other (never two at once: each needs the whole machine),
each in its own process, sharing one work folder of synthetic archives, shards and runs
(a temporary folder unless ``--work-dir`` is given). ``make bench`` runs this; about
20 minutes on a 2-core machine. See benchmarks/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import common
from common import Figure

HERE = Path(__file__).resolve().parent
# (script, extra options): the order matters, P5 and P10 reuse the checkpoint P3 trains.
BENCHMARKS: list[tuple[str, list[str]]] = [
    ("synthetic_archive.py", []),
    ("preprocess.py", []),
    ("input_pipeline.py", []),
    ("train_throughput.py", ["--knobs", "xla", "dense"]),
    ("dense_head_step.py", []),
    ("scaling.py", []),
    ("evaluation.py", []),
    ("export.py", []),
    ("noise_cost.py", []),
    ("scene_maps.py", []),
    ("region_series.py", []),
    ("region_memory.py", []),
    ("scene_maps_10m.py", []),
]


def run_benchmark(script: str, options: list[str], work: Path, repeats: int | None) -> list:
    """One benchmark in its own process; its figures (or one failure row)."""
    out = work / f"{Path(script).stem}.json"
    cmd = [common.PYTHON, str(HERE / script), "--work-dir", str(work), "--json", str(out)]
    cmd += [*options, *(["--repeats", str(repeats)] if repeats else [])]
    common.say(f"running {script}")
    started = time.perf_counter()
    result = common.run(cmd)
    sys.stderr.write(result.stderr[-3000:] if result.returncode else "")
    common.say(f"{script}: {time.perf_counter() - started:.0f} s, exit {result.returncode}")
    if result.returncode != 0 or not out.is_file():
        reason = (result.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return [Figure(Path(script).stem, f"{script} failed", None, limited_by=reason)]
    return common.read_results(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--work-dir", type=Path, help="keep synthetic data and runs here")
    parser.add_argument("--repeats", type=int, help="override every benchmark's repetitions")
    parser.add_argument("--only", nargs="*", help="run only these scripts (e.g. scaling.py)")
    parser.add_argument("--out", type=Path, default=common.RESULTS, help="results JSON")
    args = parser.parse_args(argv)
    meta = common.machine_meta()
    started = time.perf_counter()
    figures: list[Figure] = []
    with common.work_dir(args.work_dir) as work:
        for script, options in BENCHMARKS:
            if args.only and script not in args.only:
                continue
            figures += run_benchmark(script, options, work, args.repeats)
    meta["seconds"] = round(time.perf_counter() - started, 1)
    print(common.format_table(figures))
    common.write_results(args.out, figures, meta)
    print(f"\n{len(figures)} figures in {meta['seconds']:.0f} s; written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
