"""The seed study's batch table in miniature: one recipe, the same number of epochs at every
global batch size, with SGD (linear LR scaling and warm-up) and with LAMB (square-root
scaling), and what each reached.

Sedona et al. (2019/2020) trained ResNet-50 on BigEarthNet for the same epochs at batch 512
(8 GPUs, F1 0.78) up to 8,000 (128 GPUs, F1 0.74) and saw 16,000 and 32,000 diverge (F1 0.64,
0.43). Each cell here is a batch study point (:mod:`.batch_study`, ``--budget epochs``), so
the runs, their accumulation where a rank's batch does not fit, their resume and their
checks are the study's: ``OUT/<optimizer>/`` is a batch study of its own (its ``study.html``
holds the fitted critical batch). This module runs one per optimizer and writes
``OUT/seed_table.csv`` and ``OUT/seed_table.html``: the table in the seed's form, each
optimizer's fit beside it.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core.declare import check_fields, option, reuse
from bigearthnet.core.errors import ConfigError, require_positive
from bigearthnet.core.folders import claim_folder
from bigearthnet.core.optimizer_table import SEED_RULES
from bigearthnet.core.util import write_csv
from bigearthnet.scaling.study_outputs import StudyResult, read_study
from bigearthnet.scaling.study_settings import StudyRuns, StudySettings

SEED_TABLE_CSV = "seed_table.csv"
SEED_TABLE_HTML = "seed_table.html"
SEED_TABLE_MARK = ".bigearthnet-seed-table"
# The seed study's table (43 labels, ResNet-50, JUWELS): global batch -> test F1.
SEED_STUDY = {512: 0.78, 8000: 0.74, 16000: 0.64, 32000: 0.43}


def _ruled(rule: str) -> str:
    """The seed table's optimizers scaled by ``rule``, for the help: ``sgd and lars``."""
    return " and ".join(name for name, ruled in SEED_RULES.items() if ruled == rule)


def optimizers(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [name for name in names if name not in SEED_RULES]
    if not names or unknown:
        raise ConfigError(f"expected optimizers among {', '.join(SEED_RULES)}, got {text!r}")
    return names


def spanning(flag: str, value: tuple[int, ...]) -> tuple[int, ...]:
    """At least 4 batch sizes spanning at least 32x: the seed table's range in miniature."""
    if len(set(value)) < 4 or max(value) < 32 * min(value):
        raise ConfigError(f"{flag} {','.join(map(str, value))}: give >= 4 sizes spanning >= 32x")
    return value


@dataclass(frozen=True, kw_only=True)
class SeedTableSettings(StudyRuns):
    """``bigearthnet-seed-table``'s options, declared once: a study's
    (:class:`~bigearthnet.scaling.study_settings.StudyRuns`) with the seed table's defaults,
    and the optimizers with their LRs."""

    out: Path = reuse(StudyRuns, "out", help="the table's folder: <optimizer>/ studies, "
                      "seed_table.csv, .html", metavar="DIR")  # fmt: skip
    batches: tuple[int, ...] = reuse(StudyRuns, "batches", default=(16, 64, 256, 1024),
                                     help="global batch sizes, >= 4 spanning >= 32x",
                                     check=spanning)  # fmt: skip
    target_f1: float = reuse(StudyRuns, "target_f1", default=0.6)
    base_batch: int = reuse(StudyRuns, "base_batch", default=64)
    ranks: int = reuse(StudyRuns, "ranks", default=2)
    max_rank_batch: int = reuse(StudyRuns, "max_rank_batch", default=128)
    epochs: int = reuse(StudyRuns, "epochs", default=10, help="epochs at every batch size")
    optimizers: tuple[str, ...] = option(("sgd", "lamb"), "optimizers, each a column",
                                         parse=optimizers, metavar="NAME,...")  # fmt: skip
    sgd_lr: float = option(0.05, f"peak LR at --base-batch of {_ruled('linear')}, scaled "
                           "linearly", check=require_positive, metavar="LR")  # fmt: skip
    lamb_lr: float = option(0.004, f"peak LR at --base-batch of {_ruled('sqrt')}, scaled by "
                            "the root", check=require_positive, metavar="LR")  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)

    def study(self, optimizer: str) -> StudySettings:
        """The batch study of one column (``OUT/<optimizer>``)."""
        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(StudyRuns)}
        rule = SEED_RULES[optimizer]
        return StudySettings(
            **{**shared, "out": self.out / optimizer}, optimizer=optimizer, rule=rule,
            base_lr=self.lamb_lr if rule == "sqrt" else self.sgd_lr, budget="epochs",
        )  # fmt: skip


@dataclass(frozen=True)
class SeedRow:
    """One row of ``seed_table.csv``."""

    optimizer: str
    global_batch: int
    epochs: int
    updates: int | None
    final_micro_f1: float | None  # the last validation micro-F1 of the run's history
    best_micro_f1: float
    reached_target: bool
    diverged: bool
    peak_lr: float


def row_of(settings: SeedTableSettings, result: StudyResult) -> SeedRow:
    return SeedRow(
        optimizer=result.optimizer, global_batch=result.global_batch, epochs=settings.epochs,
        updates=result.updates, final_micro_f1=result.final_val_micro_f1,
        best_micro_f1=result.best_val_micro_f1,
        reached_target=result.steps_to_target is not None and not result.diverged,
        diverged=result.diverged, peak_lr=result.peak_lr,
    )  # fmt: skip


def run_seed_table(settings: SeedTableSettings, *, log=print) -> list[SeedRow]:
    """Run (or resume) every column's study; write the table and its page."""
    from bigearthnet.scaling.batch_study import check_existing_points, checked_points, run_study

    # every column's options and batches, before anything is written
    columns = [checked_points(settings.study(optimizer)) for optimizer in settings.optimizers]
    for optimizer, (study, _) in zip(settings.optimizers, columns):
        if study.optimizer != optimizer:  # e.g. a --config after -- naming one
            raise ConfigError(
                f"the train.py options after -- may not set the optimizer "
                f"({study.optimizer}): each column is one of --optimizers"
            )
    # make seed-table keeps its archive in DIR/data
    own = (*SEED_RULES, SEED_TABLE_CSV, SEED_TABLE_HTML, "data")
    claim_folder(settings.out, mark=SEED_TABLE_MARK, made_by="bigearthnet-seed-table",
                 own_names=own)  # fmt: skip
    for study, points in columns:  # every cell made before with these settings, before any trains
        check_existing_points(study, points)
    rows: list[SeedRow] = []
    for optimizer in settings.optimizers:
        log(f"seed table: {optimizer}, {settings.epochs} epochs at every batch size")
        results = run_study(settings.study(optimizer), log=log)
        rows += [row_of(settings, result) for result in results]
    write_seed_table(settings, rows)
    return rows


def write_seed_table(settings: SeedTableSettings, rows: Sequence[SeedRow]) -> None:
    from bigearthnet.pages.render import write_page

    header = [f.name for f in dataclasses.fields(SeedRow)]
    write_csv(settings.out / SEED_TABLE_CSV, header,
              [[_cell(getattr(row, name)) for name in header] for row in rows])  # fmt: skip
    batches = sorted({row.global_batch for row in rows})
    cells = {(row.optimizer, row.global_batch): row for row in rows}
    studies = {name: read_study(settings.out / name) for name in settings.optimizers}
    written = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    write_page(settings.out / SEED_TABLE_HTML, "seed_table.html.j2", settings=settings,
               batches=batches, cells=cells, studies=studies, seed=SEED_STUDY,
               written=written)  # fmt: skip


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4f}" if value < 1 else f"{value:.6g}"
    return str(value)
