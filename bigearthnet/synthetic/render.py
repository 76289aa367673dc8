"""Synthetic patches: the labelling rule and the rendering of one patch's 12 bands.

The labelling rule (identical for every archive, whatever the seed):

* every 43-class has a fixed 12-band reflectance signature (``class_signatures()``), drawn once
  from a fixed internal RNG as a max-min-distance subset of random spectra in 100..5000, so
  any two differ by > 5,000 DN; a 19-class uses the signature of its first 43-class source;
* a patch holds 1-3 classes; its 120x120 field is cut into axis-aligned rectangles on the
  60 m grid (every region covers >= 12.5 % of the patch) and each region is filled with its
  class signature times a smooth brightness texture (+-~10 %), plus sensor noise;
* the labels are exactly the classes of the regions, so all present classes have a meaningful
  area (>= 10 %). v1 draws from the 43 classes that survive in the 19-class map, sometimes
  adding a class dropped from it (e.g. roads) as an extra region; v2 draws from the 19 classes;
* the 20 m and 60 m bands are the 2x2 and 6x6 block means of the 10 m field (then noise at
  native resolution), as a real sensor would see them;
* Sentinel-1 (``render_s1``): every class also has a fixed VV/VH backscatter in dB
  (``class_s1_signatures()``, VV in -22..-4 dB, VH 4-10 dB below it); the same regions are
  filled with it plus a smooth +-1 dB texture and the speckle of a 16-look image
  (10 log10 of a unit-mean gamma variate, std ~1.1 dB), float32 dB on the 10 m grid.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from bigearthnet.core.constants import (
    BAND_NATIVE_SIZE,
    BANDS,
    CLASSES_19,
    CLASSES_43,
    MAP_43_TO_19,
    PATCH_SIZE,
)
from bigearthnet.synthetic.landscape import Parcel

# Changing any of these changes the labelling rule of every archive: don't.
_SIGNATURE_SEED = 20_190_617
_SIGNATURE_POOL = 1000
_SIGNATURE_RANGE = (100.0, 5000.0)

_CELL = 6  # one 60 m pixel in 10 m pixels: region borders snap to it, so no 60 m pixel mixes
_GRID = PATCH_SIZE // _CELL  # 20 cells per side
_TEXTURE_KNOTS = 7  # control points per side of the smooth brightness texture
_TEXTURE_GAIN = 0.1  # interpolated N(0, 1) knots have std ~0.6, so about +-6 % brightness
_TEXTURE_CLIP = 0.12
_NOISE_REL = 0.015  # sensor noise: relative part ...
_NOISE_ABS = 12.0  # ... plus a floor in DN

_S1_SEED = 20_170_613
_S1_VV_RANGE = (-22.0, -4.0)  # dB
_S1_VH_BELOW = (4.0, 10.0)  # VH is this much below VV (dB)
_S1_LOOKS = 16.0
_S1_TEXTURE_DB = 1.0

# Bright, flat overlays for the v2 snow / cloud patches (B01..B12 order); snow is dark in SWIR.
_SNOW = np.array([8200, 8600, 8500, 8300, 8200, 8000, 7800, 7600, 7400, 4200, 1100, 800], "f4")
_CLOUD = np.array([6200, 6400, 6300, 6500, 6600, 6600, 6600, 6700, 6600, 3800, 5200, 4300], "f4")


@dataclass(frozen=True)
class PatchJob:
    """Everything a worker needs to render and write one patch (picklable)."""

    index: int
    rel_dir: str
    prefix: str
    epsg: int
    ulx: int
    uly: int
    signature_rows: tuple[int, ...]  # rows of class_signatures(), one per region
    overlay: str | None  # "snow", "cloud" or None
    nodata: int | None
    metadata_json: str | None
    s1_dir: str | None = None  # the paired Sentinel-1 patch, when the archive has S1
    s1_prefix: str | None = None
    s1_metadata_json: str | None = None  # v1: the S1 labels JSON (pairs it with the S2 patch)
    # --difficulty realistic: each 19-class's true share of the patch, the month, the region
    truth: tuple[float, ...] | None = None
    month: int = 7
    region: int = 0
    parcels: tuple[Parcel, ...] | None = None  # realistic: the truth's parcels
    map_dir: str | None = None  # v2: the patch's Reference_Maps folder, relative to OUT


# --------------------------------------------------------------------------- the rule


@functools.cache
def signatures43() -> np.ndarray:
    rng = np.random.default_rng(_SIGNATURE_SEED)
    pool = rng.uniform(*_SIGNATURE_RANGE, size=(_SIGNATURE_POOL, len(BANDS)))
    # Greedy max-min selection keeps every pair of signatures far apart.
    chosen = [0]
    dist = np.linalg.norm(pool - pool[0], axis=1)
    while len(chosen) < len(CLASSES_43):
        j = int(np.argmax(dist))
        chosen.append(j)
        dist = np.minimum(dist, np.linalg.norm(pool - pool[j], axis=1))
    sig = np.rint(pool[chosen]).astype(np.float32)
    sig.setflags(write=False)
    return sig


def representative43() -> tuple[int, ...]:
    """For each 19-class, the 43-class whose signature it uses (its first source)."""
    return tuple(min(i for i, j in MAP_43_TO_19.items() if j == k) for k in range(len(CLASSES_19)))


def class_signatures(num_classes: int = 43) -> np.ndarray:
    """The fixed (num_classes, 12) float32 reflectance signatures, bands in BANDS order.

    ``num_classes`` is 43 or 19; row i belongs to CLASSES_43[i] or CLASSES_19[i]. A 19-class
    uses the signature of its first 43-class source. Identical for every archive.
    """
    if num_classes == 43:
        return signatures43().copy()
    if num_classes == 19:
        return signatures43()[list(representative43())].copy()
    raise ValueError(f"num_classes must be 43 or 19, got {num_classes}")


@functools.cache
def s1_signatures43() -> np.ndarray:
    """The fixed (43, 2) float32 VV/VH backscatter of the 43 classes, in dB."""
    rng = np.random.default_rng(_S1_SEED)
    vv = rng.uniform(*_S1_VV_RANGE, size=len(CLASSES_43))
    vh = vv - rng.uniform(*_S1_VH_BELOW, size=len(CLASSES_43))
    sig = np.stack([vv, vh], axis=1).astype(np.float32)
    sig.setflags(write=False)
    return sig


def class_s1_signatures(num_classes: int = 43) -> np.ndarray:
    """(num_classes, 2) VV/VH dB, rows as :func:`class_signatures`."""
    if num_classes == 43:
        return s1_signatures43().copy()
    if num_classes == 19:
        return s1_signatures43()[list(representative43())].copy()
    raise ValueError(f"num_classes must be 43 or 19, got {num_classes}")


# --------------------------------------------------------------------------- rendering


def region_cells(rng: np.random.Generator, k: int) -> np.ndarray:
    """(20, 20) map of region ids 0..k-1 on the 60 m grid; every region >= 12.5 % of the patch."""
    cells = np.zeros((_GRID, _GRID), dtype=np.intp)
    if k == 1:
        return cells
    vertical = bool(rng.integers(2))
    cut = int(rng.integers(4, 17) if k == 2 else rng.integers(6, 15))
    cells[:, cut:] = 1
    if k == 3:
        # Split the larger part across the other axis: >= 10 x 5 cells = 12.5 % each.
        second = int(rng.integers(5, 16))
        big = cells == (0 if cut >= _GRID // 2 else 1)
        rows = np.arange(_GRID)[:, None] >= second
        cells[big & np.broadcast_to(rows, cells.shape)] = 2
    return cells.T if vertical else cells


@functools.cache
def _texture_weights() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pos = np.linspace(0.0, _TEXTURE_KNOTS - 1.0, PATCH_SIZE)
    lo = np.minimum(pos.astype(np.intp), _TEXTURE_KNOTS - 2)
    frac = (pos - lo).astype(np.float32)
    return lo, lo + 1, frac


def _texture(rng: np.random.Generator) -> np.ndarray:
    """Smooth multiplicative brightness field around 1 (bilinear upsampling of a coarse grid)."""
    knots = rng.standard_normal((_TEXTURE_KNOTS, _TEXTURE_KNOTS), dtype=np.float32)
    lo, hi, frac = _texture_weights()
    # Elementwise interpolation (no BLAS) keeps results bit-identical across machines/threads.
    rows = knots[lo] * (1 - frac)[:, None] + knots[hi] * frac[:, None]
    field = rows[:, lo] * (1 - frac)[None, :] + rows[:, hi] * frac[None, :]
    return 1.0 + np.clip(field * _TEXTURE_GAIN, -_TEXTURE_CLIP, _TEXTURE_CLIP)


def block_mean(field: np.ndarray, factor: int) -> np.ndarray:
    n = field.shape[-1] // factor
    return field.reshape(n, factor, n, factor).mean(axis=(1, 3), dtype=np.float32)


@functools.cache
def _band_groups() -> tuple[tuple[int, tuple[int, ...]], ...]:
    """(native size, band indices) for each resolution, so bands render in vectorised groups."""
    sizes = sorted({BAND_NATIVE_SIZE[b] for b in BANDS}, reverse=True)
    return tuple(
        (size, tuple(i for i, b in enumerate(BANDS) if BAND_NATIVE_SIZE[b] == size))
        for size in sizes
    )


def render_patch(
    rng: np.random.Generator,
    signatures: np.ndarray,
    overlay: str | None = None,
    cells: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Render one patch from ``signatures`` (k, 12), one per region; returns band -> uint16 array.

    Region layout (unless given: ``cells``, drawn first from the same ``rng``), texture and
    noise come from ``rng``. The 20/60 m bands equal the 2x2/6x6
    block means of the 10 m field: the class map is constant inside a 60 m cell, so the block
    mean of (signature * texture) is signature * block-mean(texture), computed directly.
    """
    if cells is None:
        cells = region_cells(rng, len(signatures))
    base = np.asarray(signatures, dtype=np.float32)[cells]  # (20, 20, 12) per 60 m cell
    if overlay is not None:
        base = _apply_overlay(rng, base, _SNOW if overlay == "snow" else _CLOUD)
    texture = _texture(rng) * np.float32(rng.uniform(0.95, 1.05))
    out: dict[str, np.ndarray] = {}
    for size, idx in _band_groups():
        factor = PATCH_SIZE // size
        rep = size // _GRID
        tex = texture if factor == 1 else block_mean(texture, factor)
        signal = base[:, :, idx].transpose(2, 0, 1)
        if rep > 1:
            signal = signal.repeat(rep, axis=1).repeat(rep, axis=2)
        signal = signal * tex[None]
        noise = rng.standard_normal(signal.shape, dtype=np.float32)
        signal += noise * (signal * _NOISE_REL + _NOISE_ABS)
        # >= 1 so a v2 reader honouring nodata=0 never masks a real pixel.
        values = np.clip(np.rint(signal), 1, 65535).astype("<u2")
        for j, band_idx in enumerate(idx):
            out[BANDS[band_idx]] = values[j]
    return out


def _apply_overlay(rng: np.random.Generator, base: np.ndarray, bright: np.ndarray) -> np.ndarray:
    """Blend a bright snow/cloud rectangle (25-64 % of the patch) over the cell map."""
    h, w = int(rng.integers(10, 17)), int(rng.integers(10, 17))
    y, x = int(rng.integers(0, _GRID - h + 1)), int(rng.integers(0, _GRID - w + 1))
    base = base.copy()
    base[y : y + h, x : x + w] = 0.3 * base[y : y + h, x : x + w] + 0.7 * bright
    return base


def overlay_field(rng: np.random.Generator, field: np.ndarray, overlay: str) -> np.ndarray:
    """Blend a bright snow/cloud rectangle (25-72 % of the patch) over a (12, 120, 120)
    10 m field."""
    bright = (_SNOW if overlay == "snow" else _CLOUD)[:, None, None]
    h, w = int(rng.integers(60, 103)), int(rng.integers(60, 103))
    y, x = int(rng.integers(0, PATCH_SIZE - h + 1)), int(rng.integers(0, PATCH_SIZE - w + 1))
    field = field.copy()
    field[:, y : y + h, x : x + w] = 0.3 * field[:, y : y + h, x : x + w] + 0.7 * bright
    return field


def render_s1(rng: np.random.Generator, cells: np.ndarray, db: np.ndarray) -> dict[str, np.ndarray]:
    """VV and VH (float32 dB, 120 x 120) of the regions ``cells`` with the backscatter ``db``
    (k, 2), one row per region: class value + smooth texture + 16-look speckle."""
    base = np.asarray(db, dtype=np.float32)[cells]  # (20, 20, 2)
    rep = PATCH_SIZE // _GRID
    signal = base.repeat(rep, axis=0).repeat(rep, axis=1).transpose(2, 0, 1)
    texture_db = (_texture(rng) - 1.0) / _TEXTURE_CLIP * _S1_TEXTURE_DB
    speckle = rng.gamma(_S1_LOOKS, 1.0 / _S1_LOOKS, size=signal.shape).astype(np.float32)
    values = signal + texture_db[None] + np.float32(10.0) * np.log10(speckle)
    return {"VV": values[0].astype("<f4"), "VH": values[1].astype("<f4")}
