"""BigEarthNet domain constants: the one home for bands, sizes, classes and the 43->19 map.

Every other module (and every test) reads these values from here. They follow
``shared/docs/bigearthnet-facts.md`` and the dataset's official tools:

* Sentinel-2 L2A bands, uint16 reflectance x 10^4, one band per GeoTIFF:
  10 m (120x120 px): B02 B03 B04 B08; 20 m (60x60 px): B05 B06 B07 B8A B11 B12;
  60 m (20x20 px): B01 B09. B10 does not exist in L2A products.
* Canonical band order (channels last): B01 B02 B03 B04 B05 B06 B07 B08 B8A B09 B11 B12.
* Sentinel-1 GRD backscatter, float32 sigma0 in dB, 120x120 px: VV and VH.
* Band configurations (``BAND_CONFIGS``): which channels a dataset holds, in order. The order
  is part of a model's identity (reBEN changed it between its model versions v0.1.1 and
  v0.2.0): ``s2`` the 12 bands above, ``s2-10`` reBEN's S2 order without the 60 m bands,
  ``s1`` VV, VH, ``all`` S1 then S2-10 as reBEN v0.2.0.
* 43 CORINE level-3 classes (v1 labels) and the 19-class nomenclature of Sumbul et al.
  2020 (v1 19-class era and v2), both in official index order, never sorted.
"""

from __future__ import annotations

import datetime as dt
import functools

import numpy as np

PATCH_SIZE = 120
"""Side length in pixels of a patch at 10 m, the size every band is upsampled to."""

PATCH_METRES = 1200
"""Ground side length of one patch in metres."""

S2_TILE_PX = 10980
"""Side length in 10 m pixels of a Sentinel-2 product: one MGRS tile of 109.8 km."""

BANDS: tuple[str, ...] = (
    "B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09", "B11", "B12",
)  # fmt: skip
"""Canonical channel order of every image array the project writes or reads."""

L1C_BANDS: tuple[str, ...] = (
    "B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09", "B10", "B11", "B12",
)  # fmt: skip
"""All 13 Sentinel-2 bands in ESA's order: L1C's images (and 13-band pretrained stems), and
the numbering (0..12) of the L2A product metadata, whose B10 has no image."""

S2_10_BANDS: tuple[str, ...] = (
    "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12",
)  # fmt: skip
"""reBEN's Sentinel-2 channels: no 60 m band, B8A after B08."""

S1_BANDS: tuple[str, ...] = ("VV", "VH")
"""Sentinel-1 polarisations, in reBEN's order."""

SENTINEL2_FIRST_DAY = dt.date(2015, 6, 23)
"""Sentinel-2A's launch: no scene is older (a scene dated before it is a typo)."""

BAND_CONFIGS: dict[str, tuple[str, ...]] = {
    "s2": BANDS,
    "s2-10": S2_10_BANDS,
    "s1": S1_BANDS,
    "all": S1_BANDS + S2_10_BANDS,  # reBEN v0.2.0: VV, VH first
}
"""Band configuration name -> channel names in order (``bigearthnet-preprocess --bands``)."""

DEFAULT_BAND_CONFIG = "s2"


def band_config_name(bands: tuple[str, ...] | list[str]) -> str | None:
    """The configuration whose channels are ``bands`` in this order; None for no known one."""
    for name, channels in BAND_CONFIGS.items():
        if tuple(bands) == channels:
            return name
    return None


def describe_bands(bands: tuple[str, ...] | list[str]) -> str:
    """'all (VV,VH,B02,...)': a band list for a one-line message."""
    name = band_config_name(bands)
    listed = ",".join(bands)
    return f"{name} ({listed})" if name else listed


RESAMPLING_METHODS: tuple[str, ...] = ("bilinear", "bicubic", "nearest")
"""How preprocessing upsamples the 20 m and 60 m bands to the 10 m grid (and scene maps
read a scene): recorded with the shards and with every model trained on them."""

BAND_RESOLUTION_M: dict[str, int] = {
    "B01": 60, "B02": 10, "B03": 10, "B04": 10, "B05": 20, "B06": 20,
    "B07": 20, "B08": 10, "B8A": 20, "B09": 60, "B11": 20, "B12": 20,
}  # fmt: skip
"""Ground sampling distance of each band in metres."""

GRID_M = 10
"""The finest band's pixel in metres: every band's grid is a whole multiple of it."""

NATIVE_RESOLUTIONS_M: tuple[int, ...] = (10, 20, 60)
"""The pixel sizes Sentinel-2 delivers bands (and L2A's scene classification, 20 m) at."""

SCL = "SCL"
SCL_RESOLUTION_M = 20
"""L2A's scene classification band (clouds, shadows, snow) and its pixel in metres."""


def resolution_factor(metres: float) -> int | None:
    """How many 10 m pixels a pixel of ``metres`` spans per side (10, 20, 60 m: 1, 2, 6): the
    one rule every scene form, and every writer of one, places a band on the 10 m grid by;
    None for a size no Sentinel-2 band has (rounded to the metre)."""
    res = round(metres)
    return res // GRID_M if res in NATIVE_RESOLUTIONS_M else None


def band_resolution_m(band: str) -> int:
    """The native pixel of ``band`` (one of :data:`BANDS`, or :data:`SCL`) in metres."""
    return SCL_RESOLUTION_M if band == SCL else BAND_RESOLUTION_M[band]


def band_factor(band: str) -> int:
    """The 10 m pixels per side of one native pixel of ``band`` (B02: 1, B05 and SCL: 2,
    B01: 6)."""
    factor = resolution_factor(band_resolution_m(band))
    assert factor is not None  # native resolutions only
    return factor


BAND_NATIVE_SIZE: dict[str, int] = {
    band: PATCH_METRES // res for band, res in BAND_RESOLUTION_M.items()
}
"""Native side length in pixels of each band's GeoTIFF: 120, 60 or 20."""


CLASSES_43: tuple[str, ...] = (
    "Continuous urban fabric",
    "Discontinuous urban fabric",
    "Industrial or commercial units",
    "Road and rail networks and associated land",
    "Port areas",
    "Airports",
    "Mineral extraction sites",
    "Dump sites",
    "Construction sites",
    "Green urban areas",
    "Sport and leisure facilities",
    "Non-irrigated arable land",
    "Permanently irrigated land",
    "Rice fields",
    "Vineyards",
    "Fruit trees and berry plantations",
    "Olive groves",
    "Pastures",
    "Annual crops associated with permanent crops",
    "Complex cultivation patterns",
    "Land principally occupied by agriculture, with significant areas of natural vegetation",
    "Agro-forestry areas",
    "Broad-leaved forest",
    "Coniferous forest",
    "Mixed forest",
    "Natural grassland",
    "Moors and heathland",
    "Sclerophyllous vegetation",
    "Transitional woodland/shrub",
    "Beaches, dunes, sands",
    "Bare rock",
    "Sparsely vegetated areas",
    "Burnt areas",
    "Inland marshes",
    "Peatbogs",
    "Salt marshes",
    "Salines",
    "Intertidal flats",
    "Water courses",
    "Water bodies",
    "Coastal lagoons",
    "Estuaries",
    "Sea and ocean",
)
"""The 43 CORINE level-3 classes of BigEarthNet v1, official index order 0..42."""

CLASSES_19: tuple[str, ...] = (
    "Urban fabric",
    "Industrial or commercial units",
    "Arable land",
    "Permanent crops",
    "Pastures",
    "Complex cultivation patterns",
    "Land principally occupied by agriculture, with significant areas of natural vegetation",
    "Agro-forestry areas",
    "Broad-leaved forest",
    "Coniferous forest",
    "Mixed forest",
    "Natural grassland and sparsely vegetated areas",
    "Moors, heathland and sclerophyllous vegetation",
    "Transitional woodland, shrub",
    "Beaches, dunes, sands",
    "Inland wetlands",
    "Coastal wetlands",
    "Inland waters",
    "Marine waters",
)
"""The 19-class nomenclature (Sumbul et al. 2020), official index order 0..18."""

_SOURCES_OF_19: tuple[tuple[int, ...], ...] = (
    (0, 1),
    (2,),
    (11, 12, 13),
    (14, 15, 16, 18),
    (17,),
    (19,),
    (20,),
    (21,),
    (22,),
    (23,),
    (24,),
    (25, 31),
    (26, 27),
    (28,),
    (29,),
    (33, 34),
    (35, 36),
    (38, 39),
    (40, 41, 42),
)

MAP_43_TO_19: dict[int, int] = {
    idx43: idx19 for idx19, sources in enumerate(_SOURCES_OF_19) for idx43 in sources
}
"""43-class index -> 19-class index. Classes 3-10, 30, 32 and 37 have no 19-class image."""

DROPPED_IN_19: tuple[int, ...] = tuple(i for i in range(43) if i not in MAP_43_TO_19)

CLC_CODES_43: tuple[int, ...] = (
    111, 112, 121, 122, 123, 124, 131, 132, 133, 141, 142,
    211, 212, 213, 221, 222, 223, 231, 241, 242, 243, 244,
    311, 312, 313, 321, 322, 323, 324, 331, 332, 333, 334,
    411, 412, 421, 422, 423,
    511, 512, 521, 522, 523,
)  # fmt: skip
"""CORINE Land Cover level-3 code of each 43-class index (reBEN's reference maps hold these
codes; 335, glaciers, is none of the 43)."""

NO_LABEL = 255
"""A per-pixel 19-class map's value for "no label": nodata (CORINE code 0), a code whose
class the 19-class nomenclature drops (roads, mines, bare rock ...) and any unknown code.
The value is stored in the shards and ignored by anything scoring pixels."""

CLC_TO_19: dict[int, int] = {CLC_CODES_43[idx43]: idx19 for idx43, idx19 in MAP_43_TO_19.items()}
"""CORINE level-3 code -> 19-class index, through the 43 classes; codes absent have none."""

CLASS_SETS: dict[int, tuple[str, ...]] = {19: CLASSES_19, 43: CLASSES_43}

# v1 statistics at native resolution (RSiM); only a fallback, the project computes its own
# on the upsampled train split and stores them in manifest.json.
FALLBACK_BAND_MEAN: dict[str, float] = {
    "B01": 340.77, "B02": 429.94, "B03": 614.22, "B04": 590.24, "B05": 950.68,
    "B06": 1792.46, "B07": 2075.47, "B08": 2218.95, "B8A": 2266.46, "B09": 2246.06,
    "B11": 1594.43, "B12": 1009.33,
}  # fmt: skip
FALLBACK_BAND_STD: dict[str, float] = {
    "B01": 554.81, "B02": 572.42, "B03": 582.88, "B04": 675.89, "B05": 729.90,
    "B06": 1096.01, "B07": 1273.45, "B08": 1365.46, "B8A": 1356.14, "B09": 1302.33,
    "B11": 1079.19, "B12": 818.87,
}  # fmt: skip
# Sentinel-1 in dB (reBEN's statistics over its training split); preprocessing stores them
# scaled (formats/shards.py) and the fallback is converted there too.
FALLBACK_S1_DB_MEAN: dict[str, float] = {"VV": -12.62, "VH": -19.29}
FALLBACK_S1_DB_STD: dict[str, float] = {"VV": 5.12, "VH": 5.46}

SPLITS: tuple[str, ...] = ("train", "val", "test")


def _map_matrix() -> np.ndarray:
    """(43, 19) 0/1 matrix: entry [i, j] is 1 when 43-class label i feeds 19-class label j."""
    matrix = np.zeros((43, 19), dtype=np.int32)
    for idx19, sources in enumerate(_SOURCES_OF_19):
        matrix[list(sources), idx19] = 1
    return matrix


_MAP_43_TO_19 = _map_matrix()


def labels43_to_19(labels43: np.ndarray) -> np.ndarray:
    """Map a (N, 43) multi-hot matrix to (N, 19): a 19-class label is on if any source is on."""
    # One integer product (counts of active sources) instead of a loop over the 19 classes.
    counts = (np.asarray(labels43) != 0).astype(np.int32) @ _MAP_43_TO_19
    return (counts > 0).astype(np.uint8)


@functools.cache
def _clc_lookup() -> np.ndarray:
    table = np.full(2**16, NO_LABEL, dtype=np.uint8)
    for code, idx19 in CLC_TO_19.items():
        table[code] = idx19
    table.setflags(write=False)
    return table


@functools.cache
def _clc_known() -> np.ndarray:
    table = np.zeros(2**16, dtype=bool)
    table[[*CLC_CODES_43, 335]] = True
    table.setflags(write=False)
    return table


def _through(table: np.ndarray, codes: np.ndarray, outside) -> np.ndarray:
    """``table[codes]`` for any integer array; ``outside`` where a code is beyond it."""
    codes = np.asarray(codes)
    if codes.dtype in (np.uint8, np.uint16):  # every value indexes the table
        return table[codes]
    inside = (codes >= 0) & (codes < len(table))
    return np.where(inside, table[np.where(inside, codes, 0).astype(np.intp)], outside)


def corine_to_19(codes: np.ndarray) -> np.ndarray:
    """CORINE level-3 codes (any integer array) -> uint8 19-class indices, :data:`NO_LABEL`
    for 0, for codes without a 19-class meaning and for anything unknown (negative, > 65535)."""
    return _through(_clc_lookup(), codes, NO_LABEL).astype(np.uint8, copy=False)


def is_corine_code(codes: np.ndarray) -> np.ndarray:
    """Boolean array: which values are CORINE level-3 codes (the 43 and 335, glaciers)."""
    return _through(_clc_known(), codes, False).astype(bool, copy=False)


def multi_hot(names: list[str] | tuple[str, ...], classes: tuple[str, ...]) -> np.ndarray:
    """Multi-hot uint8 vector over ``classes`` for the given class names.

    Raises KeyError whose single argument is the first unknown class name.
    """
    index = _class_index(classes)
    vec = np.zeros(len(classes), dtype=np.uint8)
    for name in names:
        if name not in index:
            raise KeyError(name)  # the caller words the message; args[0] is the name
        vec[index[name]] = 1
    return vec


@functools.cache
def _class_index(classes: tuple[str, ...]) -> dict[str, int]:
    return {name: i for i, name in enumerate(classes)}


# Official CORINE Land Cover legend colours of the 43 level-3 classes (RGB), index order.
CLC_COLOURS_43: tuple[tuple[int, int, int], ...] = (
    (230, 0, 77), (255, 0, 0), (204, 77, 242), (204, 0, 0), (230, 204, 204),
    (230, 204, 230), (166, 0, 204), (166, 77, 0), (255, 77, 255), (255, 166, 255),
    (255, 230, 255), (255, 255, 168), (255, 255, 0), (230, 230, 0), (230, 128, 0),
    (242, 166, 77), (230, 166, 0), (230, 230, 77), (255, 230, 166), (255, 230, 77),
    (230, 204, 77), (242, 204, 166), (128, 255, 0), (0, 166, 0), (77, 255, 0),
    (204, 242, 77), (166, 255, 128), (166, 230, 77), (166, 242, 0), (230, 230, 230),
    (204, 204, 204), (204, 255, 204), (0, 0, 0), (166, 166, 255), (77, 77, 255),
    (204, 204, 255), (230, 230, 255), (166, 166, 230), (0, 204, 242), (128, 242, 230),
    (0, 255, 166), (166, 255, 230), (230, 242, 255),
)  # fmt: skip


def class_colours(num_classes: int) -> np.ndarray:
    """(C, 3) uint8 fixed colours; a 19-class gets the colour of its first 43-class source."""
    if num_classes == 43:
        return np.asarray(CLC_COLOURS_43, dtype=np.uint8)
    first_source: dict[int, int] = {}
    for idx43, idx19 in sorted(MAP_43_TO_19.items()):
        first_source.setdefault(idx19, idx43)
    return np.asarray([CLC_COLOURS_43[first_source[c]] for c in range(19)], dtype=np.uint8)


def hex_colour(rgb) -> str:
    """A colour (0..255 red, green, blue; more values, such as alpha, ignored) as an
    ``rrggbb`` hex string (no ``#``): the one formatter of colours for pages, styles and
    STAC."""
    return "".join(f"{int(v):02x}" for v in tuple(rgb)[:3])


def class_hex_colours(num_classes: int) -> list[str]:
    """The colours of :func:`class_colours` as ``rrggbb`` hex strings (no ``#``)."""
    return [hex_colour(rgb) for rgb in class_colours(num_classes)]
