"""RUN/report.html in a real browser: self-contained, the numbers of metrics.json and
history.csv, a sortable per-class table, the scene map in the map viewer (its pixels on
screen: test_run_maps.py) and the other maps' previews that decode (a cap saying how many
of how many), per-class F1 and PR figures, strings from the run shown as
text, numbers at sensible precision with every blank explained, the synthetic origin said,
no path of this machine; a half-written run gets a page saying what is missing; no history:
exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from browser import assert_self_contained, open_page

import evaluate
from bigearthnet.cli.map import main as map_main
from bigearthnet.cli.report import main as report_main
from bigearthnet.core import display
from bigearthnet.core.util import read_csv
from bigearthnet.pages import run_facts
from bigearthnet.pages.run_page import REPORT
from bigearthnet.synthetic.scene import SceneTruth, write_scene

SCENE = SceneTruth(size=240, block=120, border=0, classes=((2, 8), (9, 17)))
SHOWN = 2  # previews inlined (run_facts.MAX_PREVIEWS, lowered so that some are left out)


@pytest.fixture(scope="module")
def reported_run(trained_run: Path, shards_v1: Path, tmp_path_factory) -> Path:
    """A copy of the tiny run under a hostile name, evaluated (its page written by
    evaluate.py), with maps under RUN/maps/ as ``make demo`` makes them: patch maps of
    the test split (named before the scene alphabetically) and a scene map."""
    root = tmp_path_factory.mktemp("pages")
    run = root / "<img src=x onerror=alert(1)>"
    shutil.copytree(trained_run, run)
    (run / REPORT).unlink(missing_ok=True)
    assert evaluate.main(["--run-dir", str(run)]) == 0
    assert (run / REPORT).is_file()  # evaluate.py wrote it at its end
    maps = run / "maps"
    patches = ["--run-dir", str(run), "--shards", str(shards_v1), "--split", "test"]
    assert map_main([*patches, "--out", str(maps / "patches"), "--no-progress"]) == 0
    write_scene(root / "scene", SCENE, seed=1, layout="tif", difficulty="simple")
    scene = ["scene", str(root / "scene"), "--run-dir", str(run), "--stride", "120"]
    assert map_main([*scene, "--out", str(maps / "scene.tif"), "--no-progress"]) == 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_facts, "MAX_PREVIEWS", SHOWN)
        assert report_main([str(run)]) == 0
    return run


def test_train_and_evaluate_write_the_page(trained_run: Path, reported_run: Path):
    assert (trained_run / REPORT).stat().st_size > 10_000  # train.py, at its end
    assert (reported_run / REPORT).stat().st_size > 10_000


def test_run_page_in_a_browser(reported_run: Path, shards_v1: Path, tmp_path: Path):
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
        # The hostile folder name is text; the only scripts are the page's own: the map
        # viewer's data and code, and the sorter.
        assert reported_run.name in visit.text("h1")
        assert visit.driver.execute_script("return document.scripts.length") == 3
        assert len(visit.driver.find_elements("css selector", "figure svg")) == 2
        # One browser for every look (a Chromium start is seconds of `make test`).
        _shows_what_the_run_made_first(visit, reported_run)
        _numbers_and_blanks_read_as_a_person_expects(visit, history)
        _no_path_of_this_machine_is_on_the_page(visit, page, shards_v1)
        visit.screenshot(tmp_path / "run.png")
    assert page.stat().st_size < 5_000_000


def _shows_what_the_run_made_first(visit, run: Path) -> None:
    """The scene map leads the maps, in the map viewer (its preview not shown again); the
    cap says how many previews of how many and where all are; per-class F1 and the PR
    curves are images that load."""
    assert visit.texts("#viewer figcaption") == [
        "maps/scene.tif: 1200 m cells, classifier (120 px windows)"
    ]
    found = sorted(p.relative_to(run).as_posix() for p in (run / "maps").rglob("*.png"))
    previews = [name for name in found if name != "maps/scene.png"]
    assert len(previews) > SHOWN and len(found) == len(previews) + 1
    assert visit.text("#maps-cap") == f"{SHOWN} of {len(previews)} shown; all in maps/"
    shown = [img.get_attribute("alt") for img in visit.driver.find_elements(
        "css selector", "figure[class^=map] img")]  # fmt: skip
    assert shown == previews[:SHOWN]
    for selector in ("#f1-test img", "#pr-test img"):
        width = visit.driver.execute_script(
            f"return document.querySelector('{selector}').naturalWidth"
        )
        assert width > 400, selector


def _numbers_and_blanks_read_as_a_person_expects(visit, history: list[dict]) -> None:
    summary = visit.text("#summary")
    assert f"{len(history)} epochs of {len(history)}" in summary and "1 rank " in summary
    assert "epoch(s)" not in summary and "rank(s)" not in summary
    wall = visit.text('[data-key="wall"]')
    assert wall.endswith((" s", " min")), wall  # a minute-long run is not "0.00 h"
    cells = visit.texts("#history td:nth-child(4)")  # LR
    assert cells == [display.significant(float(row["lr"])) for row in history]
    # One rank: no second batch size, no noise scale; the blank says why.
    assert set(visit.texts("#history td:nth-child(13)")) == {"n/a"}  # B_simple
    assert visit.text("#history-notes").startswith("B_simple n/a: not measured:")
    assert visit.text("#efficiency-notes").startswith("communication efficiency n/a: not measured")
    words = visit.driver.execute_script("return document.body.innerText").split()
    assert "inf" not in words and "nan" not in words
    # A fixed-size run: no elastic caption or panel.
    assert "elastic_events.csv" not in visit.text("figure:has(svg[aria-label=scaling])")
    # Trained on the project's synthetic archive: said before any score.
    origin = visit.text("#origin")
    assert "Trained on synthetic data" in origin
    assert "bigearthnet-synth: 240 simple v1 patches, seed 7" in origin
    assert visit.text("#data-origin").startswith("synthetic")


def _no_path_of_this_machine_is_on_the_page(visit, page: Path, shards_v1: Path) -> None:
    """Shared after scp: the run's files relative to it, other folders by name."""
    html = page.read_text()
    for folder in (page.parent.parent, shards_v1.parent, Path.home()):
        assert str(folder) not in html
    assert visit.text("#source-test").startswith("eval-test · checkpoint checkpoints/best-e")
    assert f"--data {shards_v1.name} --run-dir tiny " in visit.text("#commands")
    text = visit.driver.execute_script("return document.body.innerText")
    assert "/tmp" not in text


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
