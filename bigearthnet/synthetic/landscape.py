"""The realistic archive's landscape model: which classes a patch's labels name, what truly
covers its pixels, and where (``bigearthnet-synth --difficulty realistic``, the default).

**Labels** come from landscapes: a patch is a boreal forest, a farmland mosaic, a coast...
(:data:`LANDSCAPES`), each holding every class with its own probability, so classes that
share a landscape co-occur as they do in reBEN (the forests together, the agricultural
classes together, urban with industrial and complex cultivation, Marine waters with few
land classes). Each class's probabilities are scaled once (:func:`calibrated`) so that the
shares of patches holding it match reBEN's (:mod:`.reben_stats`) given that a patch holds
at least one class.

**Truth** differs from the labels as CORINE's does from the ground (:func:`draw_truth`):
labels come from a coarse map with a minimum mapping unit of 25 ha (17 % of a patch), so
* small features (under the unit) of other classes are present but unlabelled;
* some polygons are wrong: a labelled class is truly a look-alike (Pastures for Arable
  land, another forest type), or covers only a sliver of the patch.
The truth is each class's share of the patch's pixels (``OUT/truth.parquet``).

**Where**: the truth's shares are laid out on the 60 m grid (20 x 20 cells) as irregular
parcels (:func:`lay_out`): a smooth random field, cut into quantile bands, gives every class
contiguous ground in exactly its share of cells.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from bigearthnet.core.constants import CLASSES_19, DROPPED_IN_19, MAP_43_TO_19
from bigearthnet.synthetic.reben_stats import CLASS_SHARE

N = len(CLASSES_19)
URBAN, INDUSTRY, ARABLE, PERMANENT, PASTURE, COMPLEX, AGRI_NATURAL, AGRO_FOREST = range(8)
BROAD, CONIFER, MIXED, GRASS, MOORS, TRANSITIONAL, BEACH, WETLAND, COASTAL, LAKE, SEA = range(8, 19)
# (weight, {class: probability}) - before calibration.
LANDSCAPES: dict[str, tuple[float, dict[int, float]]] = {
    "boreal forest": (0.18, {CONIFER: 0.9, MIXED: 0.85, TRANSITIONAL: 0.7, BROAD: 0.3,
                             LAKE: 0.3, WETLAND: 0.15, AGRI_NATURAL: 0.1, ARABLE: 0.12}),
    "temperate forest": (0.12, {BROAD: 0.85, MIXED: 0.5, CONIFER: 0.4, TRANSITIONAL: 0.5,
                                AGRI_NATURAL: 0.35, ARABLE: 0.35, PASTURE: 0.2}),
    "farmland": (0.19, {ARABLE: 0.95, COMPLEX: 0.45, AGRI_NATURAL: 0.55, PASTURE: 0.3,
                        BROAD: 0.4, URBAN: 0.2, MIXED: 0.2, LAKE: 0.08}),
    "pasture": (0.08, {PASTURE: 0.95, AGRI_NATURAL: 0.35, ARABLE: 0.25, BROAD: 0.3,
                       WETLAND: 0.15, URBAN: 0.12, MOORS: 0.1, LAKE: 0.12}),
    "mediterranean": (0.08, {AGRO_FOREST: 0.6, PERMANENT: 0.45, COMPLEX: 0.5,
                             AGRI_NATURAL: 0.55, TRANSITIONAL: 0.5, BROAD: 0.35, CONIFER: 0.3,
                             MOORS: 0.3, ARABLE: 0.3, GRASS: 0.12}),
    "peri-urban": (0.08, {URBAN: 0.95, INDUSTRY: 0.3, COMPLEX: 0.6, ARABLE: 0.6,
                          AGRI_NATURAL: 0.3, PASTURE: 0.2, BROAD: 0.25}),
    "coast": (0.07, {SEA: 0.95, ARABLE: 0.2, URBAN: 0.2, BEACH: 0.04, COASTAL: 0.04,
                     TRANSITIONAL: 0.12, MIXED: 0.1, CONIFER: 0.1, AGRI_NATURAL: 0.12}),
    "open sea": (0.05, {SEA: 1.0}),
    "lake district": (0.10, {LAKE: 0.95, CONIFER: 0.6, MIXED: 0.55, TRANSITIONAL: 0.5,
                             WETLAND: 0.2, BROAD: 0.2, ARABLE: 0.15}),
    "uplands": (0.05, {GRASS: 0.35, MOORS: 0.35, TRANSITIONAL: 0.5, CONIFER: 0.45,
                       MIXED: 0.3, BROAD: 0.3, PASTURE: 0.25}),
}  # fmt: skip
# Look-alikes: what a wrong polygon truly is (spectra overlap too: .spectra).
LOOK_ALIKES: dict[int, tuple[int, ...]] = {
    ARABLE: (PASTURE, COMPLEX), PASTURE: (ARABLE, GRASS), COMPLEX: (ARABLE, AGRI_NATURAL),
    AGRI_NATURAL: (COMPLEX, TRANSITIONAL), BROAD: (MIXED, TRANSITIONAL),
    CONIFER: (MIXED,), MIXED: (CONIFER, BROAD), TRANSITIONAL: (MIXED, MOORS),
    PERMANENT: (COMPLEX, AGRO_FOREST), AGRO_FOREST: (PERMANENT, TRANSITIONAL),
    GRASS: (MOORS, PASTURE), MOORS: (GRASS, TRANSITIONAL), URBAN: (INDUSTRY,),
    INDUSTRY: (URBAN,), WETLAND: (LAKE, MOORS), LAKE: (WETLAND,), COASTAL: (SEA, WETLAND),
    BEACH: (SEA, GRASS), SEA: (SEA,),
}  # fmt: skip
MMU = 0.17  # 25 ha of the 144 ha patch: CORINE's minimum mapping unit
WRONG_POLYGON = 0.06  # per label: the class truly there is a look-alike
SLIVER = 0.05  # per label: its polygon covers only a sliver (1-4 %) of the patch
SMALL_FEATURES = 0.45  # per patch: 1-2 unlabelled features under the mapping unit
GRID = 20  # 60 m cells per side
DROPPED_EXTRA = 0.12  # v1: patches also labelled with a class the 19-class map drops


@dataclass(frozen=True)
class PatchTruth:
    """A patch's labels (19-class indices), its landscape and the truth: each class's share
    of the cells (sums to 1)."""

    labels: tuple[int, ...]
    landscape: int
    fractions: tuple[float, ...]


def _inclusion() -> tuple[np.ndarray, np.ndarray]:
    weights = np.array([w for w, _ in LANDSCAPES.values()])
    probs = np.zeros((len(LANDSCAPES), N))
    for row, (_, classes) in enumerate(LANDSCAPES.values()):
        for k, p in classes.items():
            probs[row, k] = p
    return weights / weights.sum(), probs


@functools.cache
def calibrated() -> tuple[np.ndarray, np.ndarray]:
    """(landscape weights, inclusion probabilities) whose class shares, among patches with
    at least one class, are reBEN's: each class's probabilities scaled by a fixed point."""
    weights, base = _inclusion()
    target = np.asarray(CLASS_SHARE)
    scale = np.ones(N)
    for _ in range(200):
        probs = np.clip(base * scale, 0.0, 0.98)
        some = 1.0 - weights @ np.prod(1.0 - probs, axis=1)  # P(at least one class)
        share = weights @ probs / some
        scale *= (target / np.maximum(share, 1e-9)) ** 0.7
    probs = np.clip(base * scale, 0.0, 0.98)
    probs.setflags(write=False)
    return weights, probs


def draw_labels(rng: np.random.Generator) -> tuple[int, tuple[int, ...]]:
    """(landscape, labels): a landscape, then each of its classes by its probability; a
    draw without any class is drawn again."""
    weights, probs = calibrated()
    while True:
        landscape = int(rng.choice(len(weights), p=weights))
        held = np.flatnonzero(rng.random(N) < probs[landscape])
        if held.size:
            return landscape, tuple(int(k) for k in held)


def draw_truth(rng: np.random.Generator, landscape: int, labels: tuple[int, ...]) -> np.ndarray:
    """Each class's true share of the patch (N,), from its CORINE-like ``labels``."""
    truth = np.zeros(N)
    labelled = rng.dirichlet(np.full(len(labels), 1.6))
    for k, share in zip(labels, labelled):
        if rng.random() < SLIVER and len(labels) > 1:
            share = rng.uniform(0.01, 0.04)  # the polygon barely reaches into the patch
        if rng.random() < WRONG_POLYGON:
            k = int(rng.choice(LOOK_ALIKES[k]))
        truth[k] += share
    if rng.random() < SMALL_FEATURES:
        _, probs = calibrated()
        likely = probs[landscape] + 0.02
        for _ in range(int(rng.integers(1, 3))):
            k = int(rng.choice(N, p=likely / likely.sum()))
            truth[k] += rng.uniform(0.02, MMU * 0.9)
    return truth / truth.sum()


def cell_counts(fractions: np.ndarray) -> np.ndarray:
    """Cells (of 400) per class, largest remainders: the truth the pixels hold exactly."""
    raw = np.asarray(fractions) * GRID * GRID
    counts = np.floor(raw).astype(int)
    short = GRID * GRID - counts.sum()
    counts[np.argsort(counts - raw)[:short]] += 1
    return counts


def plan_patch(rng: np.random.Generator) -> PatchTruth:
    landscape, labels = draw_labels(rng)
    counts = cell_counts(draw_truth(rng, landscape, labels))
    return PatchTruth(labels, landscape, tuple(counts / (GRID * GRID)))


def v1_classes(rng: np.random.Generator, labels19: tuple[int, ...]) -> tuple[int, ...]:
    """A v1 patch's 43-class labels: a 43-class source of each 19-class label (the official
    map gives the 19 back), sometimes with a class the 19-class map drops (roads, mines)."""
    classes = [int(rng.choice(sources_of(k))) for k in labels19]
    if rng.random() < DROPPED_EXTRA:
        classes.append(int(rng.choice(DROPPED_IN_19)))
    return tuple(classes)


def sources_of(k: int) -> tuple[int, ...]:
    return tuple(sorted(i for i, j in MAP_43_TO_19.items() if j == k))


def lay_out(rng: np.random.Generator, fractions: np.ndarray) -> np.ndarray:
    """(20, 20) class indices: contiguous irregular parcels, each class in exactly its share
    of cells (``fractions`` are multiples of 1/400)."""
    counts = np.rint(np.asarray(fractions) * GRID * GRID).astype(int)
    field = _smooth_field(rng)
    order = np.argsort(field, axis=None, kind="stable")
    classes = rng.permutation(np.flatnonzero(counts))  # which class gets which band
    cells = np.empty(GRID * GRID, np.intp)
    start = 0
    for k in classes:
        cells[order[start : start + counts[k]]] = k
        start += counts[k]
    return cells.reshape(GRID, GRID)


def _smooth_field(rng: np.random.Generator) -> np.ndarray:
    """A smooth random field on the grid: a few random plane waves."""
    y, x = np.mgrid[0:GRID, 0:GRID] / GRID
    field = np.zeros((GRID, GRID))
    for _ in range(4):
        angle, freq, phase = rng.uniform(0, np.pi), rng.uniform(0.4, 2.2), rng.uniform(0, 6.3)
        field += np.cos(2 * np.pi * freq * (x * np.cos(angle) + y * np.sin(angle)) + phase)
    return field + 0.15 * rng.standard_normal((GRID, GRID))
