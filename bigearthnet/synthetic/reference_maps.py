"""A synthetic v2 patch's reference map, as reBEN ships them, and its truth per pixel.

reBEN: ``Reference_Maps/<tile>/<patch_id>/<patch_id>_reference_map.tif``, uint16 CORINE
level-3 codes, nodata 0, 120 x 120 at 10 m on the patch's own grid, deflated. Here:

* **realistic** (:func:`corine_map`): the map is the labels' map, the coarse CORINE-like
  map the patch's labels come from (:mod:`.landscape`): each labelled class has its
  polygon - where the ground is a look-alike if the polygon is wrong - and small features
  under the 25 ha unit are absent (each of their cells takes the class of the nearest
  polygon: CORINE generalises them into their surroundings). A labelled polygon whose
  share is too thin for a 60 m cell still reaches into the patch: one border cell of the
  map's largest class becomes it (a sliver), so the map's classes are exactly the labels,
  as in reBEN. Each polygon's code is one CORINE code of its class's 43-class sources
  (Arable land: 211, 212 or 213), drawn from the patch's own random stream.
* **simple** (:func:`simple_map`): the map is the truth, code for code (each region's
  43-class signature gives its code).

The truth per 10 m pixel (the class of its 60 m cell) goes beside the archive,
``OUT/truth_maps.h5`` (:mod:`bigearthnet.formats.truth_maps`), for scoring a map against
the ground as well as against CORINE.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from bigearthnet.core.constants import CLASSES_19, CLC_CODES_43, MAP_43_TO_19, PATCH_SIZE
from bigearthnet.formats.truth_maps import write_truth_maps
from bigearthnet.preprocessing.archive import V2_MAP_SUFFIX
from bigearthnet.synthetic.landscape import GRID, UNMAPPED, Parcel, sources_of
from bigearthnet.synthetic.render import PatchJob

NODATA = 0  # reBEN's nodata (no synthetic map holds it: CORINE covers every patch)
_CELL = PATCH_SIZE // GRID  # 10 m pixels per 60 m cell


def to_pixels(cells: np.ndarray) -> np.ndarray:
    """A (20, 20) grid of 60 m cells as its (120, 120) grid of 10 m pixels."""
    return np.asarray(cells).repeat(_CELL, axis=0).repeat(_CELL, axis=1)


def simple_map(cells: np.ndarray, signature_rows: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(truth, codes) of a simple patch, both (20, 20): the regions' 19-class indices and
    the CORINE codes of their 43-class signatures (the map is the truth)."""
    classes = np.asarray([MAP_43_TO_19[row] for row in signature_rows], dtype=np.uint8)
    codes = np.asarray([CLC_CODES_43[row] for row in signature_rows], dtype=np.uint16)
    return classes[cells], codes[cells]


def corine_map(
    rng: np.random.Generator, parcels: tuple[Parcel, ...], parcel_of: np.ndarray
) -> np.ndarray:
    """(20, 20) uint16 CORINE codes of a realistic patch: its labels' map (see the module
    docstring), from ``parcels`` laid out as ``parcel_of`` (:func:`.landscape.lay_out_parcels`)."""
    classes = np.asarray([p.map_class for p in parcels])[parcel_of]
    labels = sorted({p.map_class for p in parcels if p.map_class != UNMAPPED})
    if not (classes != UNMAPPED).any():  # only small features drawn: the first polygon holds
        classes[:] = labels[0]
    classes = _absorb_unmapped(classes)
    for label in labels:
        if not (classes == label).any():
            _sliver(rng, classes, label)
    codes = np.zeros(len(CLASSES_19), dtype=np.uint16)
    for k in labels:
        codes[k] = CLC_CODES_43[int(rng.choice(sources_of(k)))]
    return codes[classes]


def _absorb_unmapped(classes: np.ndarray) -> np.ndarray:
    """Each unmapped cell takes the class of the nearest mapped one."""
    from scipy.ndimage import distance_transform_edt

    unmapped = classes == UNMAPPED
    if not unmapped.any():
        return classes
    _, (rows, cols) = distance_transform_edt(unmapped, return_indices=True)
    return classes[rows, cols]


def _sliver(rng: np.random.Generator, classes: np.ndarray, label: int) -> None:
    """One border cell of the map's largest class becomes ``label`` (in place)."""
    values, counts = np.unique(classes, return_counts=True)
    largest = values[np.argmax(counts)]
    border = np.zeros(classes.shape, dtype=bool)
    border[[0, -1], :] = border[:, [0, -1]] = True
    candidates = np.argwhere((classes == largest) & border)
    if not len(candidates):
        candidates = np.argwhere(classes == largest)
    row, col = candidates[int(rng.integers(len(candidates)))]
    classes[row, col] = label


def patch_maps(
    seed: int, job: PatchJob, cells: np.ndarray, parcel_of: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """(truth, codes) of a job: its truth, (20, 20) uint8 19-class indices, and its
    reference map, (120, 120) uint16 CORINE codes, from its laid-out ``cells`` (true classes
    with ``parcel_of``, or a simple patch's regions). The map's random choices have their
    own stream, so the bands are the same with or without maps."""
    if job.parcels is None or parcel_of is None:  # simple: regions of fixed signatures
        truth, codes = simple_map(cells, job.signature_rows)
    else:
        rng = np.random.default_rng(np.random.SeedSequence([seed, 3, job.index]))
        truth, codes = cells.astype(np.uint8), corine_map(rng, job.parcels, parcel_of)
    return truth, to_pixels(codes)


def map_file(root: str, job: PatchJob) -> str:
    """Where the job's reference map goes (its folder made)."""
    assert job.map_dir is not None
    folder = os.path.join(root, job.map_dir)
    os.makedirs(folder)
    return os.path.join(folder, f"{job.prefix}{V2_MAP_SUFFIX}")


def write_truths(root: Path, names: list[str], truths: dict[int, np.ndarray]) -> None:
    """``root/truth_maps.h5`` from the truth of each job (its index in ``names``)."""
    indices = sorted(truths)
    write_truth_maps(root, [names[i] for i in indices], [to_pixels(truths[i]) for i in indices])
