"""A class map's file conventions, in one place: patch, scene, period and consistent maps,
and the companions a page recognises scene and change maps by (areas, transitions).

``MAP.tif`` holds the top class per cell (uint8, :data:`NODATA` where nothing was seen) and
the class list as its ``classes`` tag (JSON); ``MAP.tif.probabilities.tif`` holds one band
per class, a probability p stored as round(p x :data:`PROB_SCALE`). The map is written
after its companion, so a map whose companion is missing or damaged is not complete:
:func:`check_complete` says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from bigearthnet.core.util import first_line

PROB_SCALE = 250  # probability p is stored as round(p * 250): 0..250, 250 = certain
NODATA = 255  # nothing seen at this cell (the top class and the probability bands alike)
CLASSES_TAG = "classes"
# The provenance tag holding a digest of the model's weight files: what says two maps were
# made by one model whatever the paths (a run retrained in its folder keeps them).
WEIGHTS_DIGEST = "weights_sha256"
# The provenance tag naming the run whose weights made a map (from the run or its export).
RUN_DIR_TAG = "run_dir"
PROBABILITIES_SUFFIX = ".probabilities.tif"
AREAS_SUFFIX = ".areas.csv"  # a scene map's km² per class
TRANSITIONS_SUFFIX = ".transitions.csv"  # a change map's km² per transition


def probabilities_path(map_path: Path | str) -> Path:
    """The probabilities companion of ``map_path``."""
    return Path(f"{map_path}{PROBABILITIES_SUFFIX}")


def areas_path(map_path: Path | str) -> Path:
    """The areas table of the scene map ``map_path`` (what marks a map as a scene's)."""
    return Path(f"{map_path}{AREAS_SUFFIX}")


def transitions_path(map_path: Path | str) -> Path:
    """The transitions table of the change map ``map_path`` (what marks a change map)."""
    return Path(f"{map_path}{TRANSITIONS_SUFFIX}")


def classes_tags(classes: Sequence[str]) -> dict[str, str]:
    """The tag that names a map's classes, in band (or index) order."""
    return {CLASSES_TAG: json.dumps(list(classes))}


def read_classes(tags: Mapping[str, str], path: Path | str) -> list[str]:
    """The class list of a map's ``tags``; ValueError naming ``path`` where it is missing."""
    try:
        classes = json.loads(tags[CLASSES_TAG])
    except (KeyError, ValueError):
        raise ValueError(f"{path}: no '{CLASSES_TAG}' tag (not a class map)") from None
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        raise ValueError(f"{path}: its '{CLASSES_TAG}' tag is not a list of class names")
    return classes


def scaled(probabilities: np.ndarray) -> np.ndarray:
    """Probabilities in [0, 1] (NaN: not seen) as stored: uint8, NODATA where not seen."""
    seen = ~np.isnan(probabilities)
    values = np.rint(np.clip(np.nan_to_num(probabilities), 0.0, 1.0) * PROB_SCALE)
    return np.where(seen, values, NODATA).astype(np.uint8)


def unscaled(stored: np.ndarray) -> np.ndarray:
    """Stored probabilities as float32 in [0, 1], NaN where not seen."""
    return np.where(stored == NODATA, np.nan, stored / np.float32(PROB_SCALE)).astype(np.float32)


def check_complete(map_path: Path) -> str | None:
    """None when ``map_path`` and its probabilities companion are both there, readable to
    their last pixel and name the same classes; else what is wrong, in words."""
    import rasterio

    companion = probabilities_path(map_path)
    for path in (map_path, companion):
        if not path.is_file():
            return f"{path.name} is missing"
    try:
        with rasterio.open(map_path) as top, rasterio.open(companion) as scores:
            classes = read_classes(top.tags(), map_path)
            if read_classes(scores.tags(), companion) != classes or scores.count != len(classes):
                return f"{companion.name} does not hold the map's {len(classes)} classes"
            if (top.width, top.height) != (scores.width, scores.height):
                return f"{companion.name} is not the size of the map"
            top.read()  # a truncated file opens, and fails here
            scores.read()
    except (rasterio.RasterioIOError, ValueError) as err:
        return f"damaged ({first_line(err)})"
    return None
