"""core/constants.py against the shared facts: the CORINE codes of the 43 classes and what
a reference map's codes become in the 19-class nomenclature."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from bigearthnet.core import constants

# Issue 49: the codes with no 19-class meaning (and nodata 0) that become "no label".
NO_19_CLASS = (122, 123, 124, 131, 132, 133, 141, 142, 332, 334, 335, 423, 0)


def test_corine_codes_are_the_facts(shared_dir: Path) -> None:
    facts = (shared_dir / "docs" / "bigearthnet-facts.md").read_text(encoding="utf-8")
    listed = re.search(
        r"CORINE code of each 43-class index \(official order\): (.*?)\(335", facts, re.S
    )
    assert listed is not None
    pairs = re.findall(r"(\d+) (\d{3})", listed.group(1))
    assert [int(i) for i, _ in pairs] == list(range(43))
    assert tuple(int(code) for _, code in pairs) == constants.CLC_CODES_43


def test_codes_map_through_the_43_classes_to_the_19() -> None:
    codes = np.asarray(constants.CLC_CODES_43, dtype=np.uint16)
    mapped = constants.corine_to_19(codes)
    for idx43, code in enumerate(constants.CLC_CODES_43):
        expected = constants.MAP_43_TO_19.get(idx43, constants.NO_LABEL)
        assert mapped[idx43] == expected, code
    assert constants.corine_to_19(np.asarray([211, 212, 213])).tolist() == [2, 2, 2]
    assert constants.corine_to_19(np.asarray([523, 333, 121])).tolist() == [18, 11, 1]


def test_dropped_nodata_and_unknown_codes_have_no_label() -> None:
    unknown = [1, 7, 42, 100, 200, 999, 65535]
    values = np.asarray([*NO_19_CLASS, *unknown], dtype=np.int64)
    assert set(constants.corine_to_19(values).tolist()) == {constants.NO_LABEL}
    assert set(constants.corine_to_19(np.asarray([-1, 70000, 2**40])).tolist()) == {
        constants.NO_LABEL
    }
    # Exactly the codes of the list have no 19-class meaning among CORINE's codes.
    corine = [*constants.CLC_CODES_43, 335]
    without = [c for c in corine if constants.corine_to_19(np.asarray([c]))[0] == 255]
    assert sorted(without) == sorted(c for c in NO_19_CLASS if c)
    assert constants.is_corine_code(np.asarray([211, 335, 0, 999])).tolist() == [
        True, True, False, False,
    ]  # fmt: skip
    assert len(constants.CLASSES_19) <= constants.NO_LABEL <= np.iinfo(np.uint8).max


def test_every_band_sits_on_the_10_m_grid_by_one_rule() -> None:
    """A band's factor (files, COGs, Zarr arrays, the test writers) is its pixel over 10 m;
    a pixel no Sentinel-2 band has is None (a reader names it)."""
    assert [constants.band_factor(b) for b in ("B02", "B05", "B01", constants.SCL)] == [1, 2, 6, 2]
    assert constants.resolution_factor(20.0000001) == 2
    assert constants.resolution_factor(30) is None and constants.resolution_factor(0.5) is None


def test_a_colour_is_formatted_in_one_place() -> None:
    """Pages, QGIS styles, legends and STAC colour hints take their hex from one helper."""
    assert constants.hex_colour((230, 0, 77, 255)) == "e6004d"
    assert constants.class_hex_colours(19)[0] == constants.hex_colour(
        constants.class_colours(19)[0]
    )
