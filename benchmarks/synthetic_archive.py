"""S1: how fast ``bigearthnet-synth`` writes the realistic archive, with 2 workers.

Side by side, repetitions interleaved: the command writing ``--patches`` v2 patches with
``--workers 2`` in its default difficulty (realistic: landscapes, label noise, the truth
table, the realistic spectra) and with ``--difficulty simple`` (the old rectangles). The
rate is the command's own ("wrote N ... in S s": planning, rendering, GeoTIFFs, metadata
and truth files; interpreter start-up excluded).

* S1 = realistic patches/s with 2 workers; target >= 200 (an archive of 4,000 in 20 s).
* S1-cost = realistic / simple rate: what the realism costs (no target).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import common
from common import Figure

WORKERS = 2


def measure(work: Path, patches: int, difficulty: str, rep: int) -> float:
    """Patches/s the command reports for one archive, written afresh on a quiet disk.

    The archives are removed only after the last repetition, and the page cache is flushed
    before each: deleting the last one's 24,000 files (ext4 mounted with ``discard`` here)
    or writing back its pages slowed the next repetition to less than half (287 patches/s
    in the first repetition, 113-119 in the next two, session 41)."""
    out = work / f"s1-{difficulty}-{rep}"
    shutil.rmtree(out, ignore_errors=True)
    os.sync()
    argv = [common.PYTHON, "-m", "bigearthnet.cli.synth", str(out), "--patches", str(patches),
            "--layout", "v2", "--workers", str(WORKERS), "--difficulty", difficulty]  # fmt: skip
    result = common.run(argv).check(f"bigearthnet-synth --difficulty {difficulty}")
    seconds = common.parse_number(r"in ([\d.]+) s", result.stdout)
    if seconds is None:
        raise RuntimeError(f"no time in the command's output:\n{result.stdout[-2000:]}")
    return patches / seconds


def run(args, work: Path) -> list[Figure]:
    common.say(f"S1: {args.patches} v2 patches, {WORKERS} workers, realistic vs simple")
    rates = common.interleave(
        {
            "realistic": lambda rep: measure(work, args.patches, "realistic", rep),
            "simple": lambda rep: measure(work, args.patches, "simple", rep),
        },
        args.repeats,
        common.say,
    )
    for out in work.glob("s1-*"):
        shutil.rmtree(out, ignore_errors=True)
    return [
        Figure("S1", f"bigearthnet-synth, realistic v2 archive, {WORKERS} workers",
               common.median(rates["realistic"]), "patches/s", ">=", 200.0,
               "rendering the 12 bands (blur, texture) and writing 12 GeoTIFFs a patch",
               {"patches_per_s": rates, "patches": args.patches}),
        Figure("S1-cost", "realistic / simple generation rate, paired",
               common.paired_ratio(rates["realistic"], rates["simple"]), "x",
               limited_by="the realistic rendering's extra work per patch"),
    ]  # fmt: skip


def build_parser():
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--patches", type=int, default=2000, help="patches per archive")
    return parser


if __name__ == "__main__":
    raise SystemExit(common.run_cli(build_parser(), run))
