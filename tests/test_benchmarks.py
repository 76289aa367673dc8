"""The benchmark suite's plumbing: every script answers --help, the table and the results
JSON are written from figures, and the efficiency report's arithmetic. No timing asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO

BENCH = REPO / "benchmarks"
sys.path.insert(0, str(BENCH))

import common  # noqa: E402
import run_all  # noqa: E402

SCRIPTS = [
    "preprocess.py",
    "input_pipeline.py",
    "train_throughput.py",
    "scaling.py",
    "evaluation.py",
    "export.py",
    "noise_cost.py",
    "scene_maps.py",
    "region_memory.py",
    "run_all.py",
]


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_answers_help(script: str) -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout and "--work-dir" in result.stdout


def fake_figures() -> list[common.Figure]:
    return [
        common.Figure("P1", "fake ratio", 4.5, "x", ">=", 4.0, "reading", {"runs": [1, 2]}),
        common.Figure("P6", "fake fraction", 0.07, "%", "<", 0.05, "prefetch"),
        common.Figure("K-x", "knob without target", 0.8, "x"),
        common.Figure("P5", "a failed benchmark", None),
    ]


def test_table_and_json_round_trip(tmp_path: Path) -> None:
    figures = fake_figures()
    assert [f.met for f in figures] == [True, False, None, None]
    table = common.format_table(figures)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["id", "what", "measured"] and len(lines) == 2 + len(figures)
    assert "4.50x" in table and ">= 4.00x" in table and "7.0 %" in table and "NO" in table
    assert "n/a" in lines[-1]
    path = tmp_path / "results.json"
    common.write_results(path, figures, {"cpus": 2})
    raw = json.loads(path.read_text())
    assert raw["meta"] == {"cpus": 2} and raw["figures"][0]["met"] is True
    assert common.read_results(path) == figures


def test_paired_ratio_and_interleave_order() -> None:
    assert common.paired_ratio([2.0, 9.0, 3.0], [1.0, 3.0, 1.0]) == 3.0
    calls: list[str] = []
    variants = {name: (lambda rep, n=name: calls.append(n) or 1.0) for name in "abc"}
    out = common.interleave(variants, 3, log=lambda _: None)
    assert calls == list("abcbcacab") and out == {n: [1.0] * 3 for n in "abc"}


def test_run_all_collects_figures_and_failures(tmp_path: Path, monkeypatch, capsys) -> None:
    good = tmp_path / "good.py"
    good.write_text(
        "import argparse, sys\n"
        f"sys.path.insert(0, {str(BENCH)!r})\n"
        "import common\n"
        "p = common.base_parser('fake')\n"
        "args = p.parse_args()\n"
        "common.write_results(args.json, [common.Figure('F1', 'fake', 1.5, 'x', '>=', 1.0)])\n"
    )
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nsys.exit('boom: no data')\n")
    monkeypatch.setattr(run_all, "BENCHMARKS", [(str(good), []), (str(bad), [])])
    out = tmp_path / "results.json"
    assert run_all.main(["--work-dir", str(tmp_path / "work"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "F1" in printed and "bad.py failed" in printed
    figures = json.loads(out.read_text())["figures"]
    assert [f["id"] for f in figures] == ["F1", "bad"]
    assert figures[1]["value"] is None and "boom" in figures[1]["limited_by"]


def test_efficiency_report_factors_multiply_to_parallel_efficiency() -> None:
    from bigearthnet.training.efficiency import efficiency_line, efficiency_report

    # per rank: step, wait, samples, epoch, compute, comm
    table = np.array([[10.0, 1.0, 80, 12.0, 8.0, 2.0], [9.0, 0.5, 80, 12.0, 6.0, 3.0]])
    report = efficiency_report(table, epoch=3, measured_comm=True)
    assert report.load_balance == pytest.approx(7.0 / 8.0)
    assert report.communication_efficiency == pytest.approx(8.0 / 10.0)
    assert report.input_efficiency == pytest.approx(10.0 / 11.0)
    product = report.load_balance * report.communication_efficiency * report.input_efficiency
    assert report.parallel_efficiency == pytest.approx(product)
    assert report.samples_per_s_total == pytest.approx(160 / 11.0)
    assert report.per_rank[1].communication_s == 3.0
    assert "communication 0.800" in efficiency_line(report)
    plain = efficiency_report(table[:, :4], epoch=3)
    assert plain.communication_efficiency is None and plain.per_rank[0].compute_s is None
    assert plain.parallel_efficiency == pytest.approx(9.5 / 11.0)
    assert "n/a" in efficiency_line(plain)
