"""What a scene's stored values are, in BigEarthNet's terms: one rule, in one place.

BigEarthNet's digital numbers (DN) are 10,000 x surface reflectance, without offset, stored as
integers. Products of processing baseline 04.00 and later store 10,000 x reflectance + 1,000
instead; catalogs disagree on whether that offset was already taken off (torchgeo#3224,
earth-search#71), and reprocessed old scenes carry it too, so an acquisition date decides
nothing. Each scene's offset is decided from its own metadata, which each form's reader
gathers into :class:`SceneMetadata` (:mod:`bigearthnet.maps.inputs`), and checked against its
own pixels.

**Float values are refused** (whatever ``--boa-offset`` says): a float band holds reflectance
(0-1) or resampled DN, and no product declares which; the models take integer DN, so the
message says to convert (DN = round(10,000 x reflectance), uint16).

**The metadata's evidence**, in order:

1. Earth Search's ``earthsearch:boa_offset_applied`` (earlier ``sentinel:boa_offset_applied``)
   of its older ``sentinel-2-l2a`` items: true means its pipeline already took the offset off
   the COGs: 0, whatever their ``raster:bands`` say (they say -0.1 on those items too; the
   maintainer: the flag "is the truth", earth-search#9). False means the COGs hold what ESA
   stored: the processing baseline decides (4.), else the scale/offset (2.);
2. each band's scale and offset: an EOPF Zarr array's ``scale_factor``/``add_offset``, a
   STAC asset's ``raster:scale``/``raster:offset`` (raster extension v2, CDSE) or
   ``raster:bands`` scale/offset, or a GeoTIFF band's GDAL scale/offset (reflectance = DN x
   scale + offset with scale 0.0001: offset -0.1 means DN - 1,000);
3. an L2A product folder's ``MTD_MSIL2A.xml``: ``BOA_ADD_OFFSET`` per band (-1000 from
   baseline 04.00); a product metadata without it is from an earlier baseline: 0;
4. the processing baseline the product states (``s2:processing_baseline``, CDSE's
   ``processing:version``): 04.00 and later store DN + 1,000;
5. otherwise ``--boa-offset`` (0 or -1000), or exit 2 naming the scene and that option.

**The pixels' consent.** The flag itself is wrong on some items (earth-search#71, #66,
cirrus-earth-search#33: false on COGs already harmonised), so every decision is checked
against the scene's own valid, cloud-free pixels (nodata and, with SCL, clouds, shadows and
snow excluded, as :class:`~bigearthnet.maps.scene.input.Strip` says): the stored values of
B02 and B04 in a sparse grid of :data:`SAMPLE_GRID` x :data:`SAMPLE_GRID` blocks of 120 x 120
px spread over the area mapped (a few per cent of a tile's pixels, read at full resolution
through the form's own readers). The statistic is the :data:`PERCENTILE` st percentile of each
band's stored values:

* dark targets (water, vegetation in red, shadow) read far below 1,000 DN in a harmonised
  product: B02 200-500 and B04 100-400 over vegetation, 100-500 over water. A product still
  carrying the +1,000 stores reflectance -0.1 as DN 0, and L2A reflectance below -0.04 is an
  artefact of a few pixels, never 1 % of a scene: its 1st percentile stays above ~900. So a
  1st percentile of B02 or B04 below :data:`HARMONISED_BELOW` (600, reflectance -0.04 under
  the +1,000) proves the values harmonised: **the pixels say DN +0**;
* otherwise the pixels are **silent**: a scene without dark targets (snow, desert, bright
  urban; clouds, which only brighten) reads the same as a dark one storing +1,000, so they
  never vote for the +1,000. Fewer than :data:`MIN_PIXELS` valid pixels sampled (a tiny
  bbox, a scene under cloud) is silent too.

Pixels that speak and disagree with the metadata decide (every band's offset 0; the pixels'
reading is one-sided, so this happens only to a metadata decision of -1000); silent pixels
leave the metadata standing. ``--boa-offset`` decides outright where the metadata are silent
or agree; one that contradicts the metadata is refused, unless the pixels say the same as it.
:class:`Radiometry` keeps the metadata's reading, the pixels' and which one won: the tags of
every scene map (:meth:`Radiometry.tags`, so a map made under another decision is remade), the
region's scene table and its STAC items.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from bigearthnet.core.errors import InputError
from bigearthnet.formats.s2_layouts import (
    BOA_ADD_OFFSET,
    OFFSET_BASELINE,
    PRODUCT_BAND_IDS,
    REFLECTANCE_SCALE,
)

OFFSET_CHOICES = (0, -1000)  # --boa-offset: DN added to the stored values
# The pixels' consent (module docstring).
PIXEL_BANDS = ("B02", "B04")
PERCENTILE = 1.0  # of each band's valid stored values
HARMONISED_BELOW = 600  # stored DN: a percentile below it cannot carry the +1,000
MIN_PIXELS = 20_000  # valid pixels per band the pixels need to speak (2 km²)
SAMPLE_GRID = 3  # blocks per axis of the sample
# Which reading decided: Radiometry.won.
METADATA, PIXELS, GIVEN = "metadata", "pixels", "--boa-offset"
TAGS = ("radiometry", "radiometry_metadata", "radiometry_pixels", "radiometry_won")

ScaleOffset = tuple[float, float] | None  # (scale, offset) of a band; None: not stated


class RadiometryError(InputError):
    """A scene whose stored values cannot be turned into BigEarthNet's DN."""


@dataclass(frozen=True)
class Radiometry:
    """The DN to add to each band's stored values, the evidence for it, and (once the pixels
    were read) the metadata's reading, the pixels' and which one won."""

    offsets: Mapping[str, int]
    evidence: str  # e.g. "BOA_ADD_OFFSET in MTD_MSIL2A.xml"
    metadata: str = ""  # the metadata's reading in words ("none": they say nothing)
    pixels: str = ""  # the pixels' reading in words ("DN +0: ...", "silent: ...")
    won: str = METADATA  # METADATA, PIXELS or GIVEN

    def describe(self) -> str:
        """In words, for the scene map's tags and the region's scene table."""
        values = sorted(set(self.offsets.values()))
        shown = ", ".join(f"{v:+d}" for v in values) if values else "+0"
        return f"DN {shown} ({self.evidence})"

    def tags(self) -> dict[str, str]:
        """Every reading and the winner (:data:`TAGS`): a scene map's tags."""
        return dict(zip(TAGS, (self.describe(), self.metadata, self.pixels, self.won)))

    @property
    def disputed(self) -> bool:
        return disputed(self.tags())


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
    dtypes: Mapping[str, str] = field(default_factory=dict)  # band -> stored dtype ("uint16")
    offset_applied: object = None  # earthsearch:boa_offset_applied as stated (True/False)
    offset_applied_from: str = ""  # e.g. "earthsearch:boa_offset_applied of the STAC item"
    product: str = ""  # the product's name, where the files state it


@dataclass(frozen=True)
class PixelReading:
    """What a scene's pixels say: ``offset`` 0 (the values carry no +1,000) or None
    (silent), and why, in words."""

    offset: int | None
    words: str


def from_metadata(scene: Path, metadata: SceneMetadata, given: int | None) -> Radiometry | None:
    """The offsets ``metadata`` decide (None: they say nothing, and ``given`` will decide);
    RadiometryError naming the scene for float values, malformed evidence, or neither
    metadata nor ``--boa-offset``."""
    _refuse_floats(scene, metadata)
    found = (
        _from_flag(scene, metadata)
        or _from_scales(scene, metadata)
        or _from_product(metadata)
        or _from_baseline(scene, metadata)
    )
    if found is None and given is None:
        raise RadiometryError(
            f"{scene}: its metadata say nothing of the reflectance offset (no scale/"
            "offset, no BOA_ADD_OFFSET, no processing baseline): give --boa-offset 0 (DN "
            "= 10,000 x reflectance) or --boa-offset -1000 (DN + 1,000: baseline 04.00 on)"
        )
    return found


def read_pixels(values: Mapping[str, np.ndarray]) -> PixelReading:
    """The pixels' reading from the valid stored values of :data:`PIXEL_BANDS` sampled
    (band -> 1-D array): DN +0 when a band's :data:`PERCENTILE` st percentile lies below
    :data:`HARMONISED_BELOW`, else silent (module docstring)."""
    sampled = min((v.size for v in values.values()), default=0)
    if sampled < MIN_PIXELS:
        return PixelReading(None, f"silent: {sampled:,} valid px sampled, under {MIN_PIXELS:,}")
    low = {band: float(np.percentile(v, PERCENTILE)) for band, v in values.items()}
    shown = ", ".join(f"{band} {value:,.0f}" for band, value in low.items())
    what = f"{PERCENTILE:g}st percentiles {shown} of {sampled:,} valid px"
    if min(low.values()) < HARMONISED_BELOW:
        return PixelReading(0, f"DN +0: {what}, below {HARMONISED_BELOW} (no +1,000)")
    return PixelReading(None, f"silent: {what}, none below {HARMONISED_BELOW} (no dark targets)")


def settle(
    scene: Path,
    found: Radiometry | None,
    pixels: PixelReading,
    given: int | None,
    bands: Sequence[str],
) -> Radiometry:
    """The offsets applied: the metadata's (``found``) unless the pixels speak against them;
    ``given`` (``--boa-offset``) outright, refused where it contradicts the metadata and the
    pixels do not back it."""
    said = found.describe() if found is not None else "none"
    if given is not None:
        if found is not None and set(found.offsets.values()) == {given}:
            return replace(found, metadata=said, pixels=pixels.words, won=METADATA)
        if found is not None and pixels.offset != given:
            raise RadiometryError(
                f"{scene}: --boa-offset {given} contradicts its metadata ({said}; pixels "
                f"{pixels.words})"
            )
        return Radiometry(dict.fromkeys(bands, given), "--boa-offset", said, pixels.words, GIVEN)
    if found is None:  # from_metadata refuses this
        raise RadiometryError(f"{scene}: nothing decides the reflectance offset")
    if pixels.offset is None or set(found.offsets.values()) == {pixels.offset}:
        return replace(found, metadata=said, pixels=pixels.words, won=METADATA)
    overruling = f"the scene's pixels, overruling the metadata's {said}"
    return Radiometry(dict.fromkeys(bands, pixels.offset), overruling, said, pixels.words, PIXELS)


def disputed(tags: Mapping[str, str]) -> bool:
    """The pixels spoke against the metadata (and won), or against the ``--boa-offset``
    applied; from the readings' tags (:meth:`Radiometry.tags`, a scene map's)."""
    said = tags.get("radiometry_pixels", "")
    applied = tags.get("radiometry", "").split(" (")[0]
    return tags.get("radiometry_won") == PIXELS or (
        said.startswith("DN ") and said.split(":")[0] != applied
    )


def dispute(tags: Mapping[str, str]) -> str:
    """One line on a :func:`disputed` scene, from its tags."""
    return (
        f"its pixels say {tags.get('radiometry_pixels')}; its metadata say "
        f"{tags.get('radiometry_metadata')}; applied {tags.get('radiometry')}, as the "
        f"{tags.get('radiometry_won')} decide"
    )


def decide(
    scene: Path, metadata: SceneMetadata, given: int | None, pixels: PixelReading | None = None
) -> Radiometry:
    """:func:`from_metadata`, then :func:`settle` with ``pixels`` (default: not read)."""
    found = from_metadata(scene, metadata, given)
    return settle(scene, found, pixels or PixelReading(None, "not read"), given, metadata.bands)


def _refuse_floats(scene: Path, metadata: SceneMetadata) -> None:
    for band in metadata.bands:
        dtype = metadata.dtypes.get(band)
        if dtype is not None and np.dtype(dtype).kind not in "ui":
            raise RadiometryError(
                f"{metadata.where.get(band, scene)}: band {band} holds {dtype} values "
                "(reflectance 0-1?), not DN: maps take integer DN = 10,000 x surface "
                "reflectance; convert it (DN = round(10,000 x reflectance) as uint16, e.g. "
                "gdal_translate -ot UInt16 -scale 0 1 0 10000)"
            )


def _from_flag(scene: Path, metadata: SceneMetadata) -> Radiometry | None:
    """Earth Search's word that the offset was already taken off (module docstring, 1.)."""
    flag, named = metadata.offset_applied, metadata.offset_applied_from
    if flag is None:
        return None
    if isinstance(flag, str) and flag.strip().lower() in ("true", "false"):
        flag = flag.strip().lower() == "true"
    if not isinstance(flag, bool):
        raise RadiometryError(f"{scene}: {named} is {flag!r}, neither true nor false")
    if flag:
        return Radiometry(dict.fromkeys(metadata.bands, 0), f"{named}: true")
    found = _from_baseline(scene, metadata) or _from_scales(scene, metadata)
    return replace(found, evidence=f"{named}: false, {found.evidence}") if found else None


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
