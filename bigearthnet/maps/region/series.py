"""A temporally consistent land-cover series: per cell, the most probable sequence of classes
over the periods under a class-persistence prior (an HMM decoded by Viterbi), and the
figures that say how consistent a series is.

The model (per cell, independently):

* hidden state: the cell's class in each period;
* transitions: stay with probability ``persistence``, move to any other class with
  ``(1 - persistence) / (C - 1)``: land cover rarely changes between two periods, and
  nothing says which change is likelier;
* emissions: with independent sigmoid scores, the likelihood that the cell holds class c
  alone is ``s_c * prod(1 - s_other)``, i.e. ``logit(s_c)`` up to a term shared by all
  classes of the period (scores clipped to ``[EMISSION_FLOOR, 1 - EMISSION_FLOOR]``); an
  unobserved period (clouds, no scene) emits the same for every class, so the decoded
  series bridges it with the classes around it.

A one-period flicker A -> B -> A is kept only when B's evidence outweighs two switches,
``logit(s_B) - logit(s_A) > 2 log(persistence (C - 1) / (1 - persistence))`` (11.7 for 19
classes at the default 0.95); a lasting change pays the switch once and is kept when its
new class is seen in about two periods. Cells are independent, so a region is decoded in blocks
of cells (:func:`viterbi` takes any number) and the memory is that of one block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EMISSION_FLOOR = 1e-4
DEFAULT_PERSISTENCE = 0.95


def viterbi(scores: np.ndarray, persistence: float = DEFAULT_PERSISTENCE) -> np.ndarray:
    """(T, N, C) class scores per period and cell, NaN where unobserved -> (T, N) int16 the
    most probable class sequence. A cell never observed gets -1 in every period."""
    periods, cells, classes = scores.shape
    if not 0.0 < persistence < 1.0:
        raise ValueError(f"persistence must be in (0, 1), got {persistence}")
    if classes == 1:
        labels = np.zeros((periods, cells), np.int16)
    else:
        labels = _decode(_log_emissions(scores), persistence)
    never = np.isnan(scores).all(axis=2).all(axis=0)
    labels[:, never] = -1
    return labels


def _log_emissions(scores: np.ndarray) -> np.ndarray:
    """Per class, the log-likelihood that the cell holds that class alone: with independent
    sigmoid scores, ``s_c * prod(1 - s_other)``, i.e. ``logit(s_c)`` up to a constant of
    the period; 0 (flat) where unobserved."""
    observed = ~np.isnan(scores).any(axis=2)
    clipped = np.clip(
        np.where(observed[..., None], scores, 0.5), EMISSION_FLOOR, 1 - EMISSION_FLOOR
    )
    logs = np.log(clipped) - np.log1p(-clipped)
    logs[~observed] = 0.0
    return logs


def _decode(log_e: np.ndarray, persistence: float) -> np.ndarray:
    """Viterbi with uniform switching: the best predecessor of class c is c itself (stay)
    or the best other class (move), so a step costs O(cells x classes)."""
    periods, cells, classes = log_e.shape
    log_stay = np.log(persistence)
    log_move = np.log((1.0 - persistence) / (classes - 1))
    rows, class_ids = np.arange(cells), np.arange(classes)[None, :]
    delta = log_e[0].copy()
    back = np.zeros((periods, cells, classes), np.int16)
    for t in range(1, periods):
        order = np.argsort(delta, axis=1)
        best, second = order[:, -1], order[:, -2]
        is_best = class_ids == best[:, None]
        other_arg = np.where(is_best, second[:, None], best[:, None])
        other_value = delta[rows[:, None], other_arg] + log_move
        stay_value = delta + log_stay
        stays = stay_value >= other_value
        back[t] = np.where(stays, class_ids, other_arg)
        delta = np.where(stays, stay_value, other_value) + log_e[t]
    labels = np.empty((periods, cells), np.int16)
    labels[-1] = delta.argmax(axis=1)
    for t in range(periods - 1, 0, -1):
        labels[t - 1] = back[t, rows, labels[t]]
    return labels


@dataclass(frozen=True)
class Consistency:
    """How a series of labels behaves over its observed periods."""

    flicker_triples: int  # A -> B -> A over three consecutive observed periods (A != B)
    triples: int  # all triples of three consecutive observed periods
    changes: np.ndarray  # (N,) class changes per cell between consecutive observed periods
    first_lasting: np.ndarray  # (N,) period index of the first lasting change, -1 for none

    @property
    def flicker_rate(self) -> float:
        return self.flicker_triples / self.triples if self.triples else 0.0


def consistency(labels: np.ndarray, observed: np.ndarray, lasting: int = 2) -> Consistency:
    """Figures of a (T, N) label series at the (T, N) ``observed`` periods. A lasting change
    is a change whose new class holds for at least ``lasting`` observed periods (a change
    in the last observed period is not confirmed yet)."""
    periods, cells = labels.shape
    flicker = triples = 0
    changes = np.zeros(cells, np.int32)
    first = np.full(cells, -1, np.int32)
    for cell in range(cells):
        times = np.flatnonzero(observed[:, cell])
        seq = labels[times, cell]
        if len(seq) >= 3:
            a, b, c = seq[:-2], seq[1:-1], seq[2:]
            flicker += int(np.sum((a == c) & (a != b)))
            triples += len(seq) - 2
        switched = np.flatnonzero(seq[1:] != seq[:-1]) + 1
        changes[cell] = len(switched)
        for at in switched:
            differs = seq[at:] != seq[at]
            held = int(np.argmax(differs)) if differs.any() else len(seq) - at
            if held >= lasting:
                first[cell] = times[at]
                break
    return Consistency(flicker, triples, changes, first)
