"""The realistic archive's landscape model: which classes a patch's labels name, what truly
covers its pixels, and where (``bigearthnet-synth --difficulty realistic``, the default).

**Labels** come from landscapes: a patch is a boreal forest, a farmland, a montado, a
coast... (:data:`LANDSCAPES`), each holding every class with its own probability, so classes
that share a landscape co-occur and classes that seldom do repel each other, with the
correlation (phi) of every class pair close to reBEN's. Each class's probabilities are
scaled once (:func:`calibrated`) so that the shares of patches holding it match reBEN's
(:mod:`.reben_stats`) given that a patch holds at least one class.

**Truth** differs from the labels as CORINE's does from the ground (:func:`draw_parcels`):
labels come from a coarse map with a minimum mapping unit of 25 ha (17 % of a patch), so
* small features (under the unit) of other classes are present but unlabelled;
* some polygons are wrong: a labelled class is truly a look-alike (Pastures for Arable
  land, another forest type), or covers only a sliver of the patch.
The truth is each class's share of the patch's pixels (``OUT/truth.parquet``). Each piece of
ground is a parcel: its true class, and the class the coarse map gives it (a labelled
polygon's class, or none for a small feature), so the same draw also gives the map
(:mod:`.reference_maps`).

**Where**: the truth's shares are laid out on the 60 m grid (20 x 20 cells) as irregular
parcels (:func:`lay_out_parcels`): a smooth random field, cut into quantile
bands, gives every class contiguous ground in exactly its share of cells, and within a
class's band each of its parcels a band of its own.
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
# (weight, {class: probability}) - before calibration. Which classes a landscape holds is
# chosen by hand; the numbers were fitted offline (scipy L-BFGS-B) to reBEN's class shares,
# label-count histogram and the phi of all 171 class pairs (reben-label-pairs.csv of the
# shared documents), each computed in closed form from this mixture of independent classes
# given at least one class (docs/synthetic-archive.md, "Labels").
LANDSCAPES: dict[str, tuple[float, dict[int, float]]] = {
    "boreal forest": (0.122, {CONIFER: 0.93, MIXED: 0.87, TRANSITIONAL: 0.64, LAKE: 0.19,
                              AGRI_NATURAL: 0.13, WETLAND: 0.13, BROAD: 0.11, ARABLE: 0.09,
                              PASTURE: 0.04, URBAN: 0.03}),
    "lake district": (0.070, {LAKE: 0.95, CONIFER: 0.76, MIXED: 0.71, TRANSITIONAL: 0.30,
                              AGRI_NATURAL: 0.24, BROAD: 0.13, ARABLE: 0.10, WETLAND: 0.08,
                              URBAN: 0.05}),
    "forest-farm mosaic": (0.114, {CONIFER: 0.73, MIXED: 0.66, ARABLE: 0.59, PASTURE: 0.31,
                                   AGRI_NATURAL: 0.25, TRANSITIONAL: 0.22, COMPLEX: 0.15,
                                   URBAN: 0.07, LAKE: 0.06, WETLAND: 0.04}),
    "temperate forest": (0.119, {BROAD: 0.90, AGRI_NATURAL: 0.59, COMPLEX: 0.51,
                                 TRANSITIONAL: 0.50, MIXED: 0.38, ARABLE: 0.26, PASTURE: 0.17,
                                 CONIFER: 0.17, URBAN: 0.09, GRASS: 0.08}),
    "farmland": (0.186, {ARABLE: 0.95, COMPLEX: 0.41, AGRI_NATURAL: 0.37, BROAD: 0.34, URBAN: 0.30,
                         PASTURE: 0.29, MIXED: 0.25, LAKE: 0.11, TRANSITIONAL: 0.10,
                         PERMANENT: 0.08, CONIFER: 0.08, INDUSTRY: 0.06, WETLAND: 0.02}),
    "pasture": (0.043, {PASTURE: 0.95, ARABLE: 0.21, AGRI_NATURAL: 0.21, BROAD: 0.20,
                        WETLAND: 0.17, COMPLEX: 0.14, CONIFER: 0.12, TRANSITIONAL: 0.11,
                        URBAN: 0.09, LAKE: 0.09, MOORS: 0.08}),
    "peri-urban": (0.038, {URBAN: 0.95, COMPLEX: 0.62, ARABLE: 0.52, AGRI_NATURAL: 0.38,
                           INDUSTRY: 0.30, PASTURE: 0.30, BROAD: 0.23, PERMANENT: 0.06,
                           LAKE: 0.06}),
    "montado": (0.071, {AGRO_FOREST: 0.86, ARABLE: 0.64, BROAD: 0.47, TRANSITIONAL: 0.41,
                        PASTURE: 0.30, PERMANENT: 0.17, LAKE: 0.07, GRASS: 0.03, MOORS: 0.03}),
    "vineyards and orchards": (0.034, {PERMANENT: 0.90, COMPLEX: 0.46, ARABLE: 0.44,
                                       AGRI_NATURAL: 0.41, TRANSITIONAL: 0.26, BROAD: 0.24,
                                       URBAN: 0.23, MOORS: 0.16, AGRO_FOREST: 0.15}),
    "mediterranean woodland": (0.026, {TRANSITIONAL: 0.83, BROAD: 0.56, AGRI_NATURAL: 0.47,
                                       CONIFER: 0.41, MOORS: 0.36, COMPLEX: 0.22, MIXED: 0.22,
                                       AGRO_FOREST: 0.09, GRASS: 0.09, PERMANENT: 0.08}),
    "uplands": (0.044, {TRANSITIONAL: 0.47, BROAD: 0.31, CONIFER: 0.31, GRASS: 0.24, PASTURE: 0.18,
                        MIXED: 0.17, MOORS: 0.15, WETLAND: 0.12, LAKE: 0.05}),
    "coast": (0.023, {SEA: 0.94, ARABLE: 0.20, CONIFER: 0.15, MIXED: 0.15, URBAN: 0.14,
                      TRANSITIONAL: 0.12, BEACH: 0.11, COASTAL: 0.11, AGRI_NATURAL: 0.09,
                      MOORS: 0.08, PASTURE: 0.06, INDUSTRY: 0.04, WETLAND: 0.02}),
    "open sea": (0.109, {SEA: 0.97}),
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


UNMAPPED = -1  # a parcel's map class when the coarse map leaves it out (a small feature)


@dataclass(frozen=True)
class Parcel:
    """A piece of a patch's ground: what it truly is, what the coarse map says it is
    (a labelled class, or :data:`UNMAPPED`), and its cells of the 400."""

    true_class: int
    map_class: int
    cells: int


@dataclass(frozen=True)
class PatchTruth:
    """A patch's labels (19-class indices), its landscape and the truth: each class's share
    of the cells (sums to 1), made of ``parcels`` (each class's cells split among them)."""

    labels: tuple[int, ...]
    landscape: int
    fractions: tuple[float, ...]
    parcels: tuple[Parcel, ...] = ()


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


def draw_parcels(
    rng: np.random.Generator, landscape: int, labels: tuple[int, ...]
) -> list[tuple[int, int, float]]:
    """(true class, map class, share) of each piece of ground, from the CORINE-like
    ``labels``: a polygon per label, truly a look-alike when wrong, a sliver now and then;
    and small features the map leaves out (:data:`UNMAPPED`). Shares are not normalised."""
    parcels = []
    labelled = rng.dirichlet(np.full(len(labels), 1.6))
    for label, share in zip(labels, labelled):
        if rng.random() < SLIVER and len(labels) > 1:
            share = rng.uniform(0.01, 0.04)  # the polygon barely reaches into the patch
        k = label
        if rng.random() < WRONG_POLYGON:
            k = int(rng.choice(LOOK_ALIKES[label]))
        parcels.append((k, label, float(share)))
    if rng.random() < SMALL_FEATURES:
        _, probs = calibrated()
        likely = probs[landscape] + 0.02
        for _ in range(int(rng.integers(1, 3))):
            k = int(rng.choice(N, p=likely / likely.sum()))
            parcels.append((k, UNMAPPED, float(rng.uniform(0.02, MMU * 0.9))))
    return parcels


def draw_truth(rng: np.random.Generator, landscape: int, labels: tuple[int, ...]) -> np.ndarray:
    """Each class's true share of the patch (N,), from its CORINE-like ``labels``."""
    return _class_shares(draw_parcels(rng, landscape, labels))


def _class_shares(parcels: list[tuple[int, int, float]]) -> np.ndarray:
    truth = np.zeros(N)
    for k, _, share in parcels:
        truth[k] += share
    return truth / truth.sum()


def cell_counts(fractions: np.ndarray) -> np.ndarray:
    """Cells (of 400) per class, largest remainders: the truth the pixels hold exactly."""
    return largest_remainders(np.asarray(fractions) * GRID * GRID)


def plan_patch(rng: np.random.Generator) -> PatchTruth:
    landscape, labels = draw_labels(rng)
    drawn = draw_parcels(rng, landscape, labels)
    counts = cell_counts(_class_shares(drawn))
    return PatchTruth(labels, landscape, tuple(counts / (GRID * GRID)), _split(drawn, counts))


def _split(drawn: list[tuple[int, int, float]], counts: np.ndarray) -> tuple[Parcel, ...]:
    """Each class's cells shared among its parcels by their shares (largest remainders);
    a parcel may get none (a sliver too thin for a 60 m cell)."""
    cells = np.zeros(len(drawn), dtype=int)
    for k in np.flatnonzero(counts):
        members = [i for i, (true, _, _) in enumerate(drawn) if true == k]
        shares = np.asarray([drawn[i][2] for i in members])
        cells[members] = largest_remainders(shares / shares.sum() * counts[k])
    return tuple(Parcel(t, m, int(c)) for (t, m, _), c in zip(drawn, cells))


def largest_remainders(raw: np.ndarray) -> np.ndarray:
    """Whole counts summing to the (whole) sum of ``raw``: floors, then one more for the
    largest remainders."""
    counts = np.floor(raw).astype(int)
    short = round(float(np.sum(raw))) - counts.sum()
    counts[np.argsort(counts - raw)[:short]] += 1
    return counts


def v1_classes(rng: np.random.Generator, labels19: tuple[int, ...]) -> tuple[int, ...]:
    """A v1 patch's 43-class labels: a 43-class source of each 19-class label (the official
    map gives the 19 back), sometimes with a class the 19-class map drops (roads, mines)."""
    classes = [int(rng.choice(sources_of(k))) for k in labels19]
    if rng.random() < DROPPED_EXTRA:
        classes.append(int(rng.choice(DROPPED_IN_19)))
    return tuple(classes)


def sources_of(k: int) -> tuple[int, ...]:
    return tuple(sorted(i for i, j in MAP_43_TO_19.items() if j == k))


def lay_out_parcels(
    rng: np.random.Generator, parcels: list[Parcel] | tuple[Parcel, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """((20, 20) true class indices, (20, 20) parcel indices): contiguous irregular
    parcels, each class in exactly its cells, as one band of a smooth field cut into
    quantile bands; its parcels in sub-bands of it, in their order."""
    counts = np.zeros(N, dtype=int)
    for parcel in parcels:
        counts[parcel.true_class] += parcel.cells
    field = _smooth_field(rng)
    order = np.argsort(field, axis=None, kind="stable")
    classes = rng.permutation(np.flatnonzero(counts))  # which class gets which band
    cells = np.empty(GRID * GRID, np.intp)
    which = np.empty(GRID * GRID, np.intp)
    start = 0
    for k in classes:
        for i, parcel in enumerate(parcels):
            if parcel.true_class == k:
                band = order[start : start + parcel.cells]
                cells[band], which[band] = k, i
                start += parcel.cells
    return cells.reshape(GRID, GRID), which.reshape(GRID, GRID)


def _smooth_field(rng: np.random.Generator) -> np.ndarray:
    """A smooth random field on the grid: a few random plane waves."""
    y, x = np.mgrid[0:GRID, 0:GRID] / GRID
    field = np.zeros((GRID, GRID))
    for _ in range(4):
        angle, freq, phase = rng.uniform(0, np.pi), rng.uniform(0.4, 2.2), rng.uniform(0, 6.3)
        field += np.cos(2 * np.pi * freq * (x * np.cos(angle) + y * np.sin(angle)) + phase)
    return field + 0.15 * rng.standard_normal((GRID, GRID))
