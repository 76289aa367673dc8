"""``RUN/report.html``: one self-contained page per run (``bigearthnet-report RUN``, and at
the end of ``train.py`` and ``evaluate.py``): the run, what it made (scene and change maps
first), its training, its scaling over time, its evaluations, from the run folder's files
alone. Numbers and paths are shown as :mod:`bigearthnet.core.display` shows them."""

from __future__ import annotations

import base64
import dataclasses
import datetime
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core import display
from bigearthnet.evaluation import plots
from bigearthnet.evaluation.report import PREDICTIONS_FILE, format_score, read_predictions
from bigearthnet.evaluation.summary import EvalSummary
from bigearthnet.formats import pixel_eval, run_folder
from bigearthnet.formats.history import HistoryRow
from bigearthnet.formats.pixel_eval import PixelClassRow
from bigearthnet.pages import run_figures
from bigearthnet.pages.render import svg, write_page
from bigearthnet.pages.run_facts import RunFacts, read_run

REPORT = run_folder.REPORT
# Why a history row has no B_simple, as the page says it (the cell's text -> the note).
NOISE_NOTES = {
    "n/a": "not measured: the noise scale was off (--no-gns) or there was one batch size "
    "only (1 rank, no gradient accumulation), so nothing to compare",
    "unresolved": "not measured: the estimate of |G|² (the mean gradient's squared norm) "
    "was not above zero, so tr(S)/|G|² has no finite value; the gradient's mean was lost "
    "in its noise, as when the learning rate decays to 0",
}


@dataclass(frozen=True)
class EvaluationFigures:
    """An evaluation's figures as inline PNGs (None where its data is missing), and the
    dense head's per-class pixel figures (pixel_per_class.csv; [] without the head)."""

    f1: str
    pr: str | None
    pixel_confusion: str | None = None
    pixel_rows: tuple[PixelClassRow, ...] = ()


def write_run_page(run_dir: Path, out: Path | None = None) -> Path:
    """Write the page (default ``RUN/report.html``) and return its path; ReportError when
    the folder has no run to report."""
    facts = read_run(Path(run_dir))
    plt = run_figures.pyplot()
    figures = {
        "training": run_figures.training_figure(facts.history),
        "scaling": run_figures.scaling_figure(
            facts.history, facts.events, facts.decisions, elastic=facts.elastic
        ),
    }
    inline = {name: svg(figure, title=name) for name, figure in figures.items()}
    for figure in figures.values():
        plt.close(figure)
    noise = [noise_cell(row) for row in facts.history]
    path = Path(out) if out is not None else facts.run_dir / REPORT
    return write_page(
        path,
        "run.html.j2",
        facts=facts,
        figures=inline,
        evaluation_figures={e.split: _evaluation_figures(e) for e in facts.evaluations},
        headline=_headline(facts),
        noise=noise,
        noise_notes={cell: NOISE_NOTES[cell] for cell in noise if cell in NOISE_NOTES},
        number=format_score,
        written=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    )


def noise_cell(row: HistoryRow) -> str:
    """The B_simple of an epoch as its table cell: the value, or a word NOISE_NOTES explains."""
    if row.gns_b_simple is not None:
        return display.rounded(row.gns_b_simple)
    return "n/a" if row.gns_grad_sq is None else "unresolved"


def _evaluation_figures(evaluation: EvalSummary) -> EvaluationFigures:
    """The figures evaluate.py drew into the evaluation folder (every plot there is of its
    evaluation: ``plots.write_plots``); drawn here where missing: per-class F1 from the
    metrics, the PR curves from the scores where they are kept."""
    folder = evaluation.folder

    def drawn(name: str) -> bytes | None:
        path = folder / name if folder is not None else None
        return path.read_bytes() if path is not None and path.is_file() else None

    f1 = drawn(plots.F1_PLOT) or plots.plot_f1_per_class(evaluation)
    pr = drawn(plots.PR_CURVES_PLOT)
    scores = folder / PREDICTIONS_FILE if folder is not None else None
    if pr is None and scores is not None and scores.is_file():
        predictions = read_predictions(scores)
        pr = plots.plot_pr_curves(predictions.labels, predictions.scores, evaluation.classes)
    figures = EvaluationFigures(_png_uri(f1), None if pr is None else _png_uri(pr))
    if evaluation.pixel is None or folder is None or not evaluation.pixel.against:
        return figures
    confusion = drawn(plots.PIXEL_CONFUSION_PLOT)
    if confusion is None:
        confusion = plots.plot_pixel_confusion(pixel_eval.read_confusions(folder)[1])
    rows = tuple(pixel_eval.read_pixel_classes(folder))
    return dataclasses.replace(figures, pixel_confusion=_png_uri(confusion), pixel_rows=rows)


def _png_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _headline(facts: RunFacts) -> EvalSummary | None:
    """The evaluation the page leads with: test if there is one, else the first."""
    tests = [e for e in facts.evaluations if e.split == "test"]
    return tests[0] if tests else (facts.evaluations[0] if facts.evaluations else None)
