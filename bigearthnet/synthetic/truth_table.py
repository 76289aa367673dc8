"""``OUT/truth.parquet`` of a realistic synthetic archive: each patch's true class shares.

Beside the archive, outside BigEarthNet's layout (preprocessing never reads it): the labels
are CORINE-like, made from a coarse map (:mod:`.landscape`); this is what the pixels hold.
One writer, one reader; columns ``patch_id`` (the v1 name or v2 patch_id) and ``fractions``
(19 floats: each class's share of the patch's pixels, CLASSES_19 order, summing to 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

TRUTH_FILE = "truth.parquet"


def write_truth(root: Path, names: Sequence[str], fractions: Sequence[Sequence[float]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"patch_id": list(names), "fractions": [list(f) for f in fractions]})
    pq.write_table(table, root / TRUTH_FILE)


def read_truth(archive: Path) -> dict[str, np.ndarray]:
    """Patch name -> (19,) true class shares."""
    import pyarrow.parquet as pq

    table = pq.read_table(archive / TRUTH_FILE).to_pydict()
    return {name: np.asarray(shares, np.float64)
            for name, shares in zip(table["patch_id"], table["fractions"])}  # fmt: skip
