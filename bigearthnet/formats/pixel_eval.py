"""An evaluation's per-pixel files, beside ``metrics.json`` (a model with the dense head):
one writer and one reader of each.

``pixel_confusion.csv``: the pixel counts every pixel figure is made of. One block of rows
per reference the dense head was scored against (:data:`AGAINST`: ``reference``, the
shards' reference maps, CORINE-like; ``truth``, a synthetic archive's true class per 10 m
pixel), a row per class of the reference, a column per class predicted (the argmax per
pixel), labelled pixels only:

=========== ================================================================
column      content
=========== ================================================================
against     reference | truth
class       the class of the reference (the row), ``constants.CLASSES_19``
<class>...  one column per class predicted, in the same order: pixels
=========== ================================================================

``pixel_per_class.csv``: what those counts say per class (:class:`PixelClassRow`): against,
class, index, support (the reference's pixels of the class), predicted (pixels predicted as
it), precision, recall, f1, iou. Both are derived from the confusion matrices by
:mod:`bigearthnet.evaluation.pixel_metrics` (the one home of the formulas). The
evaluation's ``metrics.json``, written after them, records each file's digest
(:func:`file_digests`): a reader of the figures checks that the file is that evaluation's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bigearthnet.core.errors import InputError
from bigearthnet.core.util import first_line, read_csv, sha256_file, write_csv

PIXEL_CONFUSION = "pixel_confusion.csv"
PIXEL_PER_CLASS = "pixel_per_class.csv"
REFERENCE, TRUTH = "reference", "truth"
AGAINST = (REFERENCE, TRUTH)  # in the order the files list them
PIXEL_FILES = (PIXEL_CONFUSION, PIXEL_PER_CLASS)


@dataclass(frozen=True)
class PixelClassRow:
    """One class's pixel figures against one reference."""

    against: str  # one of AGAINST
    name: str
    index: int
    support: int  # the reference's pixels of the class
    predicted: int  # pixels the dense head gave the class
    precision: float
    recall: float
    f1: float
    iou: float

    def ratios(self) -> dict[str, float | None]:
        """precision, recall, f1 and iou; None where there was nothing to divide by (the
        file holds 0 there): no pixel predicted as the class, or none in the reference."""
        either = self.support + self.predicted > 0
        return {
            "precision": self.precision if self.predicted else None,
            "recall": self.recall if self.support else None,
            "f1": self.f1 if either else None,
            "iou": self.iou if either else None,
        }


_ROW_FIELDS = ("against", "class", "index", "support", "predicted", "precision", "recall",
               "f1", "iou")  # fmt: skip


def write_confusions(
    folder: Path, classes: Sequence[str], confusions: Mapping[str, np.ndarray]
) -> None:
    """``folder/pixel_confusion.csv`` (atomically) of ``confusions``: against -> (C, C)
    pixel counts, rows the reference's class, columns the class predicted."""
    rows = []
    for against in (a for a in AGAINST if a in confusions):
        matrix = np.asarray(confusions[against]).round().astype(np.int64)
        rows += [[against, name, *map(int, counts)] for name, counts in zip(classes, matrix)]
    write_csv(folder / PIXEL_CONFUSION, ["against", "class", *classes], rows)


def read_confusions(folder: Path) -> tuple[list[str], dict[str, np.ndarray]]:
    """(classes, against -> (C, C) int64 counts) of ``folder/pixel_confusion.csv``;
    InputError naming the file when it is not one (cut short, a class missing)."""
    path = folder / PIXEL_CONFUSION
    table = _table(path)
    classes = [k for k in (table[0] if table else {}) if k not in ("against", "class")]
    try:
        found: dict[str, np.ndarray] = {}
        for against in AGAINST:
            rows = [row for row in table if row["against"] == against]
            if not rows:
                continue
            if [row["class"] for row in rows] != classes:
                raise ValueError(f"the {against} rows are not one per class, in order")
            found[against] = np.array([[int(row[c]) for c in classes] for row in rows])
    except (ValueError, TypeError, KeyError) as err:
        raise InputError(f"{path}: not a pixel confusion file ({first_line(err)})") from None
    if not found:
        raise InputError(f"{path}: not a pixel confusion file (no rows)")
    return classes, found


def write_pixel_classes(folder: Path, rows: Sequence[PixelClassRow]) -> None:
    """``folder/pixel_per_class.csv`` (atomically)."""
    cells = [{**dataclasses.asdict(row), "class": row.name} for row in rows]
    write_csv(folder / PIXEL_PER_CLASS, _ROW_FIELDS, cells)


def file_digests(folder: Path) -> dict[str, str]:
    """The identity of each pixel file in ``folder`` (the sha256 of its bytes): the
    evaluation's ``metrics.json`` records them, so a reader knows the files are its own."""
    return {name: sha256_file(folder / name)[:16] for name in PIXEL_FILES
            if (folder / name).is_file()}  # fmt: skip


def read_pixel_classes(folder: Path, digest: str | None = None) -> list[PixelClassRow]:
    """The rows of ``folder/pixel_per_class.csv``; InputError naming the file when it is
    not one, or (``digest``: what its evaluation recorded, :func:`file_digests`) when it
    is not the file its evaluation wrote: cut short, or another evaluation's."""
    path = folder / PIXEL_PER_CLASS
    if digest is not None and file_digests(folder).get(PIXEL_PER_CLASS) != digest:
        raise InputError(
            f"{path}: not the file its evaluation wrote (its metrics.json records "
            f"sha256 {digest}...): cut short, or another evaluation's; run evaluate.py again"
        )
    try:
        return [
            PixelClassRow(
                row["against"],
                row["class"],
                int(row["index"]),
                int(row["support"]),
                int(row["predicted"]),
                float(row["precision"]),
                float(row["recall"]),
                float(row["f1"]),
                float(row["iou"]),
            )  # fmt: skip
            for row in _table(path)
        ]
    except (ValueError, TypeError, KeyError) as err:
        raise InputError(f"{path}: not a pixel per-class file ({first_line(err)})") from None


def _table(path: Path) -> list[dict[str, str]]:
    try:
        text = path.read_text(encoding="utf-8")
        if not text.endswith("\n"):  # written whole and atomically: one cut short is refused
            raise ValueError("its last line is cut short")
        return read_csv(path)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise InputError(f"{path}: unreadable ({first_line(err)})") from None
