"""formats/truth_maps.py: truth_maps.h5's one writer and one reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bigearthnet.formats.truth_maps import (
    TRUTH_MAPS,
    TruthMapsError,
    read_truth_maps,
    write_truth_maps,
)


def test_truth_maps_round_trip_by_name(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    maps = [rng.integers(0, 19, (120, 120)).astype(np.uint8) for _ in range(3)]
    names = ["c_1_2", "a_3_4", "b_5_6"]
    write_truth_maps(tmp_path, names, maps)
    every = read_truth_maps(tmp_path)
    assert list(every) == sorted(names)
    for name, expected in zip(names, maps):
        np.testing.assert_array_equal(every[name], expected)
    assert list(read_truth_maps(tmp_path, ["b_5_6"])) == ["b_5_6"]
    with pytest.raises(TruthMapsError, match="no truth map for z_0_0"):
        read_truth_maps(tmp_path, ["z_0_0"])


def test_a_missing_or_damaged_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(TruthMapsError, match="no truth maps"):
        read_truth_maps(tmp_path)
    (tmp_path / TRUTH_MAPS).write_bytes(b"not hdf5")
    with pytest.raises(TruthMapsError, match="unreadable truth maps"):
        read_truth_maps(tmp_path)
