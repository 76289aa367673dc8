"""What a scene's stored values are, in BigEarthNet's terms: one rule, in one place.

BigEarthNet's digital numbers (DN) are 10,000 x surface reflectance, without offset. Products
of processing baseline 04.00 and later store 10,000 x reflectance + 1,000 instead; catalogs
disagree on whether that offset was already taken off, and reprocessed old scenes carry it
too, so an acquisition date decides nothing. Each scene's offset is decided from its own
metadata, in this order:

1. an L2A product folder's ``MTD_MSIL2A.xml``: ``BOA_ADD_OFFSET`` per band (-1000 from
   baseline 04.00); a product metadata without it is from an earlier baseline: 0;
2. band GeoTIFFs or a band stack: each band's GDAL scale and offset (reflectance = DN x
   scale + offset, scale 0.0001: ``gdal_edit.py -scale 0.0001 -offset -0.1`` says -1000);
3. otherwise ``--boa-offset`` (0 or -1000), or exit 2 naming the scene and that option.

A ``--boa-offset`` that contradicts the metadata is refused too. The decision, in words, is
a tag of every scene map (:func:`describe`), so a map made under another decision is remade.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core.errors import InputError

OFFSET_CHOICES = (0, -1000)  # --boa-offset: DN added to the stored values
REFLECTANCE_SCALE = 1e-4  # reflectance per DN, BigEarthNet's and every L2A product's
# The L2A product metadata numbers its bands 0..12 in this order (B10 has no L2A image).
PRODUCT_BAND_IDS = ("B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09",
                    "B10", "B11", "B12")  # fmt: skip


class RadiometryError(InputError):
    """A scene whose stored values cannot be turned into BigEarthNet's DN."""


@dataclass(frozen=True)
class Radiometry:
    """The DN to add to each band's stored values, and the evidence for it."""

    offsets: Mapping[str, int]
    evidence: str  # e.g. "BOA_ADD_OFFSET in MTD_MSIL2A.xml"

    def describe(self) -> str:
        """In words, for the scene map's tags and the region's scene table."""
        values = sorted(set(self.offsets.values()))
        shown = ", ".join(f"{v:+d}" for v in values) if values else "+0"
        return f"DN {shown} ({self.evidence})"


def decide(scene: Path, files: Mapping[str, tuple[Path, int]], given: int | None) -> Radiometry:
    """The offset of each band of ``files`` (band -> (file, 1-based index)) of ``scene``,
    from its metadata, else from ``given`` (``--boa-offset``); RadiometryError naming the
    scene when neither decides or they disagree."""
    found = _from_product(scene, files) or _from_band_tags(scene, files)
    if found is None:
        if given is None:
            raise RadiometryError(
                f"{scene}: its files say nothing of the reflectance offset (no "
                "MTD_MSIL2A.xml, no scale/offset on the bands): give --boa-offset 0 (DN = "
                "10,000 x reflectance) or --boa-offset -1000 (DN + 1,000: baseline 04.00 on)"
            )
        return Radiometry(dict.fromkeys(files, given), "--boa-offset")
    if given is not None and set(found.offsets.values()) != {given}:
        raise RadiometryError(
            f"{scene}: --boa-offset {given} contradicts its metadata ({found.describe()})"
        )
    return found


def _from_product(scene: Path, files: Mapping[str, tuple[Path, int]]) -> Radiometry | None:
    metadata = next(iter(sorted(scene.glob("MTD_MSIL2A.xml"))), None) if scene.is_dir() else None
    if metadata is None:
        return None
    try:
        root = ET.parse(metadata).getroot()
    except ET.ParseError as err:
        raise RadiometryError(f"{metadata}: unreadable product metadata ({err})") from None
    offsets = {}
    for element in root.iter("BOA_ADD_OFFSET"):
        band_id = int(element.get("band_id", "-1"))
        if 0 <= band_id < len(PRODUCT_BAND_IDS):
            offsets[PRODUCT_BAND_IDS[band_id]] = int(float(element.text or 0))
    if not offsets:  # a baseline before 04.00: values stored without offset
        return Radiometry(dict.fromkeys(files, 0), "MTD_MSIL2A.xml without BOA_ADD_OFFSET")
    missing = [band for band in files if band not in offsets]
    if missing:
        raise RadiometryError(f"{metadata}: no BOA_ADD_OFFSET of band(s) {', '.join(missing)}")
    return Radiometry({band: offsets[band] for band in files}, "BOA_ADD_OFFSET in MTD_MSIL2A.xml")


def _from_band_tags(scene: Path, files: Mapping[str, tuple[Path, int]]) -> Radiometry | None:
    """Each band's GDAL scale/offset; None when no band has any (GDAL reads 1 and 0)."""
    import rasterio

    pairs = {}
    for band, (file, index) in files.items():
        try:
            with rasterio.open(file) as src:
                pairs[band] = (src.scales[index - 1], src.offsets[index - 1])
        except rasterio.errors.RasterioIOError as err:
            raise RadiometryError(f"{file}: cannot read ({err})") from None
    unset = {band for band, pair in pairs.items() if pair == (1.0, 0.0)}
    if len(unset) == len(pairs):
        return None
    if unset:
        raise RadiometryError(
            f"{scene}: band(s) {', '.join(sorted(unset))} carry no scale/offset, the others do"
        )
    offsets = {}
    for band, (scale, offset) in pairs.items():
        if not math.isclose(scale, REFLECTANCE_SCALE, rel_tol=1e-6):
            raise RadiometryError(
                f"{files[band][0]}: band {band} has scale {scale:g}, not reflectance per DN "
                f"({REFLECTANCE_SCALE:g})"
            )
        offsets[band] = round(offset / REFLECTANCE_SCALE)
    return Radiometry(offsets, "scale/offset of the bands")
