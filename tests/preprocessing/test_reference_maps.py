"""preprocessing/reference_maps.py: a map placed by its georeferencing (a window of a larger
map, a 20 m map), or refused with its reason; never stored shifted. The archive-level rows
(missing, truncated, 60 x 60, shifted ...) are in test_reference_maps_bad_input.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.crs import CRS
from rasterio.transform import Affine

from bigearthnet.core import constants
from bigearthnet.preprocessing.reference_maps import MapError, PatchGrid, decide, read_map

GRID = PatchGrid("EPSG:32633", 500000.0, 5000020.0)
NO = constants.NO_LABEL


def codes_map() -> np.ndarray:
    """A 120 x 120 map of three classes in known places."""
    codes = np.full((120, 120), 211, np.uint16)  # Arable land
    codes[:, 60:] = 311  # Broad-leaved forest
    codes[90:, :30] = 523  # Sea and ocean
    return codes


def write_map(path: Path, codes: np.ndarray, *, x=GRID.ulx, y=GRID.uly, pixel=10.0,
              epsg=32633, nodata=0) -> str:  # fmt: skip
    profile = dict(driver="GTiff", width=codes.shape[1], height=codes.shape[0], count=1,
                   dtype=codes.dtype.name, crs=CRS.from_epsg(epsg), nodata=nodata,
                   transform=Affine(pixel, 0, x, 0, -pixel, y), compress="deflate")  # fmt: skip
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(codes, 1)
    return str(path)


def test_a_map_on_the_patch_grid_becomes_19_class_indices(tmp_path) -> None:
    placed = read_map(write_map(tmp_path / "m.tif", codes_map()), GRID)
    np.testing.assert_array_equal(placed.map19, constants.corine_to_19(codes_map()))
    assert set(np.unique(placed.map19).tolist()) == {2, 8, 18} and placed.unknown_pixels == 0


def test_a_larger_map_gives_the_patch_window(tmp_path) -> None:
    big = np.full((160, 150), 112, np.uint16)
    big[20:140, 30:150] = codes_map()  # the patch lies 200 m below, 300 m right of its corner
    path = write_map(tmp_path / "big.tif", big, x=GRID.ulx - 300, y=GRID.uly + 200)
    np.testing.assert_array_equal(read_map(path, GRID).map19, constants.corine_to_19(codes_map()))


def test_a_20m_map_gives_each_10m_pixel_the_code_it_lies_in(tmp_path) -> None:
    coarse = codes_map()[::2, ::2]  # borders on the 20 m grid: upsampling gives it back
    placed = read_map(write_map(tmp_path / "m20.tif", coarse, pixel=20.0), GRID)
    np.testing.assert_array_equal(placed.map19, constants.corine_to_19(codes_map()))
    # A 20 m grid offset by 10 m (half its pixel) still nests the 10 m pixels: one column of
    # the map lies west of the patch, so the patch's columns pair up one further on.
    wide = np.repeat(np.arange(61, dtype=np.uint16)[None, :], 60, axis=0) % 3 + 211
    path = write_map(tmp_path / "m20off.tif", wide, x=GRID.ulx - 10, pixel=20.0)
    got = read_map(path, GRID).map19
    expected = constants.corine_to_19(wide[:, (1 + np.arange(120)) // 2].repeat(2, axis=0))
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"x": GRID.ulx + 20}, "covers 98% of its patch"),  # shifted 20 m east
        ({"y": GRID.uly - 600}, "covers 50% of its patch"),
        ({"x": GRID.ulx + 5}, "off the patch's 10 m grid"),
        ({"pixel": 5.0}, "5 m pixels"),
        ({"pixel": 15.0}, "15 m pixels"),
        ({"epsg": 32632}, "is on EPSG:32632, its patch on EPSG:32633"),
    ],
)
def test_a_map_off_the_patch_is_refused_never_shifted(tmp_path, change, reason) -> None:
    path = write_map(tmp_path / "off.tif", codes_map(), **change)
    with pytest.raises(MapError, match=reason):
        read_map(path, GRID)


def test_a_small_map_and_float_values_are_refused(tmp_path) -> None:
    with pytest.raises(MapError, match="covers 25% of its patch"):
        read_map(write_map(tmp_path / "small.tif", codes_map()[:60, :60]), GRID)
    with pytest.raises(MapError, match="float32, not integer codes"):
        read_map(write_map(tmp_path / "f.tif", codes_map().astype(np.float32)), GRID)
    with pytest.raises(MapError, match="missing reference map"):
        read_map(str(tmp_path / "absent.tif"), GRID)


def test_nodata_dropped_and_unknown_codes_have_no_label(tmp_path) -> None:
    codes = codes_map()
    codes[0, :10] = 999  # no CORINE code: no label, counted
    codes[1, :10] = 122  # roads: a CORINE code the 19 classes drop
    codes[2, :10] = 0  # reBEN's nodata
    codes[3, :10] = 65535  # this file's declared nodata
    placed = read_map(write_map(tmp_path / "n.tif", codes, nodata=65535), GRID)
    assert (placed.map19[:4, :10] == NO).all() and placed.unknown_pixels == 10
    np.testing.assert_array_equal(placed.map19[4:], constants.corine_to_19(codes_map())[4:])


def test_the_policy_decides_a_map_that_disagrees_with_its_labels(tmp_path) -> None:
    path = write_map(tmp_path / "m.tif", codes_map())  # Arable, Broad-leaved, Sea
    labels = constants.multi_hot(["Arable land", "Broad-leaved forest", "Pastures"],
                                 constants.CLASSES_19)  # fmt: skip
    kept = decide(path, GRID, labels, "keep")
    assert kept.map19 is not None and kept.map_only and kept.labels_only and not kept.note
    assert kept.pixels is not None and kept.pixels.sum() == 14400
    dropped = decide(path, GRID, labels, "drop-map")
    assert dropped.map19 is None and not dropped.drop_patch
    assert "the map holds Marine waters" in dropped.note and "name Pastures" in dropped.note
    gone = decide(path, GRID, labels, "drop-patch")
    assert gone.drop_patch and gone.map_only and gone.labels_only
    agreeing = constants.multi_hot(["Arable land", "Broad-leaved forest", "Marine waters"],
                                   constants.CLASSES_19)  # fmt: skip
    same = decide(path, GRID, agreeing, "drop-patch")
    assert same.map19 is not None and not (same.map_only or same.labels_only or same.drop_patch)
