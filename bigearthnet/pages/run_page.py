"""``RUN/report.html``: one self-contained page per run (``bigearthnet-report RUN``, and at
the end of ``train.py`` and ``evaluate.py``): the run, its training, its scaling over time,
its evaluations and its maps, from the run folder's files alone."""

from __future__ import annotations

import datetime
from pathlib import Path

from bigearthnet.evaluation.report import format_score, read_predictions
from bigearthnet.evaluation.summary import EvalSummary
from bigearthnet.formats import run_folder
from bigearthnet.pages import run_figures
from bigearthnet.pages.render import svg, write_page
from bigearthnet.pages.run_facts import RunFacts, read_run

REPORT = run_folder.REPORT


def write_run_page(run_dir: Path, out: Path | None = None) -> Path:
    """Write the page (default ``RUN/report.html``) and return its path; ReportError when
    the folder has no run to report."""
    facts = read_run(Path(run_dir))
    plt = run_figures.pyplot()
    figures = {
        "training": run_figures.training_figure(facts.history),
        "scaling": run_figures.scaling_figure(facts.history, facts.events, facts.decisions),
    }
    pr_curves = {}
    for evaluation in facts.evaluations:
        if evaluation.folder is None:  # records read from a folder always name it
            continue
        predictions = evaluation.folder / "predictions.h5"
        if predictions.is_file():
            names = [c.name for c in evaluation.per_class]
            figure = run_figures.pr_figure(read_predictions(predictions), names)
            pr_curves[evaluation.split] = svg(figure, title=f"PR curves, {evaluation.split}")
            plt.close(figure)
    inline = {name: svg(figure, title=name) for name, figure in figures.items()}
    for figure in figures.values():
        plt.close(figure)
    path = Path(out) if out is not None else facts.run_dir / REPORT
    return write_page(
        path,
        "run.html.j2",
        facts=facts,
        figures=inline,
        pr_curves=pr_curves,
        headline=_headline(facts),
        number=format_score,
        written=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    )


def _headline(facts: RunFacts) -> EvalSummary | None:
    """The evaluation the page leads with: test if there is one, else the first."""
    tests = [e for e in facts.evaluations if e.split == "test"]
    return tests[0] if tests else (facts.evaluations[0] if facts.evaluations else None)
