"""reBEN's (BigEarthNet v2) label statistics, from its official metadata: the targets the
realistic synthetic archive is calibrated to (:mod:`bigearthnet.synthetic.landscape`).

The source is ``bigearthnet-facts.md`` of the shared documents (480,038 labelled patches);
``tests/synthetic/test_landscape.py`` checks these numbers against it and the generator
against these numbers.
"""

from __future__ import annotations

from bigearthnet.core.constants import CLASSES_19

# Share of patches holding each class, in CLASSES_19 order.
CLASS_SHARE: tuple[float, ...] = (
    0.133, 0.023, 0.392, 0.062, 0.199, 0.207, 0.256, 0.069, 0.283, 0.323,
    0.345, 0.025, 0.029, 0.294, 0.0027, 0.044, 0.0029, 0.132, 0.129,
)  # fmt: skip
# Share of patches with 1, 2, ... 8 labels.
LABEL_COUNT_SHARE: tuple[float, ...] = (0.180, 0.197, 0.283, 0.213, 0.094, 0.027, 0.005, 0.0006)
MEAN_LABELS = 2.95
# The seven most frequent pairs (share of all patches), by CLASSES_19 index.
TOP_PAIRS: tuple[tuple[int, int, float], ...] = (
    (9, 10, 0.219), (9, 13, 0.137), (10, 13, 0.132), (2, 6, 0.119), (2, 8, 0.116),
    (2, 5, 0.116), (8, 13, 0.111),
)  # fmt: skip
SNOW_SHARE = 0.111  # of all patches (the side file)
CLOUD_SHARE = 0.016
SPLIT_SHARE = {"train": 0.50, "validation": 0.25, "test": 0.25}  # about; reBEN's by region
DISTINCT_LABEL_SETS = 5350
BEST_CONSTANT_MICRO_F1 = 0.446  # always the k most frequent classes, reBEN's test split

assert len(CLASS_SHARE) == len(CLASSES_19)
