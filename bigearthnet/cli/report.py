"""``bigearthnet-report RUN``: the run's page, ``RUN/report.html`` (see
:mod:`bigearthnet.pages.run_page`). train.py and evaluate.py write it when they end; this
command writes it on demand, for a run still going too."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bigearthnet.cli.common import Parser, run

PROG = "bigearthnet-report"


def build_parser() -> Parser:
    p = Parser(
        prog=PROG,
        description="Write a run's page, one self-contained HTML file (no network needed): "
        "the run, training curves, scaling over time (throughput, data wait, the noise scale "
        "beside the global batch, resizes and the controller's decisions), every evaluation "
        "(per-class table, PR curves) and the map previews under RUN/maps/.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN", help="run folder made by train.py")
    p.add_argument("--out", type=Path, metavar="FILE", help="the page (default: RUN/report.html)")
    return p


def _report(args: argparse.Namespace) -> None:
    from bigearthnet.pages.run_page import write_run_page

    path = write_run_page(args.run_dir, args.out)
    print(f"[report] {path}")


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), _report, argv)


def write_quietly(run_dir: str | Path) -> None:
    """Rank 0 at the end of train.py and evaluate.py: the page, or one warning line - a
    page that cannot be drawn never fails the run it describes."""
    from bigearthnet.core import distributed
    from bigearthnet.core.util import first_line

    try:
        if not distributed.is_root():
            return
        from bigearthnet.pages.run_page import write_run_page

        path = write_run_page(Path(run_dir))
        distributed.log.info("run page: %s", path)
    except Exception as err:  # the run's own result is already on disk
        distributed.log.warning("run page not written: %s", first_line(err))


if __name__ == "__main__":
    sys.exit(main())
