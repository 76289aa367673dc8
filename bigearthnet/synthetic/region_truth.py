"""The truth of a synthetic region (``bigearthnet-synth region``) at any point: the class on
the ground on a date (the block's, or the small feature's inside its disc) and how far the
point lies from the nearest boundary between two classes. What a region series is scored
against (:mod:`.region_score`) and what its scene maps are made from where a test needs
maps without a model (:mod:`.region_maps`).

Points are in the truth's CRS (``truth["crs"]``, EPSG:3035), ``truth`` as
:func:`~.region.read_truth` gives it.
"""

from __future__ import annotations

import numpy as np

from bigearthnet.synthetic.region_cover import feature_grid

_NEIGHBOURS = ((0, -1), (0, 1), (-1, 0), (1, 0), (-1, -1), (-1, 1), (1, -1), (1, 1))


def cover_at(truth: dict, x: np.ndarray, y: np.ndarray, date: int) -> tuple[np.ndarray, np.ndarray]:
    """(classes, metres to the nearest class boundary) at the points ``x``, ``y`` on the
    date of index ``date``. A boundary is a block edge (or corner) with a block of another
    class beyond it, or the edge of a small feature of another class than its block."""
    size, rows, cols = truth["block_m"], truth["rows"], truth["cols"]
    east, south = np.asarray(x) - truth["left"], truth["top"] - np.asarray(y)
    row = np.floor(south / size).astype(int).clip(0, rows - 1)
    col = np.floor(east / size).astype(int).clip(0, cols - 1)
    blocks = truth["classes"][date]
    base = blocks[row, col]
    kind, fx, fy, radius = feature_grid(truth["features"], rows, cols)
    centre_distance = np.hypot(east - col * size - fx[row, col], south - row * size - fy[row, col])
    feature = (kind[row, col] >= 0) & (kind[row, col] != base)
    inside = feature & (centre_distance < radius[row, col])
    classes = np.where(inside, kind[row, col], base)
    distance = np.where(feature, np.abs(centre_distance - radius[row, col]), np.inf)
    # Distances to the block's edges: west, east, north, south.
    gaps = {(0, -1): east - col * size, (0, 1): (col + 1) * size - east,
            (-1, 0): south - row * size, (1, 0): (row + 1) * size - south}  # fmt: skip
    for dr, dc in _NEIGHBOURS:
        other_row, other_col = row + dr, col + dc
        exists = (other_row >= 0) & (other_row < rows) & (other_col >= 0) & (other_col < cols)
        other = blocks[other_row.clip(0, rows - 1), other_col.clip(0, cols - 1)]
        differs = exists & (other != base)
        # A corner is as far as both edges' gaps make it.
        gap = np.hypot(gaps[(dr, 0)], gaps[(0, dc)]) if dr and dc else gaps[(dr, dc)]
        distance = np.where(differs, np.minimum(distance, gap), distance)
    return classes, distance
