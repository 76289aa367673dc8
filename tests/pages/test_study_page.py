"""study.html in a real browser: self-contained, the numbers of study.json, run strings
escaped."""

from __future__ import annotations

import json
from pathlib import Path

from browser import assert_self_contained, open_page
from helpers import study_result as result

from bigearthnet.scaling.study_outputs import STUDY_HTML, StudySettings, analyse, write_outputs

STEPS = {16: 150, 32: 80, 64: 50, 128: 30, 256: 30, 512: 20, 1024: 18, 2048: 21, 4096: None}


def test_study_page_shows_the_fit_and_the_points(tmp_path: Path):
    data = tmp_path / "<script>alert('x')</script>"
    settings = StudySettings(data=data, out=tmp_path, batches=tuple(STEPS), target_f1=0.75)
    results = [result(batch, steps) for batch, steps in STEPS.items()]
    write_outputs(settings, results, analyse(settings, results))
    study = json.loads((tmp_path / "study.json").read_text())
    page = tmp_path / STUDY_HTML
    with open_page(page) as visit:
        assert_self_contained(visit, page)
        assert visit.text('#fit [data-key="b_crit"]') == f"{study['fit']['b_crit']:,.0f}"
        assert visit.text('#fit [data-key="s_min"]') == f"{study['fit']['s_min']:,.1f}"
        assert visit.text("#answer p") == study["summary"][0]
        rows = visit.texts("#points tr")[1:]
        assert [row.split()[0] for row in rows] == [f"{b:,}" for b in STEPS]
        assert "not reached" in rows[-1]
        recommended = visit.texts("#recommendation tr")[1:]
        assert len(recommended) == 2 and recommended[0].startswith(">= 80% of perfect scaling")
        # The hostile folder name is shown as text and ran nothing.
        assert str(data) in visit.text("#settings")
        assert visit.driver.execute_script("return document.scripts.length") == 0
        assert visit.driver.execute_script("return document.querySelectorAll('svg').length") == 1
        visit.screenshot(tmp_path / "study.png")
