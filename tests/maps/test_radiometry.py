"""bigearthnet.maps.radiometry: each scene's reflectance offset decided from its metadata, in
the documented order; undecidable or contradicted: one line naming the scene."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.transform import Affine

from bigearthnet.maps.inputs import open_scene_source
from bigearthnet.maps.radiometry import Radiometry, RadiometryError, SceneMetadata, decide

BANDS = ("B02", "B03")


def _bands(folder: Path, scale: float | None, offset: float = 0.0) -> dict[str, tuple[Path, int]]:
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for band in BANDS:
        path = folder / f"{band}.tif"
        profile = dict(driver="GTiff", width=2, height=2, count=1, dtype="uint16",
                       crs="EPSG:32633", transform=Affine(10, 0, 0, 0, -10, 20))  # fmt: skip
        with rasterio.open(path, "w", **profile) as dst:
            dst.write(np.ones((1, 2, 2), np.uint16))
            if scale is not None:
                dst.scales, dst.offsets = (scale,), (offset,)
        files[band] = (path, 1)
    return files


def _decide(folder: Path, given: int | None = None) -> Radiometry:
    """What the band-GeoTIFF folder's reader gathers, decided."""
    source = open_scene_source(folder, bands=BANDS)
    try:
        return decide(folder, source.metadata, given)
    finally:
        source.close()


def _product(folder: Path, offsets: dict[int, int] | None) -> None:
    items = "".join(f'<BOA_ADD_OFFSET band_id="{i}">{v}</BOA_ADD_OFFSET>'
                    for i, v in (offsets or {}).items())  # fmt: skip
    (folder / "MTD_MSIL2A.xml").write_text(f"<r><BOA_ADD_OFFSET_VALUES_LIST>{items}"
                                          "</BOA_ADD_OFFSET_VALUES_LIST></r>")  # fmt: skip


def test_the_product_metadata_decides_first(tmp_path: Path) -> None:
    _bands(tmp_path, scale=None)
    _product(tmp_path, {1: -1000, 2: -1000})
    found = _decide(tmp_path)
    assert found.offsets == {"B02": -1000, "B03": -1000}
    assert found.describe() == "DN -1000 (BOA_ADD_OFFSET in MTD_MSIL2A.xml)"
    _product(tmp_path, None)  # a baseline before 04.00
    assert _decide(tmp_path).offsets == {"B02": 0, "B03": 0}


@pytest.mark.parametrize("offset, dn", [(-0.1, -1000), (0.0, 0)])
def test_band_scale_and_offset_decide_next(tmp_path: Path, offset: float, dn: int) -> None:
    _bands(tmp_path, 1e-4, offset)
    _product(tmp_path, {1: 0, 2: 0})  # the bands' own scale/offset decide before it
    found = _decide(tmp_path)
    assert set(found.offsets.values()) == {dn} and found.evidence == "scale/offset of the bands"


@pytest.mark.parametrize(
    "case, message",
    [
        ("nothing", "say nothing of the reflectance offset"),
        ("contradicted", "--boa-offset -1000 contradicts its metadata (DN +0"),
        ("other scale", "has scale 1e-05, not reflectance per DN"),
        ("half tagged", "band(s) B03 carry no scale/offset, the others do"),
    ],
)
def test_what_cannot_decide_is_one_line_naming_the_scene(
    tmp_path: Path, case: str, message: str
) -> None:
    given = None
    if case == "nothing":
        files = _bands(tmp_path, scale=None)
    elif case == "contradicted":
        files, given = _bands(tmp_path, 1e-4, 0.0), -1000
    elif case == "other scale":
        files = _bands(tmp_path, 1e-5, 0.0)
    else:
        files = _bands(tmp_path, 1e-4, 0.0)
        with rasterio.open(files["B03"][0], "r+") as dst:
            dst.scales, dst.offsets = (1.0,), (0.0,)
    with pytest.raises(RadiometryError, match=re.escape(message)):
        _decide(tmp_path, given)
    _bands(tmp_path / "given", scale=None)
    assert _decide(tmp_path / "given", 0).evidence == "--boa-offset"


@pytest.mark.parametrize(
    "baseline, dn", [("04.00", -1000), ("05.11", -1000), ("N0509", -1000), ("02.14", 0)]
)
def test_the_processing_baseline_decides_last(baseline: str, dn: int) -> None:
    """Planetary-Computer-style items state no scale/offset: their baseline decides."""
    metadata = SceneMetadata(bands=BANDS, baseline=baseline, baseline_from="the item")
    found = decide(Path("item.json"), metadata, None)
    assert set(found.offsets.values()) == {dn}
    assert found.evidence.startswith("processing baseline") and "(the item)" in found.evidence
    with pytest.raises(RadiometryError, match="not a version like 05.10"):
        decide(Path("item.json"), SceneMetadata(bands=BANDS, baseline="new"), None)
