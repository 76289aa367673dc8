"""Which epoch is the best and whether the run has stopped improving, by ``--select-metric``
over the run's history (the same answer on every rank and after any resume: it is computed
from ``history.csv``'s rows, never from state a process holds).

An epoch is a new best when its metric is strictly above every earlier epoch's (so a tie
keeps the earlier checkpoint); a metric a row lacks (None: no positive label, or a row from
before validation had mAPs) never wins. Early stopping after ``--early-stopping-patience N``
ends the run once N validations in a row brought no new best.
"""

from __future__ import annotations

import math

from bigearthnet.formats.history import HistoryRow


def _value(row: HistoryRow, metric: str) -> float:
    score = row.score(metric)
    return -math.inf if score is None or math.isnan(score) else score


def best_index(history: list[HistoryRow], metric: str) -> int | None:
    """Index of the best row of ``history`` (the first of equals); None for no rows."""
    if not history:
        return None
    values = [_value(row, metric) for row in history]
    return values.index(max(values))


def is_new_best(history: list[HistoryRow], metric: str) -> bool:
    """Whether the last row beats every earlier one (it then becomes the 'best' checkpoint)."""
    if not history or _value(history[-1], metric) == -math.inf:
        return False
    return best_index(history, metric) == len(history) - 1


def validations_since_best(history: list[HistoryRow], metric: str) -> int:
    """Rows after the best one: 0 when the last epoch is the best."""
    best = best_index(history, metric)
    return 0 if best is None else len(history) - 1 - best
