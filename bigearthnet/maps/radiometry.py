"""What a scene's stored values are, in BigEarthNet's terms: one rule, in one place.

BigEarthNet's digital numbers (DN) are 10,000 x surface reflectance, without offset. Products
of processing baseline 04.00 and later store 10,000 x reflectance + 1,000 instead; catalogs
disagree on whether that offset was already taken off (torchgeo#3224, earth-search#71), and
reprocessed old scenes carry it too, so an acquisition date decides nothing. Each scene's
offset is decided from its own metadata, which each form's reader gathers into
:class:`SceneMetadata` (:mod:`bigearthnet.maps.inputs`). The evidence, in order:

1. each band's scale and offset: an EOPF Zarr array's ``scale_factor``/``add_offset``, a
   STAC asset's ``raster:bands`` scale/offset, or a GeoTIFF band's GDAL scale/offset
   (reflectance = DN x scale + offset with scale 0.0001: offset -0.1 means DN - 1,000);
2. an L2A product folder's ``MTD_MSIL2A.xml``: ``BOA_ADD_OFFSET`` per band (-1000 from
   baseline 04.00); a product metadata without it is from an earlier baseline: 0;
3. the processing baseline the product states (``s2:processing_baseline``): 04.00 and
   later store DN + 1,000;
4. otherwise ``--boa-offset`` (0 or -1000), or exit 2 naming the scene and that option.

A ``--boa-offset`` that contradicts the metadata is refused too. The decision, in words, is
a tag of every scene map (:meth:`Radiometry.describe`), so a map made under another decision
is remade, and a column of the region's scene table and STAC items.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bigearthnet.core.errors import InputError

OFFSET_CHOICES = (0, -1000)  # --boa-offset: DN added to the stored values
REFLECTANCE_SCALE = 1e-4  # reflectance per DN, BigEarthNet's and every L2A product's
BOA_ADD_OFFSET = -1000  # DN added to stored values from processing baseline 04.00 on
OFFSET_BASELINE = (4, 0)  # the first processing baseline storing DN + 1,000
# The L2A product metadata numbers its bands 0..12 in this order (B10 has no L2A image).
PRODUCT_BAND_IDS = ("B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09",
                    "B10", "B11", "B12")  # fmt: skip

ScaleOffset = tuple[float, float] | None  # (scale, offset) of a band; None: not stated


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


@dataclass(frozen=True)
class SceneMetadata:
    """What a scene's files say of its values; each form's reader fills what it has."""

    bands: Sequence[str]  # the bands to decide for
    scales: Mapping[str, ScaleOffset] = field(default_factory=dict)  # band -> (scale, offset)
    scales_from: str = ""  # e.g. "raster:bands of the STAC item"
    where: Mapping[str, str] = field(default_factory=dict)  # band -> file/array, for errors
    product_offsets: Mapping[str, int] | None = None  # BOA_ADD_OFFSET per band
    product_metadata: str = ""  # the file they came from
    baseline: str | None = None  # processing baseline, "05.10"
    baseline_from: str = ""


def decide(scene: Path, metadata: SceneMetadata, given: int | None) -> Radiometry:
    """The offset of each band of ``scene`` from its ``metadata``, else from ``given``
    (``--boa-offset``); RadiometryError naming the scene when neither decides or when they
    disagree."""
    found = (
        _from_scales(scene, metadata) or _from_product(metadata) or _from_baseline(scene, metadata)
    )
    if found is None:
        if given is None:
            raise RadiometryError(
                f"{scene}: its metadata say nothing of the reflectance offset (no scale/"
                "offset, no BOA_ADD_OFFSET, no processing baseline): give --boa-offset 0 (DN "
                "= 10,000 x reflectance) or --boa-offset -1000 (DN + 1,000: baseline 04.00 on)"
            )
        return Radiometry(dict.fromkeys(metadata.bands, given), "--boa-offset")
    if given is not None and set(found.offsets.values()) != {given}:
        raise RadiometryError(
            f"{scene}: --boa-offset {given} contradicts its metadata ({found.describe()})"
        )
    return found


def _from_scales(scene: Path, metadata: SceneMetadata) -> Radiometry | None:
    """Each band's scale/offset; None when no band states any (GDAL's 1 and 0 state none)."""
    pairs = {band: metadata.scales.get(band) for band in metadata.bands}
    unset = {band for band, pair in pairs.items() if pair is None or pair == (1.0, 0.0)}
    if len(unset) == len(pairs):
        return None
    if unset:
        raise RadiometryError(
            f"{scene}: band(s) {', '.join(sorted(unset))} carry no scale/offset, the others "
            f"do ({metadata.scales_from})"
        )
    offsets = {}
    for band, pair in pairs.items():
        scale, offset = pair  # type: ignore[misc]  # none is unset here
        where = metadata.where.get(band, str(scene))
        if not math.isclose(scale, REFLECTANCE_SCALE, rel_tol=1e-6):
            raise RadiometryError(
                f"{where}: band {band} has scale {scale:g}, not reflectance per DN "
                f"({REFLECTANCE_SCALE:g})"
            )
        if not math.isfinite(offset):
            raise RadiometryError(f"{where}: band {band} has offset {offset}")
        offsets[band] = round(offset / REFLECTANCE_SCALE)
    return Radiometry(offsets, metadata.scales_from or "scale/offset of the bands")


def _from_product(metadata: SceneMetadata) -> Radiometry | None:
    found = metadata.product_offsets
    if found is None:
        return None
    name = Path(metadata.product_metadata).name
    if not found:  # a baseline before 04.00: values stored without offset
        return Radiometry(dict.fromkeys(metadata.bands, 0), f"{name} without BOA_ADD_OFFSET")
    missing = [band for band in metadata.bands if band not in found]
    if missing:
        raise RadiometryError(
            f"{metadata.product_metadata}: no BOA_ADD_OFFSET of band(s) {', '.join(missing)}"
        )
    return Radiometry({b: found[b] for b in metadata.bands}, f"BOA_ADD_OFFSET in {name}")


def _from_baseline(scene: Path, metadata: SceneMetadata) -> Radiometry | None:
    if metadata.baseline is None:
        return None
    match = re.fullmatch(r"[Nn]?(\d{1,2})\.?(\d{2})", metadata.baseline.strip())
    if match is None:
        raise RadiometryError(
            f"{scene}: processing baseline {metadata.baseline!r} ({metadata.baseline_from}) "
            "is not a version like 05.10: give --boa-offset"
        )
    version = (int(match.group(1)), int(match.group(2)))
    offset = BOA_ADD_OFFSET if version >= OFFSET_BASELINE else 0
    evidence = f"processing baseline {version[0]:02d}.{version[1]:02d} ({metadata.baseline_from})"
    return Radiometry(dict.fromkeys(metadata.bands, offset), evidence)


def read_product_metadata(path: Path) -> tuple[dict[str, int], str | None]:
    """``MTD_MSIL2A.xml`` -> (BOA_ADD_OFFSET per band, empty before baseline 04.00; the
    PROCESSING_BASELINE it states)."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as err:
        raise RadiometryError(f"{path}: unreadable product metadata ({err})") from None
    offsets = {}
    for element in root.iter("BOA_ADD_OFFSET"):
        band_id = int(element.get("band_id", "-1"))
        if 0 <= band_id < len(PRODUCT_BAND_IDS):
            offsets[PRODUCT_BAND_IDS[band_id]] = int(float(element.text or 0))
    baseline = next((e.text for e in root.iter("PROCESSING_BASELINE") if e.text), None)
    return offsets, baseline
