"""Shared helpers of the benchmark suite: figures and their targets, side-by-side timing,
the results table and JSON, synthetic data set-up, and launching commands (plain or through
``horovodrun``) while sampling the peak memory of the whole process tree.

Every figure is a *ratio of two things measured in the same run*, repetitions interleaved
(A, B, A, B, ...) and summarised by the median of the per-pair ratios: the machine is shared
and noisy, so absolute times from different runs are never compared.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import operator
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bigearthnet.formats.efficiency import read_efficiency
from bigearthnet.formats.history import read_history

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results.json"
PYTHON = sys.executable
HOROVODRUN = str(Path(sys.executable).with_name("horovodrun"))
OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}

# The training benchmarks' recipe: ResNet-50, small per-rank batch, one warm-up epoch then
# measured epochs, one TensorFlow thread per rank (Horovod and TF share 2 cores here).
TRAIN_BATCH = 8
TRAIN_STEPS = 12  # per epoch at 1 rank; 2 ranks take 6 steps each (same per-rank batch)
TRAIN_EPOCHS = 3  # epoch 1 warms up (tracing, allocations); a run's rate: median of the rest
TRAIN_SPLIT = (0.75, 0.125, 0.125)
TRAIN_RECIPE = (
    f"--model resnet50 --batch-size {TRAIN_BATCH} --epochs {TRAIN_EPOCHS} --optimizer sgd "
    "--lr 0.001 --warmup-epochs 0 --threads 1 --no-eval-test --no-progress --no-resume"
).split()


# --------------------------------------------------------------------------- figures


@dataclass
class Figure:
    """One row of the table: a measured ratio (or size) and, if it has one, its target."""

    id: str
    what: str
    value: float | None
    unit: str = "x"
    op: str | None = None  # comparison with ``target``: >=, >, <=, <
    target: float | None = None
    limited_by: str = ""
    details: dict = field(default_factory=dict)

    @property
    def met(self) -> bool | None:
        if self.op is None or self.target is None or self.value is None:
            return None
        return OPS[self.op](self.value, self.target)

    def to_dict(self) -> dict:
        return {**asdict(self), "met": self.met}

    @classmethod
    def from_dict(cls, raw: dict) -> Figure:
        known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
        return cls(**known)


def median(values: Sequence[float]) -> float:
    clean = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(clean) if clean else float("nan")


def paired_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """Median of a_i / b_i over pairs measured side by side (robust to slow phases)."""
    return median([a / b for a, b in zip(numerators, denominators) if a and b])


def knob_figure(
    fid: str, what: str, knob: Sequence[float], default: Sequence[float], why: str
) -> Figure:
    """A knob's row: its measurements over the default's of the same repetitions."""
    return Figure(fid, what, paired_ratio(knob, default), "x", limited_by=why)


def interleave(
    variants: dict[str, Callable[[int], float]],
    repeats: int,
    log: Callable = print,
    warmup: bool = False,
    limit: dict[str, int] | None = None,
) -> dict[str, list[float]]:
    """Call every variant once per repetition, rotating the order each time, so slow
    phases of a noisy machine hit all variants alike; returns name -> measurements.
    ``warmup`` first calls each variant once unrecorded (caches, allocator, page faults);
    ``limit`` caps some variants' repetitions (costly knobs: measured in the first ones)."""
    names = list(variants)
    out: dict[str, list[float]] = {name: [] for name in names}
    for name in names if warmup else []:
        variants[name](repeats)  # an index the measured repetitions do not use
    for rep in range(repeats):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            if limit and rep >= limit.get(name, repeats):
                continue
            value = variants[name](rep)
            out[name].append(value)
            log(f"  rep {rep + 1}/{repeats} {name}: {value:.4g}")
    return out


def _spin(seconds: float) -> int:
    """Pure-Python work for ``seconds`` of wall time; returns the iterations done."""
    end, count = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        count += 1
    return count


def cores_available(seconds: float = 1.0) -> float:
    """Control: work of 2 spinning processes at once / work of 1 alone (2.0 on 2 idle
    cores; less when co-tenants hold a core). Tells how much the machine could scale."""
    import multiprocessing as mp

    alone = _spin(seconds)
    with mp.get_context("spawn").Pool(2) as pool:
        pool.map(_spin, [0.05, 0.05])  # start-up outside the measurement
        both = sum(pool.map(_spin, [seconds, seconds]))
    return both / alone


# --------------------------------------------------------------------------- table, JSON


def _fmt(value: float | None, unit: str) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    if unit == "%":
        return f"{100 * value:.1f} %"
    if unit == "MB":
        return f"{value:.0f} MB"
    if unit != "x":  # a rate or a count: words after a space
        return f"{value:,.1f} {unit}"
    return f"{value:.2f}{unit}"


def format_table(figures: Sequence[Figure]) -> str:
    """A fixed-width table: id, what, measured, target, met, limited by."""
    rows = [("id", "what", "measured", "target", "met", "limited by")]
    for f in figures:
        target = f"{f.op} {_fmt(f.target, f.unit)}" if f.op else "-"
        met = {True: "yes", False: "NO", None: "-"}[f.met]
        rows.append((f.id, f.what, _fmt(f.value, f.unit), target, met, f.limited_by))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = []
    for i, row in enumerate(rows):
        cells = [c.ljust(w) for c, w in zip(row[:5], widths)] + [row[5]]
        lines.append("  ".join(cells).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 10)
    return "\n".join(lines)


def write_results(path: Path, figures: Sequence[Figure], meta: dict | None = None) -> None:
    """``{"meta": ..., "figures": [...]}``, written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"meta": meta or {}, "figures": [f.to_dict() for f in figures]}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_results(path: Path) -> list[Figure]:
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    return [Figure.from_dict(f) for f in raw["figures"]]


def machine_meta() -> dict:
    import platform

    import psutil

    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


# --------------------------------------------------------------------------- CLI


def base_parser(description: str) -> argparse.ArgumentParser:
    """The options every benchmark shares."""
    parser = argparse.ArgumentParser(description=description, allow_abbrev=False)
    parser.add_argument(
        "--work-dir",
        type=Path,
        help="folder for synthetic archives, shards and runs; reused between benchmarks "
        "(default: a temporary folder, removed at the end)",
    )
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repetitions")
    parser.add_argument("--json", type=Path, help="also write this benchmark's figures here")
    return parser


def add_knob_arguments(parser: argparse.ArgumentParser, knobs: Sequence[str], what: str) -> None:
    """``--knobs`` (which of ``knobs`` to measure, default all) and ``--knob-repeats``."""
    parser.add_argument(
        "--knobs",
        nargs="*",
        default=list(knobs),
        choices=list(knobs),
        help=f"{what} to measure against the default (default: all)",
    )
    parser.add_argument("--knob-repeats", type=int, default=1, help="repetitions of knobs")


def at_once(measure: Callable[[int], dict], copies: int = 2) -> list[dict]:
    """``measure(i)`` for i in 0..copies-1, all at the same time (the machine controls:
    unrelated runs sharing the cores, without any communication between them)."""
    with ThreadPoolExecutor(copies) as pool:
        return list(pool.map(measure, range(copies)))


def run_cli(parser: argparse.ArgumentParser, run: Callable) -> int:
    """Parse, run ``run(args, work_dir) -> list[Figure]`` in a work folder, print the table."""
    args = parser.parse_args()
    with work_dir(args.work_dir) as work:
        figures = run(args, work)
    print(format_table(figures), flush=True)
    if args.json:
        write_results(args.json, figures, machine_meta())
    return 0


class work_dir:
    """Context: ``path`` (created) or a temporary folder removed afterwards."""

    def __init__(self, path: Path | None):
        self.path, self._tmp = path, None

    def __enter__(self) -> Path:
        if self.path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="bench-")
            return Path(self._tmp.name)
        self.path.mkdir(parents=True, exist_ok=True)
        return self.path

    def __exit__(self, *exc) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- data


def synthetic_archive(
    work: Path, patches: int, seed: int = 0, difficulty: str = "simple", layout: str = "v1"
) -> Path:
    """A synthetic archive of ``patches`` patches, generated once per work folder."""
    from bigearthnet.synthetic.archive import ArchiveSpec, generate_archive

    suffix = "" if (difficulty, layout) == ("simple", "v1") else f"-{difficulty}-{layout}"
    out = work / f"archive-{patches}-s{seed}{suffix}"
    if not out.is_dir():  # generate_archive publishes atomically: a folder is complete
        say(f"generating a {difficulty} synthetic {layout} archive of {patches} patches")
        workers = os.cpu_count() or 1
        spec = ArchiveSpec(
            patches, layout=layout, seed=seed, workers=workers, difficulty=difficulty
        )
        generate_archive(out, spec)
    return out


def shards(archive: Path, out: Path, *options: str) -> Path:
    """``archive`` preprocessed into ``out`` (once: a manifest means done)."""
    if not (out / "manifest.json").is_file():
        cmd = [
            PYTHON,
            "-m",
            "bigearthnet.cli.preprocess",
            str(archive),
            str(out),
            "--no-progress",
            "--workers",
            str(os.cpu_count() or 1),
            *options,
        ]
        result = run(cmd)
        result.check(f"preprocessing {archive.name}")
    return out


def eval_shards(work: Path) -> Path:
    """The preprocessed 2,000-patch archive (P1's), used by the pipeline and evaluation."""
    return shards(synthetic_archive(work, 2000), work / "shards-2000", "--shard-size", "250")


def train_shards(work: Path, ranks: int = 1, layout: str = "v1") -> Path:
    """Shards whose train split is exactly ``TRAIN_STEPS`` batches of ``TRAIN_BATCH`` (of a
    v2 archive with ``layout="v2"``: with reference maps)."""
    train = TRAIN_BATCH * TRAIN_STEPS
    total = round(train / TRAIN_SPLIT[0])
    ratios = ",".join(str(r) for r in TRAIN_SPLIT)
    suffix = "" if layout == "v1" else f"-{layout}"
    out = shards(
        synthetic_archive(work, total, seed=1, layout=layout),
        work / f"shards-train-{total}{suffix}",
        "--split-ratios",
        ratios,
        "--shard-size",
        str(train),
    )
    return out


# --------------------------------------------------------------------------- processes


@dataclass
class Result:
    """A finished command: exit code, wall seconds, peak RSS of its tree, output."""

    cmd: list[str]
    returncode: int
    wall_s: float
    peak_rss_mb: float
    stdout: str
    stderr: str

    def check(self, what: str) -> Result:
        if self.returncode != 0:
            tail = (self.stdout[-2000:] + "\n" + self.stderr[-4000:]).strip()
            raise RuntimeError(f"{what} failed (exit {self.returncode}): {tail}")
        return self


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and all its descendants, in MB (shared pages counted
    once per process, so an upper bound)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += proc.memory_info().rss
    return total / 2**20


def run(
    cmd: Sequence[str], env: dict | None = None, timeout: float = 1800, interval: float = 0.05
) -> Result:
    """Run ``cmd`` from the repository root, sampling the tree's RSS every ``interval`` s."""
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    peak = [0.0]
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(list(cmd), cwd=REPO, stdout=out, stderr=err, env=full_env)
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], tree_rss_mb(proc.pid))
                done.wait(interval)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            returncode = proc.wait()
        wall = time.perf_counter() - start
        done.set()
        sampler.join()
        out.seek(0)
        err.seek(0)
        return Result(list(cmd), returncode, wall, peak[0], out.read(), err.read())


def horovodrun(ranks: int, argv: Sequence[str]) -> list[str]:
    """The command that starts ``python argv...`` on ``ranks`` local ranks (Gloo)."""
    return [HOROVODRUN, "-np", str(ranks), "-H", f"localhost:{ranks}", "--gloo", PYTHON, *argv]


def launch(
    ranks: int, argv: Sequence[str], env: dict | None = None, python: str = PYTHON
) -> Result:
    """``python argv`` directly for one rank (``python``: another stack's interpreter),
    through horovodrun for several."""
    cmd = [python, *argv] if ranks == 1 else horovodrun(ranks, argv)
    return run(cmd, env=env)


# --------------------------------------------------------------------------- training runs


def train_run(
    data: Path,
    run_dir: Path,
    ranks: int = 1,
    extra: Sequence[str] = (),
    what: str = "train.py",
    python: str = PYTHON,
) -> dict:
    """Run train.py with the benchmark recipe; the measured (last) epoch's figures.

    Returns samples_per_s (all ranks) and data_wait_fraction, medians over the epochs
    after the first (graph tracing, allocations: never measured), and the last epoch's
    efficiency.json.
    """
    argv = ["train.py", "--data", str(data), "--run-dir", str(run_dir), *TRAIN_RECIPE, *extra]
    result = launch(ranks, argv, python=python).check(f"{what} ({ranks} rank(s))")
    rows = read_history(run_dir)
    efficiency = asdict(read_efficiency(run_dir))
    measured = rows[1:] or rows
    return {
        "samples_per_s": median([r.samples_per_s for r in measured]),
        "data_wait_fraction": median([r.data_wait_fraction for r in measured]),
        "efficiency": efficiency,
        "wall_s": result.wall_s,
        "peak_rss_mb": result.peak_rss_mb,
    }


def parse_number(pattern: str, text: str) -> float | None:
    match = re.search(pattern, text)
    return float(match.group(1)) if match else None
