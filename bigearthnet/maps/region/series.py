"""A temporally consistent land-cover series: per cell, the most probable sequence of classes
over the periods under a class-persistence prior, decoded by Viterbi, and the figures that
say how consistent a series is.

The model (per cell, independently), a chain with a Potts switching cost:

* hidden state: the cell's class in each period;
* transitions: staying has odds ``persistence / (1 - persistence)`` against moving to any
  one other class, whatever the number of classes (a Potts prior: nothing says which
  change is likelier, and 19 or 43 classes should not make a change dearer). A switch
  costs ``S = log(persistence / (1 - persistence))`` nats, 4.6 at the default 0.99;
* emissions, by what the scores are (``exclusive``):

  - a classifier's independent sigmoid scores (its cell maps): the likelihood that the
    cell holds class c alone is ``s_c * prod(1 - s_other)``, i.e. ``logit(s_c)`` up to a
    term shared by all classes of the period, sharpened by :data:`TEMPERATURE`;
  - the dense head's softmax probabilities (exclusive classes, its 10 m maps and cells
    made of them): the probability itself, ``p_c``, as the model gives it. Taking them
    as sigmoid scores made a period's 0.38 against 0.09 worth 5.7 nats instead of 1.4:
    a season's look-alike held for two periods outweighed the switches, and 9-11 % of the
    stable cells of the 10-20 m series changed (docs/maps.md, "Stable cells marked
    changed at 10-20 m");

  either mixed with an observation error (:data:`ERROR_RATE`): any one observation may
  be wrong (a cloud edge SCL missed, misregistration, a model's over-confidence), so none
  counts for more than ``log((1 - ERROR_RATE) C / ERROR_RATE + 1)`` nats between two
  classes (5.9 for 19). An unobserved period (clouds, no scene) emits the same for every
  class, so the decoded series bridges it with the classes around it.

So a one-period flicker A -> B -> A pays two switches and is kept only when B's evidence
in that period exceeds ``2 S`` (9.2 nats: never at the default, as one observation carries
at most 5.9), while a lasting change pays ``S`` once and is kept when its new class
outweighs the old by ``S`` summed over the periods it holds: about 2.3 nats a period over
two periods: sigmoid scores of 0.5 against 0.05 (more than enough), probabilities of 0.55
against 0.05 (4.7 nats; 0.5 against 0.05 falls just short, 4.5). A softmax look-alike at
0.38 against 0.09 (1.4 nats) must hold four periods to be kept as a change.
Cells are independent, so a region is decoded in blocks of cells (:func:`viterbi` takes any
number) and the memory is that of one block; :func:`consistency` too, vectorised over cells.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TEMPERATURE = 0.25
ERROR_RATE = 0.05
DEFAULT_PERSISTENCE = 0.99


def switch_cost(persistence: float) -> float:
    """Nats a class switch costs in the decoded series."""
    return float(np.log(persistence) - np.log1p(-persistence))


def viterbi(
    scores: np.ndarray, persistence: float = DEFAULT_PERSISTENCE, *, exclusive: bool = False
) -> np.ndarray:
    """(T, N, C) class scores per period and cell, NaN where unobserved -> (T, N) int16 the
    most probable class sequence. A cell never observed gets -1 in every period.
    ``exclusive``: the scores are a softmax's probabilities (the dense head's), not
    independent sigmoid scores (a classifier's)."""
    periods, cells, classes = scores.shape
    if not 0.0 < persistence < 1.0:
        raise ValueError(f"persistence must be in (0, 1), got {persistence}")
    if classes == 1:
        labels = np.zeros((periods, cells), np.int16)
    else:
        labels = _decode(_log_emissions(scores, exclusive), switch_cost(persistence))
    never = np.isnan(scores).all(axis=2).all(axis=0)
    labels[:, never] = -1
    return labels


def _log_emissions(scores: np.ndarray, exclusive: bool) -> np.ndarray:
    """Per class, the log-likelihood of the period's scores if the cell holds that class:
    the scores' posterior ``q`` mixed with an observation error,
    ``log((1 - ERROR_RATE) q_c + ERROR_RATE / C)``; 0 (flat) where unobserved. ``q`` is
    ``softmax(logit(s) / TEMPERATURE)`` of sigmoid scores, the probabilities themselves
    (renormalised: stored ones are rounded) when ``exclusive``."""
    periods, cells, classes = scores.shape
    observed = ~np.isnan(scores).any(axis=2)
    if exclusive:  # in place: a chunk holds fewer copies than in the other branch
        posterior = np.where(observed[..., None], scores, 1.0)
        np.clip(posterior, 0.0, None, out=posterior)
        total = posterior.sum(axis=2, keepdims=True)
        empty = total == 0  # nothing on any class: no evidence either way
        posterior[np.broadcast_to(empty, posterior.shape)] = 1.0
        posterior /= np.where(empty, classes, total)
    else:
        clipped = np.clip(np.where(observed[..., None], scores, 0.5), 1e-6, 1 - 1e-6)
        sharp = (np.log(clipped) - np.log1p(-clipped)) / TEMPERATURE
        sharp -= sharp.max(axis=2, keepdims=True)
        posterior = np.exp(sharp)
        posterior /= posterior.sum(axis=2, keepdims=True)
    logs = np.log((1.0 - ERROR_RATE) * posterior + ERROR_RATE / classes)
    logs[~observed] = 0.0
    return logs


def _decode(log_e: np.ndarray, cost: float) -> np.ndarray:
    """Viterbi with one switching cost: the best predecessor of class c is c itself (stay)
    or the best other class (move, ``cost`` nats), so a step costs O(cells x classes)."""
    periods, cells, classes = log_e.shape
    rows, class_ids = np.arange(cells), np.arange(classes)[None, :]
    delta = log_e[0].copy()
    back = np.zeros((periods, cells, classes), np.int16)
    for t in range(1, periods):
        order = np.argsort(delta, axis=1)
        best, second = order[:, -1], order[:, -2]
        is_best = class_ids == best[:, None]
        other_arg = np.where(is_best, second[:, None], best[:, None])
        other_value = delta[rows[:, None], other_arg] - cost  # staying costs nothing
        stays = delta >= other_value
        back[t] = np.where(stays, class_ids, other_arg)
        delta = np.where(stays, delta, other_value) + log_e[t]
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
    goes from a class held for at least ``lasting`` observed periods to another held as
    long, at the first period of the new one; shorter runs between them are not changes
    of their own. So a change in the last observed period is not confirmed yet, one after
    the first period is one observation against the rest (at the ends of a series a wrong
    observation costs the decoder one switch, not two), and A A X B B is one change, A to B
    (beside a real change, a wrong observation costs one switch too).

    Vectorised over cells (a 10 m block holds millions): each cell's observed periods are
    moved to the front in time order (a stable sort), then one pass over the T positions
    follows every cell's runs at once."""
    periods, cells = labels.shape
    order = np.argsort(~observed, axis=0, kind="stable")  # observed periods first, in order
    seq = np.take_along_axis(labels, order, axis=0)
    seen = observed.sum(axis=0)  # observed periods per cell
    position = np.arange(periods)[:, None]
    valid = position < seen
    same_as_two_before = valid[2:] & (seq[2:] == seq[:-2]) & (seq[1:-1] != seq[:-2])
    switch = valid[1:] & (seq[1:] != seq[:-1])  # a class change between observed periods
    changes = switch.sum(axis=0).astype(np.int32)
    first = np.full(cells, -1, np.int32)
    settled = np.full(cells, -1, np.int64)  # the class of the last run held long enough
    has_settled = np.zeros(cells, bool)
    run_start = np.zeros(cells, np.int64)
    done = np.zeros(cells, bool)
    columns = np.arange(cells)
    for k in range(1, periods + 1):
        # A run ends before position k where the sequence ends or its class switches.
        ends = (k == seen) | ((k < seen) & (seq[min(k, periods - 1)] != seq[k - 1]))
        ends &= k <= seen
        held = ends & ~done & (k - run_start >= lasting)
        cls = seq[k - 1]
        changed = held & has_settled & (cls != settled)
        first[changed] = order[run_start[changed], columns[changed]]
        done |= changed
        keep = held & ~changed
        settled[keep], has_settled[keep] = cls[keep], True
        run_start[ends] = k
    return Consistency(
        int(same_as_two_before.sum()), int(np.maximum(seen - 2, 0).sum()), changes, first
    )
