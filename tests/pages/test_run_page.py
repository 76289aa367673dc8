"""RUN/report.html in a real browser: self-contained, the numbers of metrics.json and
history.csv, a sortable per-class table, map previews that decode, strings from the run
shown as text; a half-written run gets a page saying what is missing; no history: exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from browser import assert_self_contained, open_page

import evaluate
from bigearthnet.cli.report import main as report_main
from bigearthnet.core.util import read_csv
from bigearthnet.pages.run_page import REPORT


@pytest.fixture(scope="module")
def reported_run(trained_run: Path, tmp_path_factory) -> Path:
    """A copy of the tiny run under a hostile name, evaluated (its page written by
    evaluate.py), with a map preview under RUN/maps/."""
    run = tmp_path_factory.mktemp("pages") / "<img src=x onerror=alert(1)>"
    shutil.copytree(trained_run, run)
    (run / REPORT).unlink(missing_ok=True)
    assert evaluate.main(["--run-dir", str(run)]) == 0
    assert (run / REPORT).is_file()  # evaluate.py wrote it at its end
    (run / "maps").mkdir()
    from PIL import Image

    Image.new("RGB", (40, 30), (230, 0, 77)).save(run / "maps" / "tile.png")
    assert report_main([str(run)]) == 0
    return run


def test_train_and_evaluate_write_the_page(trained_run: Path, reported_run: Path):
    assert (trained_run / REPORT).stat().st_size > 10_000  # train.py, at its end
    assert (reported_run / REPORT).stat().st_size > 10_000


def test_run_page_in_a_browser(reported_run: Path, tmp_path: Path):
    page = reported_run / REPORT
    metrics = json.loads((reported_run / "eval-test" / "metrics.json").read_text())
    history = read_csv(reported_run / "history.csv")
    with open_page(page) as visit:
        assert_self_contained(visit, page)
        key = '#summary [data-key="{}"]'
        assert visit.text(key.format("test_micro_f1")) == f"{metrics['micro_f1']:.4f}"
        assert visit.text(key.format("test_macro_map")) == f"{metrics['macro_map']:.4f}"
        assert visit.text(key.format("val_micro_f1")) == f"{float(history[-1]['val_micro_f1']):.4f}"
        assert visit.text(key.format("val_macro_map")) == (
            f"{float(history[-1]['val_macro_map']):.4f}"
        )
        rows_shown = [row.split() for row in visit.texts("#history tr")[1:]]
        assert [r[0] for r in rows_shown] == [row["epoch"] for row in history]
        # validation micro/macro mAP per epoch (columns 9 and 10), as history.csv has them
        maps = [(r[8], r[9]) for r in rows_shown]
        assert maps == [
            (f"{float(row['val_micro_map']):.4f}", f"{float(row['val_macro_map']):.4f}")
            for row in history
        ]
        # The command line that trained it (train.py's own record, commands.txt).
        command = visit.text("#commands tr:nth-child(2)")
        assert "train.py --data" in command and "--epochs 6" in command
        table = "#per-class-test tbody tr"
        rows = [row.split("\n")[0] for row in visit.texts(table)]
        assert len(visit.texts(table)) == 19
        f1 = [float(r.split()[-2]) for r in visit.texts(table)]
        assert f1 == [round(c["f1"], 4) for c in metrics["per_class"]]
        # Sort by F1 (6th column): descending on the second click.
        header = visit.driver.find_elements("css selector", "#per-class-test th")[5]
        header.click()
        header.click()
        f1_sorted = [float(r.split()[-2]) for r in visit.texts(table)]
        assert f1_sorted == sorted(f1, reverse=True) and rows
        # The hostile folder name is text; the only script is the page's own sorter.
        assert reported_run.name in visit.text("h1")
        assert str(reported_run) in visit.text(".sub")
        assert visit.driver.execute_script("return document.scripts.length") == 1
        assert visit.driver.execute_script("return document.images.length") == 1
        assert len(visit.driver.find_elements("css selector", "figure svg")) == 3
        visit.screenshot(tmp_path / "run.png")
    assert page.stat().st_size < 5_000_000


def test_a_half_written_run_says_what_is_missing(trained_run: Path, tmp_path: Path):
    run = tmp_path / "half"
    skip = shutil.ignore_patterns("eval-*", "status.json", REPORT)
    shutil.copytree(trained_run, run, ignore=skip)
    assert report_main([str(run)]) == 0
    page = run / REPORT
    with open_page(page) as visit:
        assert_self_contained(visit, page)
        missing = visit.text("#missing")
        assert "an evaluation: run evaluate.py" in missing and "status.json" in missing
        assert "not ended" in visit.text("#summary")


def test_no_history_is_one_line_exit_2(trained_run: Path, tmp_path: Path, reported_errors):
    run = tmp_path / "empty"
    shutil.copytree(trained_run, run, ignore=shutil.ignore_patterns("history.csv", REPORT))
    assert report_main([str(run)]) == 2
    (line,) = reported_errors()
    assert "no history.csv rows: no epoch has finished" in line
    assert not (run / REPORT).exists()
    assert report_main([str(tmp_path / "nowhere")]) == 2
