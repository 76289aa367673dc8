"""The region series' time axis and its temporal consistency: periods from product names,
and the smoother (a Potts chain decoded by Viterbi) on class-score sequences with known
stable cells, lasting changes, one-period look-alikes, classifier errors and unobserved
periods; what counts as a lasting change."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from bigearthnet.core.errors import InputError
from bigearthnet.formats import s2_layouts as layout
from bigearthnet.maps.region import periods, series

PRODUCT = "/data/S2B_MSIL2A_20201201T100559_N0400_R022_T32UQU_20201201T130116.SAFE"


def test_tile_and_date_from_the_product_name():
    acq = periods.from_product_name(PRODUCT)
    assert (acq.tile, acq.date, acq.utm_zone) == ("32UQU", dt.date(2020, 12, 1), 32)
    with pytest.raises(InputError, match="--scenes-csv"):
        periods.from_product_name("/data/scene.tif")


def test_tiles_and_dates_out_of_range_are_refused():
    """A tile is an MGRS tile (the T of product names dropped), a date in Sentinel-2's
    years; items state tiles in several ways."""
    assert [layout.mgrs_tile(t) for t in ("T32UQU", "33uxp", "61UXP", "33UIO", "2020-03-15")] == [
        "32UQU", "33UXP", None, None, None]  # fmt: skip
    mgrs = {"mgrs:utm_zone": 33, "mgrs:latitude_band": "U", "mgrs:grid_square": "XP"}
    tiles = [{"s2:mgrs_tile": "33UXP"}, {"grid:code": "MGRS-33UXP"}, mgrs]
    assert {layout.tile_of(properties) for properties in tiles} == {"33UXP"}
    for tile, day in (("99ZZZ", dt.date(2020, 1, 1)), ("33UXP", dt.date(2015, 6, 22)),
                      ("33UXP", dt.date.today() + dt.timedelta(days=3))):  # fmt: skip
        with pytest.raises(InputError, match="x.SAFE: (tile|dated)"):
            periods.Acquisition("x.SAFE", tile, day)


@pytest.mark.parametrize(
    ("day", "kind", "label"),
    [
        (dt.date(2021, 2, 3), "scene-date", "2021-02-03"),
        (dt.date(2021, 2, 3), "month", "2021-02"),
        (dt.date(2021, 2, 3), "season", "2020-DJF"),  # a winter is named by its December
        (dt.date(2020, 12, 1), "season", "2020-DJF"),
        (dt.date(2021, 6, 30), "season", "2021-JJA"),
        (dt.date(2021, 6, 30), "year", "2021"),
    ],
)
def test_periods(day, kind, label):
    assert periods.period_of(day, kind) == label
    assert periods.parse_period(label)[0] == kind
    assert periods.period_start(label) <= day <= periods.period_end(label)


@pytest.mark.parametrize(
    ("label", "first", "last"),
    [
        ("2021-02-03", "2021-02-03", "2021-02-03"),
        ("2024-02", "2024-02-01", "2024-02-29"),  # a leap year's February
        ("2023-02", "2023-02-01", "2023-02-28"),
        ("2020-DJF", "2020-12-01", "2021-02-28"),  # a winter runs into the next year
        ("2023-DJF", "2023-12-01", "2024-02-29"),
        ("2021-SON", "2021-09-01", "2021-11-30"),
        ("2021", "2021-01-01", "2021-12-31"),
    ],
)
def test_period_bounds(label, first, last):
    assert periods.period_start(label) == dt.date.fromisoformat(first)
    assert periods.period_end(label) == dt.date.fromisoformat(last)
    # Every day of the period, and no other, is labelled so.
    kind = periods.parse_period(label)[0]
    before = periods.period_start(label) - dt.timedelta(days=1)
    after = periods.period_end(label) + dt.timedelta(days=1)
    assert periods.period_of(periods.period_end(label), kind) == label
    assert label not in (periods.period_of(before, kind), periods.period_of(after, kind))


@pytest.mark.parametrize("label", ["2021-13", "2021-XYZ", "21", "2021-02-30", "July"])
def test_what_is_no_period_label(label):
    with pytest.raises(ValueError):
        periods.period_end(label)


def test_groups_are_in_time_order_and_duplicates_found():
    make = periods.Acquisition
    scenes = [
        make("c", "33UXP", dt.date(2021, 3, 2)),
        make("a", "32UQU", dt.date(2020, 12, 20)),
        make("b", "33UXP", dt.date(2021, 1, 5)),
        make("d", "33UXP", dt.date(2021, 3, 2)),
    ]
    groups = periods.group_by_period(scenes, "season")
    assert list(groups) == ["2020-DJF", "2021-MAM"]
    assert [a.path for a in groups["2020-DJF"]] == ["a", "b"]
    assert periods.duplicates(scenes) == [(scenes[0], scenes[3])]


CLASSES, PERIODS, CELLS = 19, 8, 3000


def _truth(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(T, N) true classes: 70 % stable cells, 20 % one lasting change (at period 2-5: two
    periods before it, three after),
    10 % a one-period look-alike that reverts (a flooded field). Also the change periods."""
    start = rng.integers(0, CLASSES, CELLS)
    truth = np.repeat(start[None], PERIODS, axis=0)
    kind = rng.choice(3, CELLS, p=[0.7, 0.2, 0.1])
    change_at = np.full(CELLS, -1)
    for cell in np.flatnonzero(kind == 1):
        at = rng.integers(2, PERIODS - 2)
        truth[at:, cell] = (start[cell] + rng.integers(1, CLASSES)) % CLASSES
        change_at[cell] = at
    for cell in np.flatnonzero(kind == 2):
        at = rng.integers(1, PERIODS - 1)
        truth[at, cell] = (start[cell] + rng.integers(1, CLASSES)) % CLASSES
    return truth, kind, change_at


def _observe(truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Scores as a classifier gives them: the true class high, 5 % of observations wrong,
    10 % of cell-periods unobserved (NaN: clouds)."""
    scores = rng.uniform(0.0, 0.08, (PERIODS, CELLS, CLASSES))
    top = truth.copy()
    wrong = rng.random(truth.shape) < 0.05
    top[wrong] = (truth[wrong] + rng.integers(1, CLASSES, wrong.sum())) % CLASSES
    t, n = np.indices(truth.shape)
    scores[t, n, top] = rng.uniform(0.6, 0.95, truth.shape)
    scores[rng.random(truth.shape) < 0.10] = np.nan
    return scores


def test_the_smoother_removes_flicker_and_keeps_lasting_changes():
    rng = np.random.default_rng(0)
    truth, kind, change_at = _truth(rng)
    scores = _observe(truth, rng)
    observed = ~np.isnan(scores).any(axis=2)
    raw = np.where(observed, np.nan_to_num(scores, nan=0).argmax(axis=2), -1)
    smooth = series.viterbi(scores)
    raw_c = series.consistency(raw, observed)
    smooth_c = series.consistency(smooth, observed)
    assert smooth_c.flicker_rate <= 0.5 * raw_c.flicker_rate
    # A change is observable when two observations lie on each side of it: with one, no
    # method can tell it from a classifier error.
    before = np.array([observed[:at, n].sum() for n, at in enumerate(change_at)])
    after = np.array([observed[at:, n].sum() if at >= 0 else 0 for n, at in enumerate(change_at)])
    observable = (kind == 1) & (before >= 2) & (after >= 2)
    kept = np.abs(smooth_c.first_lasting[observable] - change_at[observable]) <= 1
    assert kept.mean() >= 0.9, kept.mean()
    stable = kind == 0  # marked changed: a lasting change found (first_change.tif)
    assert (smooth_c.first_lasting[stable] >= 0).mean() <= 0.02
    # Unobserved periods are bridged: every period of an observed cell has a class.
    assert (smooth >= 0).all()


@pytest.mark.parametrize("exclusive", [False, True])
def test_a_never_observed_cell_stays_unknown_and_blocks_agree(exclusive):
    rng = np.random.default_rng(1)
    truth, _, _ = _truth(rng)
    scores = _observe(truth, rng)
    scores[:, 7] = np.nan
    whole = series.viterbi(scores, exclusive=exclusive)
    assert (whole[:, 7] == -1).all()
    halves = np.concatenate([series.viterbi(scores[:, :1000], exclusive=exclusive),
                             series.viterbi(scores[:, 1000:], exclusive=exclusive)], 1)  # fmt: skip
    np.testing.assert_array_equal(whole, halves)  # cells are independent: blocks are exact


@pytest.mark.parametrize(
    ("sequence", "first"),
    [
        ([0, 0, 0, 1, 1], 3),  # a change held on both sides
        ([0, 0, 2, 1, 1], 3),  # A A X B B: one change, A to B, where B settles
        ([2, 0, 0, 0, 0], -1),  # one observation against the rest at the start
        ([0, 0, 0, 0, 1], -1),  # a change in the last period: not confirmed yet
        ([0, 0, 1, 0, 0], -1),  # a look-alike that reverts
        ([0, 0, 1, 1, 0, 0], 2),  # two lasting changes: the first is named
    ],
)
def test_lasting_changes(sequence, first):
    labels = np.array(sequence)[:, None]
    found = series.consistency(labels, np.ones_like(labels, bool))
    assert found.first_lasting[0] == first


def test_unobserved_periods_do_not_count_towards_a_change():
    labels = np.array([0, 0, 1, 1, 1])[:, None]
    observed = np.array([True, True, True, False, False])[:, None]
    assert series.consistency(labels, observed).first_lasting[0] == -1  # B seen once


def test_one_confident_observation_never_outweighs_two_switches():
    """A look-alike however confident (scores 1.0 against 0.0) is smoothed away at the
    default persistence; two periods of it are a change."""
    classes = 19
    scores = np.zeros((5, 2, classes), np.float32)
    scores[:, :, 3] = 1.0
    scores[2, 0], scores[2, 0, 7] = 0.0, 1.0  # cell 0: one period of class 7
    scores[2:4, 1], scores[2:4, 1, 7] = 0.0, 1.0  # cell 1: two periods, then back
    scores[4, 1], scores[4, 1, 3] = 0.0, 1.0
    labels = series.viterbi(scores)
    assert labels[:, 0].tolist() == [3, 3, 3, 3, 3]
    assert labels[:, 1].tolist() == [3, 3, 7, 7, 3]


def _softmax_observations(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(T, N, C) probabilities as the dense head gives them (a softmax: they sum to 1) at
    the figures measured on the 10-20 m series' stable cells marked changed (docs/maps.md):
    the true class at 0.5-0.9 on the first half of the cells; on the second half a
    season's look-alike, two periods (2 and 3) where another class leads at 0.3-0.45 and
    the true one holds 0.05-0.12, as heathland looks like arable land in spring. A lasting
    change on every fifth cell of the first half, at period 3, its new class at 0.5-0.9.
    Returns the probabilities, the look-alike cells and the change period (-1 none)."""
    cells, periods = 2000, 6
    truth = np.repeat(rng.integers(0, CLASSES, cells)[None], periods, axis=0)
    change_at = np.where((np.arange(cells) % 5 == 0) & (np.arange(cells) < cells // 2), 3, -1)
    moved = change_at >= 0
    truth[3:, moved] = (truth[3:, moved] + rng.integers(1, CLASSES, moved.sum())) % CLASSES
    lead = truth.copy()  # the class each observation puts first
    look_alike = np.arange(cells) >= cells // 2
    other = (truth[0, look_alike] + rng.integers(1, CLASSES, look_alike.sum())) % CLASSES
    lead[2:4, look_alike] = other
    t, n = np.indices(truth.shape)
    probabilities = rng.dirichlet(np.ones(CLASSES), (periods, cells))
    probabilities[t, n, lead] = probabilities[t, n, truth] = 0.0
    top = rng.uniform(0.5, 0.9, truth.shape)
    top[2:4, look_alike] = rng.uniform(0.3, 0.45, (2, look_alike.sum()))
    true_share = np.where(lead == truth, top, rng.uniform(0.05, 0.12, truth.shape))
    rest = 1.0 - top - np.where(lead == truth, 0.0, true_share)
    probabilities *= (rest / probabilities.sum(axis=2))[..., None]
    probabilities[t, n, lead] = top
    probabilities[t, n, truth] = true_share
    return probabilities.astype(np.float32), look_alike, change_at


def test_a_seasons_look_alike_in_softmax_probabilities_is_no_change():
    """The cause of 9-11 % of the stable cells of the 10-20 m series changed: the dense
    head's softmax read as sigmoid scores sharpened 4x, so two periods of a look-alike at
    0.38 against 0.09 outweighed two switches. Read as probabilities (``exclusive``) the
    look-alike is smoothed away and the lasting changes, held at 0.5-0.9, are kept."""
    probabilities, look_alike, change_at = _softmax_observations(np.random.default_rng(4))
    observed = np.ones(probabilities.shape[:2], bool)
    raw = probabilities.argmax(axis=2)
    assert (series.consistency(raw, observed).changes[look_alike] > 0).all()
    lasting = change_at >= 0
    for exclusive, most_changed in ((True, 0.02), (False, 1.0)):
        smooth = series.consistency(
            series.viterbi(probabilities, exclusive=exclusive), observed
        )  # fmt: skip
        kept = np.abs(smooth.first_lasting[lasting] - change_at[lasting]) <= 1
        assert kept.mean() >= 0.95, (exclusive, kept.mean())
        changed = (smooth.changes[look_alike] > 0).mean()
        assert changed <= most_changed, (exclusive, changed)
        stable = ~look_alike & ~lasting
        assert (smooth.changes[stable] > 0).mean() <= 0.02
    assert changed >= 0.5  # as sigmoid scores most look-alikes were changes: the cause


def _consistency_per_cell(labels: np.ndarray, observed: np.ndarray, lasting: int = 2):
    """The rule of :func:`series.consistency` written cell by cell, as it was before it was
    vectorised: (flicker triples, triples, changes, first lasting change)."""
    flicker = triples = 0
    changes, first = [], []
    for cell in range(labels.shape[1]):
        times = np.flatnonzero(observed[:, cell])
        seq = labels[times, cell]
        if len(seq) >= 3:
            flicker += int(np.sum((seq[:-2] == seq[2:]) & (seq[:-2] != seq[1:-1])))
            triples += len(seq) - 2
        starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
        changes.append(len(starts) - 1 if len(seq) else 0)
        found, settled = -1, None
        for start, length in zip(starts, np.diff(np.r_[starts, len(seq)])):
            if length < lasting:
                continue
            if settled is not None and seq[start] != settled:
                found = int(times[start])
                break
            settled = seq[start]
        first.append(found)
    return flicker, triples, changes, first


@pytest.mark.parametrize("periods_, classes, seen", [(8, 3, 0.8), (5, 2, 0.5), (1, 4, 1.0)])
def test_the_vectorised_figures_equal_the_rule_cell_by_cell(periods_, classes, seen):
    """Few classes and gaps make every case frequent: runs of every length, switches at
    the ends, cells never or once observed."""
    rng = np.random.default_rng(periods_)
    labels = rng.integers(0, classes, (periods_, 4000))
    observed = rng.random(labels.shape) < seen
    found = series.consistency(labels, observed)
    flicker, triples, changes, first = _consistency_per_cell(labels, observed)
    assert (found.flicker_triples, found.triples) == (flicker, triples)
    np.testing.assert_array_equal(found.changes, changes)
    np.testing.assert_array_equal(found.first_lasting, first)
