"""bigearthnet.formats.pixel_eval: an evaluation's pixel files read back as written, and a
file cut short, or not the one its evaluation recorded, refused in one line naming it."""

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
    file_digests,
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


def test_a_file_other_than_the_one_its_evaluation_recorded_is_refused(tmp_path: Path) -> None:
    """metrics.json records the digests (file_digests); the reader given one refuses a
    file cut at a row's end, which parses, or another evaluation's."""
    confusions = _confusions()
    write_pixel_classes(tmp_path, pixel_rows(confusions))
    recorded = file_digests(tmp_path)
    assert list(recorded) == [PIXEL_PER_CLASS]
    assert read_pixel_classes(tmp_path, recorded[PIXEL_PER_CLASS]) == pixel_rows(confusions)
    path = tmp_path / PIXEL_PER_CLASS
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))
    assert len(read_pixel_classes(tmp_path)) == 2 * len(CLASSES) - 1  # it parses
    with pytest.raises(InputError, match="not the file its evaluation wrote") as caught:
        read_pixel_classes(tmp_path, recorded[PIXEL_PER_CLASS])
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


def test_a_ratio_with_nothing_to_divide_by_is_none() -> None:
    never = {"reference": np.diag([5] + [0] * 18)}  # class 0 alone, always right
    first, second = pixel_rows(never)[:2]
    assert first.ratios() == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "iou": 1.0}
    assert second.ratios() == dict.fromkeys(("precision", "recall", "f1", "iou"))
