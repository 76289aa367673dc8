"""study.json and the plot from a study's rows: the fit, B_simple beside it, the job sizes."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import study_result as result

from bigearthnet.scaling.study_outputs import (
    STUDY_PLOT,
    StudySettings,
    analyse,
    read_study,
    write_outputs,
)


def test_study_json_holds_the_fit_and_the_recommendation(tmp_path: Path):
    settings = StudySettings(
        data=tmp_path, out=tmp_path, batches=(), target_f1=0.75, max_rank_batch=32
    )
    exact = {b: round(30 * (1 + 400 / b)) for b in (16, 32, 64, 128, 256, 512, 1024)}
    results = [result(b, s) for b, s in exact.items()]
    results += [result(2048, None), result(4096, None, diverged=True)]
    analysis = analyse(settings, results)
    write_outputs(settings, results, analysis)
    study = read_study(tmp_path)
    fit = study["fit"]
    assert fit["b_crit"] == pytest.approx(400, rel=0.03) and fit["points"] == 7
    assert fit["b_crit_interval"][0] <= fit["b_crit"] <= fit["b_crit_interval"][1]
    assert study["b_simple"] == pytest.approx(25.0 + 0.256)  # median of the 9 late values
    assert "larger than the measured B_simple 25" in study["noise_scale_words"]
    scaling, critical = study["recommendation"]
    assert scaling["global_batch"] == 96 and scaling["ranks"] == 3  # <= B_crit / 4, x 32
    assert critical["ranks"] == int(fit["b_crit"] // 32)
    assert scaling["accelerator_hours"] == pytest.approx(scaling["examples"] / 50 / 3600)
    assert study["summary"][0].startswith("fitted B_crit 4")
    assert (tmp_path / STUDY_PLOT).stat().st_size > 10_000
    assert (tmp_path / "study.csv").read_text().count("\n") == 10


def test_a_study_that_cannot_be_fitted_says_why(tmp_path: Path):
    settings = StudySettings(data=tmp_path, out=tmp_path, batches=(), target_f1=0.75)
    results = [result(16, 100), result(32, 60), result(64, None), result(128, None)]
    analysis = analyse(settings, results)
    write_outputs(settings, results, analysis)
    study = read_study(tmp_path)
    assert study["fit"] is None and study["recommendation"] == []
    assert study["summary"] == [
        "no fit of the critical batch size: only 2 batch size(s) reached the target; the fit "
        "needs 3"
    ]
