"""``OUT/truth_maps.h5`` beside a synthetic v2 archive: each patch's true class per 10 m
pixel, so that a map can be scored against the ground as well as against the archive's
CORINE-like reference maps (``Reference_Maps/``).

Outside BigEarthNet's layout (preprocessing never reads it), like ``truth.parquet`` (the
true class shares). One writer (:func:`write_truth_maps`), one reader
(:func:`read_truth_maps`); in ``formats/`` so that scoring (evaluation) may read it too.

=========== ================== ===========================================================
dataset     shape, dtype       content
=========== ================== ===========================================================
patch_id    (N,) UTF-8         the v2 patch_id of each row, sorted
classes     (N,120,120) u1     the true 19-class index of every 10 m pixel, on the
                               patch's own grid (the grid of its 10 m bands and its
                               reference map), ``constants.CLASSES_19`` order
=========== ================== ===========================================================

Rows are chunked 16 at a time and gzip-deflated (the truth is laid out in 60 m cells:
about 0.3 KB a patch). The file attribute ``classes19`` names the classes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError
from bigearthnet.core.util import first_line

TRUTH_MAPS = "truth_maps.h5"
_CHUNK_ROWS = 16


class TruthMapsError(InputError):
    """A truth-maps file that cannot be read as one."""


def write_truth_maps(root: str | Path, names: Sequence[str], maps: Sequence[np.ndarray]) -> Path:
    """Write ``root/truth_maps.h5`` (atomically) for the patches ``names``, each its
    (120, 120) 19-class indices; rows sorted by name."""
    path = Path(root) / TRUTH_MAPS
    order = np.argsort(np.asarray(names, dtype=object), kind="stable")
    size = constants.PATCH_SIZE
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with h5py.File(tmp, "w") as f:
        f.create_dataset("patch_id", data=[names[i] for i in order], dtype=h5py.string_dtype())
        classes = f.create_dataset(
            "classes",
            shape=(len(names), size, size),
            dtype=np.uint8,
            chunks=(max(1, min(_CHUNK_ROWS, len(names))), size, size),
            compression="gzip",
            compression_opts=4,
        )
        for row, i in enumerate(order):
            classes[row] = np.asarray(maps[i], dtype=np.uint8)
        f.attrs["classes19"] = list(constants.CLASSES_19)
    os.replace(tmp, path)
    return path


def read_truth_maps(
    archive: str | Path, names: Sequence[str] | None = None
) -> dict[str, np.ndarray]:
    """Patch name -> (120, 120) uint8 true 19-class indices, for ``names`` (default: all);
    TruthMapsError naming the file when it is missing, unreadable or lacks a name."""
    path = Path(archive) / TRUTH_MAPS
    if not path.is_file():
        raise TruthMapsError(f"{path}: no truth maps (written with v2 synthetic archives)")
    try:
        with h5py.File(path, "r") as f:
            ids = [v.decode() if isinstance(v, bytes) else str(v) for v in f["patch_id"][:]]
            row_of = {name: row for row, name in enumerate(ids)}
            wanted = ids if names is None else list(names)
            missing = [name for name in wanted if name not in row_of]
            if missing:
                raise TruthMapsError(f"{path}: no truth map for {missing[0]}")
            if names is None:
                return dict(zip(ids, f["classes"][:]))
            return {name: f["classes"][row_of[name]] for name in wanted}
    except (OSError, KeyError) as err:
        raise TruthMapsError(f"{path}: unreadable truth maps ({first_line(err)})") from None
