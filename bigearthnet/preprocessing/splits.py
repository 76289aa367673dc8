"""Train/val/test assignment and exclusion lists.

Three sources, in this order of precedence:

1. ``--splits-dir``: the official v1 CSVs ``train.csv``, ``val.csv``, ``test.csv``: one patch
   name per line, no header; the multi-modal variant has two columns ``s2_name,s1_name`` and
   only the first is used. Archive patches named in no file are left out ("not in any split
   file"); names absent from the archive are reported as rejects.
2. The v2 ``split`` column of ``metadata.parquet`` (``validation`` is called ``val`` here).
3. A seeded random split by ratios (default 0.6/0.2/0.2, the seed study's): the sorted names
   are permuted with ``numpy.random.default_rng(seed)`` and cut in order, so the same
   archive and seed always give the same split.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from bigearthnet.core.constants import SPLITS
from bigearthnet.core.errors import InputError

DEFAULT_RATIOS = (0.6, 0.2, 0.2)


class SplitError(InputError):
    """A split file or ratio that cannot be used."""


def read_name_list(path: Path) -> list[str]:
    """Patch names from the first column of a header-less CSV (blank lines skipped)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return [row[0].strip() for row in csv.reader(f) if row and row[0].strip()]
    except FileNotFoundError:
        raise SplitError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise SplitError(f"{path}: cannot read name list ({err})") from None


def read_splits_dir(folder: Path) -> dict[str, str]:
    """name -> split from train.csv, val.csv and test.csv in ``folder``."""
    assignment: dict[str, str] = {}
    for split in SPLITS:
        path = folder / f"{split}.csv"
        for name in read_name_list(path):
            previous = assignment.setdefault(name, split)
            if previous != split:
                raise SplitError(f"{path}: {name} is also listed in {previous}.csv")
    return assignment


def parse_ratios(text: str) -> tuple[float, float, float]:
    """'0.6,0.2,0.2' -> (0.6, 0.2, 0.2); three non-negative numbers summing to 1."""
    try:
        ratios = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise SplitError(
            f"--split-ratios {text!r}: expected three numbers like 0.6,0.2,0.2"
        ) from None
    if (
        len(ratios) != 3
        or not all(math.isfinite(x) for x in ratios)
        or min(ratios) < 0
        or abs(sum(ratios) - 1.0) > 1e-6
    ):
        raise SplitError(f"--split-ratios {text!r}: need three non-negative ratios summing to 1")
    return ratios  # type: ignore[return-value]


def random_split(names: list[str], ratios: tuple[float, float, float], seed: int) -> dict[str, str]:
    """Seeded random assignment; depends only on the set of names, the ratios and the seed."""
    ordered = sorted(names)
    order = np.random.default_rng(seed).permutation(len(ordered))
    n_train = int(round(ratios[0] * len(ordered)))
    n_val = int(round(ratios[1] * len(ordered)))
    bounds = (n_train, n_train + n_val)
    out = {}
    for rank, idx in enumerate(order):
        out[ordered[idx]] = "train" if rank < bounds[0] else "val" if rank < bounds[1] else "test"
    return out
