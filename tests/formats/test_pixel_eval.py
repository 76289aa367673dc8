"""bigearthnet.formats.pixel_eval: an evaluation's pixel files read back as written, and a
file cut short refused in one line naming it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError
from bigearthnet.evaluation.pixel_metrics import pixel_rows
from bigearthnet.formats.pixel_eval import (
    PIXEL_CONFUSION,
    PIXEL_PER_CLASS,
    read_confusions,
    read_pixel_classes,
    write_confusions,
    write_pixel_classes,
)

CLASSES = constants.CLASSES_19


def _confusions() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {against: rng.integers(0, 1000, (19, 19)) for against in ("reference", "truth")}


def test_the_files_read_back_as_written(tmp_path: Path) -> None:
    confusions = _confusions()
    write_confusions(tmp_path, CLASSES, confusions)
    rows = pixel_rows(confusions)
    write_pixel_classes(tmp_path, rows)
    classes, read = read_confusions(tmp_path)
    assert classes == list(CLASSES) and list(read) == ["reference", "truth"]
    for against, matrix in confusions.items():
        np.testing.assert_array_equal(read[against], matrix)
    assert read_pixel_classes(tmp_path) == rows  # floats as repr: exact


def test_the_reference_alone_is_a_file_too(tmp_path: Path) -> None:
    reference = _confusions()["reference"]
    write_confusions(tmp_path, CLASSES, {"reference": reference})
    assert list(read_confusions(tmp_path)[1]) == ["reference"]


@pytest.mark.parametrize("name", [PIXEL_CONFUSION, PIXEL_PER_CLASS])
def test_a_file_cut_short_is_refused(name: str, tmp_path: Path) -> None:
    confusions = _confusions()
    write_confusions(tmp_path, CLASSES, confusions)
    write_pixel_classes(tmp_path, pixel_rows(confusions))
    path = tmp_path / name
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    read = read_confusions if name == PIXEL_CONFUSION else read_pixel_classes
    with pytest.raises(InputError, match=str(path)) as caught:
        read(tmp_path)
    assert "\n" not in str(caught.value)
