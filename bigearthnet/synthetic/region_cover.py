"""What covers a synthetic region (``bigearthnet-synth region``): its blocks' classes, the
changes that come to them, and small features, for each look
(:mod:`bigearthnet.synthetic.look` picks the one of its look).

Simple (:func:`simple_events`): any of :data:`REGION_CLASSES` anywhere; about 25 % of
blocks change lastingly to any other, about 15 % show a one-date look-alike that reverts
(:data:`FLOOD_CLASS`).

Realistic (the default, ``--difficulty realistic``; :func:`block_classes`,
:func:`realistic_events`, :func:`features`): the archive's landscape model
(:mod:`.landscape`) laid over the region's LAEA blocks, so a map is held to land cover
shaped like the archive it learnt from.

* **Landscapes** of the Alpine foreland at 12 E 48 N (no sea, no Mediterranean) cover
  squares of :data:`ZONE_BLOCKS` x :data:`ZONE_BLOCKS` blocks; each block's class is drawn
  from its landscape's calibrated class probabilities, so forests lie beside forests and
  fields beside fields, and the rare classes are rare.
* **Lasting changes** are the ones that happen: a forest felled (transitional woodland), a
  field or meadow built on, a meadow ploughed or a field put to grass (:data:`LASTING`).
  Blocks of other classes stay.
* **Floods** (inland water for one date) come only to fields, meadows and wetlands.
* **Small features**, as in the archive's truth: in :data:`FEATURE_SHARE` of the blocks a
  disc of another class of the same landscape, under CORINE's 25 ha mapping unit (2-15 % of
  the block), is present on the ground but not in the block's class. A map that draws it is
  right on the ground and counted wrong against the block, as on real CORINE references.
"""

from __future__ import annotations

import numpy as np

from bigearthnet.synthetic import landscape as ls

REGION_CLASSES: tuple[int, ...] = (0, 2, 5, 8, 11, 13, 14, 16, 18, 9, 3)  # simple's classes
FLOOD_CLASS = 17  # inland waters: the look-alike that comes and goes
ZONE_BLOCKS = 3  # a landscape spans 3 x 3 blocks
INLAND: dict[str, float] = {  # landscape -> weight at 12 E 48 N
    "temperate forest": 0.25,
    "farmland": 0.30,
    "pasture": 0.15,
    "peri-urban": 0.10,
    "lake district": 0.08,
    "uplands": 0.12,
}
FORESTS = (ls.BROAD, ls.CONIFER, ls.MIXED)
LASTING: dict[int, tuple[int, ...]] = {
    **{k: (ls.TRANSITIONAL,) for k in FORESTS},  # felled
    ls.ARABLE: (ls.URBAN, ls.INDUSTRY, ls.PASTURE),  # built on, put to grass
    ls.PASTURE: (ls.ARABLE, ls.URBAN),  # ploughed, built on
    ls.COMPLEX: (ls.URBAN, ls.INDUSTRY),
    ls.AGRI_NATURAL: (ls.URBAN,),
}
FLOODABLE = (ls.ARABLE, ls.PASTURE, ls.COMPLEX, ls.AGRI_NATURAL, ls.GRASS, ls.WETLAND)
LASTING_SHARE = 0.35  # of the blocks whose class can change lastingly (~25 % of all)
FLOOD_SHARE = 0.15  # of the floodable blocks
FEATURE_SHARE = 0.45  # blocks holding one small unmapped feature
FEATURE_AREA = (0.02, 0.15)  # of the block: under the 25 ha unit (17 % of a 120 px patch)


def _landscape_probs() -> tuple[np.ndarray, np.ndarray]:
    """(weights, class probabilities per landscape) of the inland landscapes."""
    _, probs = ls.calibrated()
    names = list(ls.LANDSCAPES)
    rows = [names.index(name) for name in INLAND]
    weights = np.array(list(INLAND.values()))
    classes = probs[rows] / probs[rows].sum(axis=1, keepdims=True)
    return weights / weights.sum(), classes


def block_classes(rng: np.random.Generator, rows: int, cols: int) -> tuple[np.ndarray, ...]:
    """(classes, landscape) per block (rows, cols): landscapes over squares of blocks, each
    block's class drawn from its landscape."""
    weights, classes = _landscape_probs()
    zones = rng.choice(len(weights), (-(-rows // ZONE_BLOCKS), -(-cols // ZONE_BLOCKS)), p=weights)
    landscape = np.repeat(np.repeat(zones, ZONE_BLOCKS, 0), ZONE_BLOCKS, 1)[:rows, :cols]
    start = np.array([rng.choice(ls.N, p=classes[z]) for z in landscape.ravel()])
    return start.reshape(rows, cols), landscape


def lasting_change(rng: np.random.Generator, start: int) -> int | None:
    """The class a block of ``start`` changes to lastingly, or None (this one stays)."""
    if start not in LASTING or rng.random() >= LASTING_SHARE:
        return None
    return int(rng.choice(LASTING[start]))


def floods(rng: np.random.Generator, start: int) -> bool:
    return start in FLOODABLE and rng.random() < FLOOD_SHARE


Event = tuple[tuple[int, int], str, int, int]  # (block), kind, date index, class


def simple_events(
    rng: np.random.Generator, rows: int, cols: int, dates: int
) -> tuple[np.ndarray, list[Event]]:
    """Any of :data:`REGION_CLASSES` anywhere; a quarter change to any other, 15 % flood."""
    start = rng.choice(REGION_CLASSES, (rows, cols))
    kind = rng.choice(3, (rows, cols), p=[0.60, 0.25, 0.15])
    plan: list[Event] = []
    for r, c in zip(*np.nonzero(kind == 1)):
        at = int(rng.integers(2, dates - 1))
        new = int(rng.choice([k for k in REGION_CLASSES if k != start[r, c]]))
        plan.append(((int(r), int(c)), "lasting", at, new))
    for r, c in zip(*np.nonzero(kind == 2)):
        plan.append(((int(r), int(c)), "transient", int(rng.integers(1, dates - 1)),
                     FLOOD_CLASS))  # fmt: skip
    return start, plan


def realistic_events(rng: np.random.Generator, start: np.ndarray, dates: int) -> list[Event]:
    """The changes that happen to each block's class of ``start``, over ``dates`` dates."""
    plan: list[Event] = []
    for (r, c), k in np.ndenumerate(start):
        new = lasting_change(rng, int(k))
        if new is not None:
            plan.append(((r, c), "lasting", int(rng.integers(2, dates - 1)), new))
        elif floods(rng, int(k)):
            plan.append(((r, c), "transient", int(rng.integers(1, dates - 1)), FLOOD_CLASS))
    return plan


def features(
    rng: np.random.Generator, landscape: np.ndarray, start: np.ndarray, block: float
) -> list[dict]:
    """The small unmapped features: per block maybe one disc (LAEA metres from the block's
    top-left corner) of another class of its landscape."""
    _, classes = _landscape_probs()
    found = []
    for (r, c), zone in np.ndenumerate(landscape):
        if rng.random() >= FEATURE_SHARE:
            continue
        others = classes[zone].copy()
        others[start[r, c]] = 0.0
        area = rng.uniform(*FEATURE_AREA) * block * block
        radius = float(np.sqrt(area / np.pi))
        x, y = rng.uniform(radius, block - radius, 2)
        kind = int(rng.choice(ls.N, p=others / others.sum()))
        found.append({"block": [int(r), int(c)], "class": kind, "x": float(x), "y": float(y),
                      "radius": radius})  # fmt: skip
    return found


def feature_grid(
    found: list[dict], rows: int, cols: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per block (rows, cols): the feature's class (-1: none), centre x, y and radius."""
    cls = np.full((rows, cols), -1, np.int16)
    x, y, radius = (np.zeros((rows, cols)) for _ in range(3))
    for f in found:
        r, c = f["block"]
        cls[r, c], x[r, c], y[r, c], radius[r, c] = f["class"], f["x"], f["y"], f["radius"]
    return cls, x, y, radius
