"""Scene maps of a synthetic region made from its truth, as a model that knew the land cover
would map each scene: a class map and its probabilities on the scene's own UTM grid at any
cell that divides its tiles (a classifier's 600 m cells, the dense head's 10 m pixels),
written by the one class-map writer, with a share of cells wrong and a cloud left unseen
in some scenes.

They test and measure what comes after the model, the region series' products, at any
cell and size without a model (a 10 m map takes the dense head, which a test or benchmark
of the products need not train): the products step takes scene maps however they were made.
Maps go where ``bigearthnet-map region`` puts them (``OUT/scenes/``), named as it names
them.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
from rasterio.transform import Affine
from rasterio.warp import transform

from bigearthnet.core import constants
from bigearthnet.formats import region_folder
from bigearthnet.formats.class_map import (
    DENSE_HEAD,
    HEAD_TAG,
    NODATA,
    PROB_SCALE,
    write_class_map,
)
from bigearthnet.synthetic.region import TRUTH_CRS, read_truth
from bigearthnet.synthetic.region_truth import cover_at

CONFIDENCE = 0.9  # the probability a map gives its class; the rest shared by the others
CLOUDED_SHARE = 1 / 3  # scenes with a rectangle unseen


def write_truth_maps(
    region: Path,
    out: Path,
    *,
    cell: float = 10.0,
    error: float = 0.0,
    seed: int = 0,
    tiles: int | None = None,
) -> list[tuple[str, Path]]:
    """A map of every scene of ``region`` (the first ``tiles`` tiles' only, when given) in
    ``out/scenes/``, cells of ``cell`` metres (dividing the tiles' side), a share ``error``
    of them given a wrong class; returns (scene path, map path) pairs."""
    truth = read_truth(region)
    side_px = truth["spec"]["size"]
    factor = round(cell / 10.0)
    if factor * 10.0 != cell or side_px % factor:
        raise ValueError(f"cell {cell}: not a multiple of 10 m dividing {side_px * 10} m tiles")
    rng = np.random.default_rng(seed)
    names = [t["name"] for t in truth["tiles"]][:tiles]
    dates = list(truth["dates"])
    written = []
    for tile in (t for t in truth["tiles"] if t["name"] in names):
        x, y = _pixel_centres(tile, side_px)
        for scene in (s for s in truth["scenes"] if s["tile"] == tile["name"]):
            classes, _ = cover_at(truth, x, y, dates.index(scene["date"]))
            scene_path = str(region / scene.get("path", f"scenes/{scene['name']}"))
            target = region_folder.scene_map_path(out, scene_path, tile["name"],
                                                  dt.date.fromisoformat(scene["date"]))  # fmt: skip
            target.parent.mkdir(parents=True, exist_ok=True)
            stored = _probabilities(classes, factor, error, rng)
            transform_ = Affine(cell, 0.0, tile["left"], 0.0, -cell, tile["top"])
            grid = {"crs": f"EPSG:{tile['epsg']}", "transform": transform_}
            top = np.where(stored[0] == NODATA, NODATA, stored.argmax(axis=0)).astype(np.uint8)
            # Tagged as the dense head's: the probabilities sum to 1, as its softmax's do.
            tags = {"scene": scene_path, HEAD_TAG: DENSE_HEAD}
            write_class_map(target, top, grid, constants.CLASSES_19, tags, probabilities=stored)
            written.append((scene_path, target))
    return written


def _pixel_centres(tile: dict, side_px: int) -> tuple[np.ndarray, np.ndarray]:
    """The tile's 10 m pixel centres in the truth's CRS, (side, side) each."""
    xs = tile["left"] + 5.0 + 10.0 * np.arange(side_px)
    ys = tile["top"] - 5.0 - 10.0 * np.arange(side_px)
    px, py = np.meshgrid(xs, ys)
    lx, ly = transform(f"EPSG:{tile['epsg']}", TRUTH_CRS, px.ravel(), py.ravel())
    return np.reshape(lx, px.shape), np.reshape(ly, py.shape)


def _probabilities(
    classes: np.ndarray, factor: int, error: float, rng: np.random.Generator
) -> np.ndarray:
    """(19, side / factor, side / factor) stored probabilities (x PROB_SCALE, NODATA unseen):
    each 10 m pixel's class at :data:`CONFIDENCE`, averaged over the cells' pixels."""
    count = len(constants.CLASSES_19)
    low = (1.0 - CONFIDENCE) / (count - 1)
    side = classes.shape[0] // factor
    cells = np.empty((count, side, side), np.uint8)
    wrong = rng.random((side, side)) < error
    swap = rng.integers(1, count, (side, side))
    for c in range(count):
        share = (classes == c).reshape(side, factor, side, factor).mean(axis=(1, 3))
        value = low + (CONFIDENCE - low) * share
        cells[c] = np.rint(value * PROB_SCALE).astype(np.uint8)
    if wrong.any():  # a wrong cell: its probabilities moved to another class's place
        moved = (np.arange(count)[:, None, None] + swap[None]) % count
        cells[:, wrong] = np.take_along_axis(cells, moved, axis=0)[:, wrong]
    if rng.random() < CLOUDED_SHARE:
        h, w = (int(v) for v in rng.integers(side // 6, side // 3 + 1, 2))
        r, c = (int(v) for v in rng.integers(0, side - max(h, w) + 1, 2))
        cells[:, r : r + h, c : c + w] = NODATA
    return cells
