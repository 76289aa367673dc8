"""bigearthnet.maps.radiometry: each scene's reflectance offset decided from its metadata, in
the documented order, checked against its pixels; undecidable or contradicted: one line
naming the scene."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.transform import Affine

from bigearthnet.maps.inputs import identify
from bigearthnet.maps.radiometry import (
    MIN_PIXELS,
    PixelReading,
    Radiometry,
    RadiometryError,
    SceneMetadata,
    decide,
    read_pixels,
)

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
    source = identify(folder).open(BANDS)
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


ES_FLAGGED = dict(
    bands=BANDS,
    scales=dict.fromkeys(BANDS, (1e-4, -0.1)),  # what Earth Search's older items all say
    scales_from="raster:bands of the STAC item",
    baseline="05.09",
    baseline_from="s2:processing_baseline of the STAC item",
    offset_applied_from="earthsearch:boa_offset_applied of the STAC item",
)
DARK = PixelReading(0, "DN +0: dark")  # what read_pixels says of a harmonised scene
SILENT = PixelReading(None, "silent: bright")


@pytest.mark.parametrize("flag, dn", [(True, 0), ("true", 0), (False, -1000)])
def test_earth_search_flag_outranks_raster_bands(flag, dn: int) -> None:
    """D01: the flag true means the offset is already off the COGs, whatever raster:bands
    say; false means ESA's values: the baseline decides."""
    found = decide(Path("item.json"), SceneMetadata(**ES_FLAGGED, offset_applied=flag), None)
    assert set(found.offsets.values()) == {dn}
    assert found.evidence.startswith("earthsearch:boa_offset_applied of the STAC item: ")
    assert ("processing baseline 05.09" in found.evidence) == (dn != 0)
    # D01's way out: --boa-offset 0 agrees with a true flag, no contradiction any more.
    if dn == 0:
        assert decide(Path("item.json"), SceneMetadata(**ES_FLAGGED, offset_applied=flag), 0)
    with pytest.raises(RadiometryError, match="neither true nor false"):
        decide(Path("item.json"), SceneMetadata(**ES_FLAGGED, offset_applied="yes"), None)


def test_the_pixels_speak_only_below_the_threshold() -> None:
    """The 1st percentile of B02 or B04 under 600 DN: harmonised; else silent; too few
    valid pixels: silent."""
    rng = np.random.default_rng(0)
    bright = rng.integers(1100, 3000, MIN_PIXELS * 2).astype(np.uint16)
    dark = bright.copy()
    dark[: MIN_PIXELS // 20] = 250  # 2.5 % dark targets in red (vegetation, water)
    assert read_pixels({"B02": bright, "B04": dark}).offset == 0
    assert read_pixels({"B02": bright, "B04": bright}).offset is None
    one_percent_artefacts = bright.copy()
    one_percent_artefacts[: len(bright) // 200] = 300  # 0.5 %: above the 1st percentile
    assert read_pixels({"B02": one_percent_artefacts, "B04": bright}).offset is None
    few = read_pixels({"B02": dark[: MIN_PIXELS - 1], "B04": dark[: MIN_PIXELS - 1]})
    assert few.offset is None and f"under {MIN_PIXELS:,}" in few.words


def test_pixels_that_speak_overrule_the_metadata_and_both_are_kept() -> None:
    """earth-search#71: the flag false on harmonised COGs. The pixels decide, the record
    keeps both readings and which won; silent pixels leave the metadata standing."""
    metadata = SceneMetadata(**ES_FLAGGED, offset_applied=False)
    found = decide(Path("item.json"), metadata, None, DARK)
    assert set(found.offsets.values()) == {0} and found.won == "pixels" and found.disputed
    tags = found.tags()
    assert tags["radiometry_metadata"].startswith("DN -1000 (earthsearch:boa_offset_applied")
    assert tags["radiometry_pixels"] == "DN +0: dark" and tags["radiometry_won"] == "pixels"
    assert tags["radiometry"].startswith("DN +0 (the scene's pixels, overruling the metadata's")
    stands = decide(Path("item.json"), metadata, None, SILENT)
    assert set(stands.offsets.values()) == {-1000} and stands.won == "metadata"
    assert not stands.disputed and stands.tags()["radiometry_pixels"] == "silent: bright"
    agree = decide(Path("item.json"), SceneMetadata(**ES_FLAGGED, offset_applied=True), None, DARK)
    assert agree.won == "metadata" and not agree.disputed


def test_boa_offset_decides_outright_and_is_refused_only_against_both() -> None:
    metadata = SceneMetadata(**ES_FLAGGED, offset_applied=False)  # says -1000
    with pytest.raises(RadiometryError, match=r"--boa-offset 0 contradicts its metadata"):
        decide(Path("item.json"), metadata, 0, SILENT)
    backed = decide(Path("item.json"), metadata, 0, DARK)  # the pixels say the same
    assert backed.won == "--boa-offset" and set(backed.offsets.values()) == {0}
    untagged = SceneMetadata(bands=BANDS)
    outright = decide(Path("x.tif"), untagged, -1000, DARK)  # the user decides; disputed
    assert set(outright.offsets.values()) == {-1000} and outright.disputed


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_values_are_refused_without_advising_boa_offset(dtype: str) -> None:
    """D02: reflectance 0-1 as float was read as DN; the refusal advised --boa-offset 0."""
    metadata = SceneMetadata(bands=BANDS, dtypes=dict.fromkeys(BANDS, dtype),
                             where={"B02": "stack.tif"})  # fmt: skip
    for given in (None, 0):
        with pytest.raises(RadiometryError) as refused:
            decide(Path("stack.tif"), metadata, given)
        message = str(refused.value)
        assert message.startswith(f"stack.tif: band B02 holds {dtype} values")
        assert "10,000 x surface reflectance" in message and "--boa-offset" not in message


def test_a_series_says_where_it_mixes_readings() -> None:
    """consistency.json's notes: each scene whose pixels spoke against the offset applied
    otherwise, and a product met twice with two offsets applied; none for agreement."""
    from bigearthnet.formats.region_folder import SceneEntry
    from bigearthnet.maps.region.products import radiometry_notes

    metadata = SceneMetadata(**ES_FLAGGED, offset_applied=False)
    overruled = decide(Path("a.json"), metadata, None, DARK).tags()
    agreed = decide(Path("b.json"), SceneMetadata(**ES_FLAGGED, offset_applied=True), None, DARK)
    safe = Radiometry(dict.fromkeys(BANDS, -1000), "BOA_ADD_OFFSET in MTD_MSIL2A.xml",
                      "DN -1000 (...)", "silent: bright").tags()  # fmt: skip
    entries = [
        SceneEntry("a.json", "39QTA", "2023-06-28", **overruled, product="P1"),
        SceneEntry("b.json", "39QTA", "2023-07-08", **agreed.tags(), product="P2"),
        SceneEntry("P2.SAFE", "T39QTA", "2023-07-08", **safe, product="P2"),
    ]
    notes = radiometry_notes(entries)
    assert len(notes) == 2
    assert notes[0].startswith("a.json: its pixels say DN +0: dark; its metadata say DN -1000")
    assert notes[1].startswith("product P2 met 2 times, read two ways: b.json: DN +0")
    assert radiometry_notes(entries[1:2]) == ()
