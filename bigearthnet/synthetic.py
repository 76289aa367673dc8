"""Synthetic BigEarthNet archives in the real on-disk formats, with a learnable labelling rule.

``generate_archive`` (CLI: ``bigearthnet-synth``) writes small archives that readers,
preprocessing, training and benchmarks can consume exactly like the real data:

* ``v1``: ``OUT/<name>/<name>_<BAND>.tif`` for the 12 L2A bands plus
  ``<name>_labels_metadata.json`` (43-class labels, UTM corner coordinates, WKT projection,
  L1C tile source, acquisition date). Names look like ``S2A_MSIL2A_20170617T113321_36_85``;
  some drop the hour's leading zero (``..._20180510T94033_19_86``) as the real archive does.
* ``v2`` (reBEN): ``OUT/BigEarthNet-S2/<tile>/<patch_id>/<patch_id>_<BAND>.tif`` (nodata=0),
  ``OUT/metadata.parquet`` (19-class labels, 60/20/20 train/validation/test split, country,
  S1 and v1 names, snow/cloud flags) and ``OUT/metadata_for_patches_with_snow_cloud_or_shadow
  .parquet`` for the ~7 % of patches that are snowy or cloudy (on disk, not in the first file).

GeoTIFFs are uint16, one band each, uncompressed and striped, 120/60/20 px for the 10/20/60 m
bands, in a WGS 84 / UTM north CRS (EPSG:326zz, several zones per archive) with a shared
upper-left corner. Patches of one Sentinel-2 tile lie on its 1.2 km grid:
``ulx = tile_x0 + col * 1200``, ``uly = tile_y0 - row * 1200``.

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
  native resolution), as a real sensor would see them.

The archive seed only decides tiles, names, dates, which patches get which classes, region
shapes, textures and noise. Same seed -> byte-identical GeoTIFFs and identical metadata,
whatever ``workers`` is. Output is written to a temporary directory beside OUT and renamed at
the end, so an interrupted run never leaves a complete-looking OUT.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import math
import multiprocessing
import os
import shutil
import struct
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from bigearthnet.constants import (
    BAND_NATIVE_SIZE,
    BANDS,
    CLASSES_19,
    CLASSES_43,
    DROPPED_IN_19,
    MAP_43_TO_19,
    PATCH_METRES,
    PATCH_SIZE,
)
from bigearthnet.util import OneLineParser

LAYOUTS: tuple[str, ...] = ("v1", "v2")
V2_S2_DIR = "BigEarthNet-S2"
V2_METADATA = "metadata.parquet"
V2_SNOW_CLOUD_METADATA = "metadata_for_patches_with_snow_cloud_or_shadow.parquet"
V2_SPLITS: tuple[str, ...] = ("train", "validation", "test")
V2_COLUMNS: tuple[str, ...] = (
    "patch_id",
    "labels",
    "split",
    "country",
    "s1_name",
    "s2v1_name",
    "contains_seasonal_snow",
    "contains_cloud_or_shadow",
)

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
_SNOW_CLOUD_FRACTION = 0.07
_DROPPED_EXTRA_PROB = 0.12
_PATCHES_PER_TILE = 100
_TILE_GRID = 90  # a 109.8 km Sentinel-2 tile holds ~90 x 90 patches of 1.2 km

# Bright, flat overlays for the v2 snow / cloud patches (B01..B12 order); snow is dark in SWIR.
_SNOW = np.array([8200, 8600, 8500, 8300, 8200, 8000, 7800, 7600, 7400, 4200, 1100, 800], "f4")
_CLOUD = np.array([6200, 6400, 6300, 6500, 6600, 6600, 6600, 6700, 6600, 3800, 5200, 4300], "f4")

# (UTM zone, country, range of tile_y0 in 100 km) - plausible places of the BigEarthNet countries.
_SITES: tuple[tuple[int, str, int, int], ...] = (
    (29, "Portugal", 41, 46),
    (29, "Ireland", 57, 61),
    (31, "Belgium", 56, 57),
    (32, "Luxembourg", 55, 55),
    (32, "Switzerland", 51, 53),
    (33, "Austria", 52, 54),
    (34, "Serbia", 48, 50),
    (34, "Kosovo", 47, 47),
    (34, "Lithuania", 61, 62),
    (35, "Finland", 67, 77),
    (35, "Lithuania", 61, 62),
)
_ZONES: tuple[int, ...] = tuple(sorted({site[0] for site in _SITES}))
_TILE_X0: tuple[int, ...] = (300000, 399960, 499980, 600000, 699960)  # Sentinel-2 tile corners
_LAT_BANDS = "CDEFGHJKLMNPQRSTUVWX"
_MGRS_COLS = "ABCDEFGHJKLMNPQRSTUVWXYZ"
_MGRS_ROWS = "ABCDEFGHJKLMNPQRSTUV"
_FIRST_DAY = dt.datetime(2017, 6, 1)  # BigEarthNet acquisitions span June 2017 - May 2018
_DAYS = 365


@dataclass(frozen=True)
class SyntheticPatch:
    """One generated patch: its name (v1 name or v2 patch_id), labels and location."""

    name: str
    labels: tuple[str, ...]  # 43-class names (v1) or 19-class names (v2)
    split: str | None  # train/validation/test for v2, None for v1
    crs: str  # "EPSG:326zz"
    ulx: int
    uly: int
    snow_or_cloud: bool = False  # v2 only: listed in the snow/cloud parquet, not metadata.parquet


@dataclass(frozen=True)
class _Tile:
    mission: str
    when: dt.datetime
    strip_hour: bool
    zone: int
    mgrs: str
    orbit: int
    x0: int
    y0: int
    country: str
    processed: dt.datetime
    s1_mission: str
    s1_when: dt.datetime


@dataclass(frozen=True)
class _Job:
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


# --------------------------------------------------------------------------- the rule


@functools.cache
def _signatures43() -> np.ndarray:
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


def _representative43() -> tuple[int, ...]:
    """For each 19-class, the 43-class whose signature it uses (its first source)."""
    return tuple(min(i for i, j in MAP_43_TO_19.items() if j == k) for k in range(len(CLASSES_19)))


def class_signatures(num_classes: int = 43) -> np.ndarray:
    """The fixed (num_classes, 12) float32 reflectance signatures, bands in BANDS order.

    ``num_classes`` is 43 or 19; row i belongs to CLASSES_43[i] or CLASSES_19[i]. A 19-class
    uses the signature of its first 43-class source. Identical for every archive.
    """
    if num_classes == 43:
        return _signatures43().copy()
    if num_classes == 19:
        return _signatures43()[list(_representative43())].copy()
    raise ValueError(f"num_classes must be 43 or 19, got {num_classes}")


# --------------------------------------------------------------------------- rendering


def _region_cells(rng: np.random.Generator, k: int) -> np.ndarray:
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


def _block_mean(field: np.ndarray, factor: int) -> np.ndarray:
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
) -> dict[str, np.ndarray]:
    """Render one patch from ``signatures`` (k, 12), one per region; returns band -> uint16 array.

    Region layout, texture and noise come from ``rng``. The 20/60 m bands equal the 2x2/6x6
    block means of the 10 m field: the class map is constant inside a 60 m cell, so the block
    mean of (signature * texture) is signature * block-mean(texture), computed directly.
    """
    cells = _region_cells(rng, len(signatures))
    base = np.asarray(signatures, dtype=np.float32)[cells]  # (20, 20, 12) per 60 m cell
    if overlay is not None:
        base = _apply_overlay(rng, base, _SNOW if overlay == "snow" else _CLOUD)
    texture = _texture(rng) * np.float32(rng.uniform(0.95, 1.05))
    out: dict[str, np.ndarray] = {}
    for size, idx in _band_groups():
        factor = PATCH_SIZE // size
        rep = size // _GRID
        tex = texture if factor == 1 else _block_mean(texture, factor)
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


# --------------------------------------------------------------------------- GeoTIFF writing


@dataclass(frozen=True)
class _TiffTemplate:
    header: bytes  # everything before the pixel data, as GDAL writes it
    tiepoint_at: int  # byte offset of the tiepoint's X (Y follows)


_PROBE_X, _PROBE_Y = 500000.0, 5000040.0


@functools.cache
def _tiff_template(size: int, epsg: int, nodata: int | None) -> _TiffTemplate | None:
    """GDAL's own header for a size x size uint16 GeoTIFF, or None if its layout is unexpected.

    Opening 12 files a patch through GDAL costs ~15 ms; GDAL writes uncompressed strips right
    after a fixed-size header, so we let it write one file per (size, CRS, nodata), keep the
    header and afterwards only patch the corner coordinates and append the pixels.
    """
    import rasterio

    # GDAL pads an all-zero last strip to a full block (in /vsimem/ even any strip): write
    # ones to a real file to get the exact layout of a real band.
    with tempfile.TemporaryDirectory(prefix="bigearthnet-synth-") as tmp:
        path = os.path.join(tmp, "template.tif")
        with rasterio.open(path, "w", **_profile(size, epsg, _PROBE_X, _PROBE_Y, nodata)) as dst:
            dst.write(np.ones((size, size), dtype=np.uint16), 1)  # all-zero strips get padded
        with open(path, "rb") as fh:
            blob = fh.read()
    tags = _tiff_tags(blob)
    offsets, counts = tags.get(273), tags.get(279)
    tiepoint = tags.get(33922)
    if offsets is None or counts is None or tiepoint is None:
        return None
    data_at = offsets[0]
    contiguous = all(o == data_at + sum(counts[:i]) for i, o in enumerate(offsets))
    if not contiguous or data_at + size * size * 2 != len(blob) or sum(counts) != size * size * 2:
        return None
    # The tiepoint is 6 doubles (I, J, K, X, Y, Z); its offset is stored by the tag reader.
    values = struct.unpack_from("<6d", blob, tiepoint[0])
    if values[3:5] != (_PROBE_X, _PROBE_Y):
        return None
    return _TiffTemplate(header=blob[:data_at], tiepoint_at=tiepoint[0] + 24)


def _tiff_tags(blob: bytes) -> dict[int, list[int]]:
    """Strip offsets/byte counts (values) and tiepoint (file offset) of a little-endian TIFF."""
    if blob[:4] != b"II*\x00":
        return {}
    (ifd,) = struct.unpack_from("<I", blob, 4)
    (count,) = struct.unpack_from("<H", blob, ifd)
    tags: dict[int, list[int]] = {}
    for n in range(count):
        tag, typ, num, value = struct.unpack_from("<HHII", blob, ifd + 2 + 12 * n)
        if tag in (273, 279):
            fmt = {3: "H", 4: "I"}.get(typ)
            if fmt is None:
                return {}
            width = struct.calcsize(fmt)
            at = ifd + 2 + 12 * n + 8 if num * width <= 4 else value
            tags[tag] = list(struct.unpack_from(f"<{num}{fmt}", blob, at))
        elif tag == 33922 and typ == 12 and num == 6:
            tags[tag] = [value]
    return tags


def _profile(size: int, epsg: int, ulx: float, uly: float, nodata: int | None) -> dict:
    from rasterio.crs import CRS
    from rasterio.transform import Affine

    res = PATCH_METRES / size
    return {
        "driver": "GTiff",
        "width": size,
        "height": size,
        "count": 1,
        "dtype": "uint16",
        "crs": CRS.from_epsg(epsg),
        "transform": Affine(res, 0.0, ulx, 0.0, -res, uly),
        "nodata": nodata,
    }


def write_band(
    path: os.PathLike | str,
    data: np.ndarray,
    epsg: int,
    ulx: float,
    uly: float,
    nodata: int | None = None,
) -> None:
    """Write one uint16 band as GDAL would (uncompressed, striped), with its corner at ulx/uly."""
    data = np.ascontiguousarray(data, dtype="<u2")
    template = _tiff_template(data.shape[0], epsg, nodata)
    if template is None:  # unexpected GDAL layout: slower but always right
        import rasterio

        with rasterio.open(path, "w", **_profile(data.shape[0], epsg, ulx, uly, nodata)) as dst:
            dst.write(data, 1)
        return
    header = bytearray(template.header)
    struct.pack_into("<2d", header, template.tiepoint_at, float(ulx), float(uly))
    with open(path, "wb") as fh:
        fh.write(header)
        fh.write(data.tobytes())


def _write_jobs(root: str, seed: int, jobs: Sequence[_Job]) -> None:
    """Worker body: render and write a batch of patches."""
    sig43 = _signatures43()
    for job in jobs:
        rng = np.random.default_rng(np.random.SeedSequence([seed, 1, job.index]))
        bands = render_patch(rng, sig43[list(job.signature_rows)], job.overlay)
        folder = os.path.join(root, job.rel_dir)
        os.makedirs(folder)
        for band in BANDS:
            path = os.path.join(folder, f"{job.prefix}_{band}.tif")
            write_band(path, bands[band], job.epsg, job.ulx, job.uly, job.nodata)
        if job.metadata_json is not None:
            meta_path = os.path.join(folder, f"{job.prefix}_labels_metadata.json")
            with open(meta_path, "w", encoding="utf-8") as fh:
                fh.write(job.metadata_json)


# --------------------------------------------------------------------------- planning


def utm_wkt(zone: int) -> str:
    """WKT of WGS 84 / UTM zone <zone>N exactly as the v1 JSON files spell it."""
    meridian = 6 * zone - 183
    return (
        f'PROJCS["WGS 84 / UTM zone {zone}N",GEOGCS["WGS 84",DATUM["WGS_1984",'
        'SPHEROID["WGS 84",6378137,298.257223563,AUTHORITY["EPSG","7030"]],'
        'AUTHORITY["EPSG","6326"]],PRIMEM["Greenwich",0,AUTHORITY["EPSG","8901"]],'
        'UNIT["degree",0.0174532925199433,AUTHORITY["EPSG","9122"]],'
        'AXIS["Latitude",NORTH],AXIS["Longitude",EAST],AUTHORITY["EPSG","4326"]],'
        'PROJECTION["Transverse_Mercator"],PARAMETER["latitude_of_origin",0],'
        f'PARAMETER["central_meridian",{meridian}],PARAMETER["scale_factor",0.9996],'
        'PARAMETER["false_easting",500000],PARAMETER["false_northing",0],'
        'UNIT["metre",1,AUTHORITY["EPSG","9001"]],AXIS["Easting",EAST],AXIS["Northing",NORTH],'
        f'AUTHORITY["EPSG","326{zone:02d}"]]'
    )


def _stamp(when: dt.datetime, strip_hour: bool = False) -> str:
    """YYYYMMDDThhmmss; v1 names lost the hour's leading zero in some products (T94033)."""
    text = when.strftime("%Y%m%dT%H%M%S")
    return text[:9] + text[10:] if strip_hour and when.hour < 10 else text


def _plan_tiles(rng: np.random.Generator, num_tiles: int) -> list[_Tile]:
    zones = [int(z) for z in rng.permutation(_ZONES)]
    tiles: list[_Tile] = []
    names: set[tuple[str, str]] = set()
    while len(tiles) < num_tiles:
        i = len(tiles)
        zone = zones[i % len(zones)]  # consecutive tiles never share a zone
        sites = [s for s in _SITES if s[0] == zone]
        _, country, y_lo, y_hi = sites[int(rng.integers(len(sites)))]
        y0 = int(rng.integers(y_lo, y_hi + 1)) * 100_000 + 40
        strip_hour = i % 3 == 1  # some names lose the hour's leading zero, like the real ones
        hour = 9 if strip_hour else int(rng.integers(9, 12))
        when = _FIRST_DAY + dt.timedelta(
            days=int(rng.integers(_DAYS)),
            hours=hour,
            minutes=int(rng.integers(60)),
            seconds=int(rng.integers(60)),
        )
        mission = "S2A" if rng.random() < 0.5 else "S2B"
        if (mission, _stamp(when, strip_hour)) in names:
            continue  # patch names must be unique: draw this tile again
        names.add((mission, _stamp(when, strip_hour)))
        lat = (y0 - 60_000) / 110_900  # rough, only to pick the MGRS latitude band
        mgrs = (
            f"{zone:02d}{_LAT_BANDS[int((lat + 80) // 8)]}"
            f"{_MGRS_COLS[int(rng.integers(len(_MGRS_COLS)))]}"
            f"{_MGRS_ROWS[int(rng.integers(len(_MGRS_ROWS)))]}"
        )
        s1_when = when + dt.timedelta(
            days=int(rng.integers(-2, 3)),
            hours=int(rng.choice([-5, 7])),
            seconds=int(rng.integers(3600)),
        )
        tiles.append(
            _Tile(
                mission=mission,
                when=when,
                strip_hour=strip_hour,
                zone=zone,
                mgrs=mgrs,
                orbit=int(rng.integers(1, 144)),
                x0=int(rng.choice(_TILE_X0)),
                y0=y0,
                country=country,
                processed=when + dt.timedelta(seconds=int(rng.integers(60, 3 * 3600))),
                s1_mission="S1A" if rng.random() < 0.5 else "S1B",
                s1_when=s1_when,
            )
        )
    return tiles


@functools.cache
def _sources19() -> tuple[tuple[int, ...], ...]:
    return tuple(
        tuple(sorted(i for i, j in MAP_43_TO_19.items() if j == k)) for k in range(len(CLASSES_19))
    )


def _num_regions(rng: np.random.Generator) -> int:
    return int(rng.choice(3, p=(0.3, 0.4, 0.3))) + 1


def _draw_classes_v1(rng: np.random.Generator) -> tuple[int, ...]:
    """43-class indices, one per region; >= 1 of them survives in the 19-class map."""
    k = _num_regions(rng)
    with_dropped = k >= 2 and rng.random() < _DROPPED_EXTRA_PROB
    # Drawing the 19-class group first balances the 19 labels most experiments train on.
    groups = rng.choice(len(CLASSES_19), size=k - int(with_dropped), replace=False)
    classes = [int(rng.choice(_sources19()[g])) for g in groups]
    if with_dropped:
        classes.append(int(rng.choice(DROPPED_IN_19)))
    return tuple(classes)


def _draw_classes_v2(rng: np.random.Generator) -> tuple[int, ...]:
    """19-class indices, one per region."""
    return tuple(int(c) for c in rng.choice(len(CLASSES_19), size=_num_regions(rng), replace=False))


def _num_snow_cloud(num_patches: int) -> int:
    count = round(_SNOW_CLOUD_FRACTION * num_patches)
    return max(1, count) if num_patches >= 10 else min(count, num_patches - 1)


def _v2_splits(rng: np.random.Generator, num_patches: int) -> list[str]:
    """A random 60/20/20 train/validation/test assignment with exact counts."""
    n_train, n_val = round(0.6 * num_patches), round(0.2 * num_patches)
    ordered = ["train"] * n_train + ["validation"] * n_val
    ordered += ["test"] * (num_patches - len(ordered))
    return [ordered[i] for i in rng.permutation(num_patches)]


def _v1_metadata(tile: _Tile, labels: Sequence[str], ulx: int, uly: int) -> str:
    baseline = "N0205" if tile.when < dt.datetime(2017, 11, 1) else "N0206"
    meta = {
        "labels": list(labels),
        "coordinates": {
            "ulx": ulx,
            "uly": uly,
            "lrx": ulx + PATCH_METRES,
            "lry": uly - PATCH_METRES,
        },
        "projection": utm_wkt(tile.zone),
        "tile_source": (
            f"{tile.mission}_MSIL1C_{_stamp(tile.when, tile.strip_hour)}_{baseline}"
            f"_R{tile.orbit:03d}_T{tile.mgrs}_{_stamp(tile.processed)}.SAFE"
        ),
        "acquisition_date": tile.when.strftime("%Y-%m-%d %H:%M:%S"),
    }
    return json.dumps(meta) + "\n"


def _plan(
    num_patches: int, layout: str, seed: int
) -> tuple[list[SyntheticPatch], list[_Job], list[dict]]:
    """Decide every name, place, date, label and split from the seed (no pixels yet)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0]))
    tiles = _plan_tiles(rng, min(num_patches, max(2, math.ceil(num_patches / _PATCHES_PER_TILE))))
    tile_of = [i % len(tiles) for i in range(num_patches)]
    cells: list[list[int]] = [
        [int(c) for c in rng.choice(_TILE_GRID**2, size=tile_of.count(t), replace=False)]
        for t in range(len(tiles))
    ]
    splits = _v2_splits(rng, num_patches) if layout == "v2" else [None] * num_patches
    overlays: list[str | None] = [None] * num_patches
    if layout == "v2":
        flagged = rng.choice(num_patches, size=_num_snow_cloud(num_patches), replace=False)
        for n, i in enumerate(sorted(int(f) for f in flagged)):
            overlays[i] = "snow" if (n + int(rng.integers(2))) % 2 else "cloud"
    representative = _representative43()
    patches, jobs, rows = [], [], []
    for i in range(num_patches):
        tile = tiles[tile_of[i]]
        cell = cells[tile_of[i]].pop()
        col, row = cell % _TILE_GRID, cell // _TILE_GRID
        ulx, uly = tile.x0 + col * PATCH_METRES, tile.y0 - row * PATCH_METRES
        v1_name = f"{tile.mission}_MSIL2A_{_stamp(tile.when, tile.strip_hour)}_{col}_{row}"
        epsg = 32600 + tile.zone
        if layout == "v1":
            classes = _draw_classes_v1(rng)
            labels = tuple(CLASSES_43[c] for c in sorted(set(classes)))
            name, rel_dir, rows_sig = v1_name, v1_name, classes
            metadata, nodata = _v1_metadata(tile, labels, ulx, uly), None
        else:
            classes = _draw_classes_v2(rng)
            labels = tuple(CLASSES_19[c] for c in sorted(classes))
            name = (
                f"{tile.mission}_MSIL2A_{tile.when:%Y%m%dT%H%M%S}_N9999_R{tile.orbit:03d}"
                f"_T{tile.mgrs}_{col}_{row}"
            )
            rel_dir = f"{V2_S2_DIR}/{name.rsplit('_', 2)[0]}/{name}"
            rows_sig = tuple(representative[c] for c in classes)
            metadata, nodata = None, 0
            rows.append(
                {
                    "patch_id": name,
                    "labels": list(labels),
                    "split": splits[i],
                    "country": tile.country,
                    "s1_name": (
                        f"{tile.s1_mission}_IW_GRDH_1SDV_{tile.s1_when:%Y%m%dT%H%M%S}"
                        f"_{tile.mgrs}_{col}_{row}"
                    ),
                    "s2v1_name": v1_name,
                    "contains_seasonal_snow": overlays[i] == "snow",
                    "contains_cloud_or_shadow": overlays[i] == "cloud",
                }
            )
        patches.append(
            SyntheticPatch(
                name=name,
                labels=labels,
                split=splits[i],
                crs=f"EPSG:{epsg}",
                ulx=ulx,
                uly=uly,
                snow_or_cloud=overlays[i] is not None,
            )
        )
        jobs.append(
            _Job(i, rel_dir, name, epsg, ulx, uly, tuple(rows_sig), overlays[i], nodata, metadata)
        )
    return patches, jobs, rows


# --------------------------------------------------------------------------- archive


def _write_v2_metadata(root: Path, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("patch_id", pa.string()),
            ("labels", pa.list_(pa.string())),
            ("split", pa.string()),
            ("country", pa.string()),
            ("s1_name", pa.string()),
            ("s2v1_name", pa.string()),
            ("contains_seasonal_snow", pa.bool_()),
            ("contains_cloud_or_shadow", pa.bool_()),
        ]
    )
    rows = sorted(rows, key=lambda r: r["patch_id"])
    flagged = [r for r in rows if r["contains_seasonal_snow"] or r["contains_cloud_or_shadow"]]
    clean = [r for r in rows if r not in flagged]
    for file_name, subset in ((V2_METADATA, clean), (V2_SNOW_CLOUD_METADATA, flagged)):
        pq.write_table(pa.Table.from_pylist(subset, schema=schema), root / file_name)


def _mp_context() -> multiprocessing.context.BaseContext:
    # fork is cheapest, but forking a process whose TensorFlow threads are running can deadlock.
    if "tensorflow" in sys.modules or "fork" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    return multiprocessing.get_context("fork")


def _run_jobs(root: str, seed: int, jobs: list[_Job], workers: int) -> None:
    if workers <= 1 or len(jobs) < 2:
        _write_jobs(root, seed, jobs)
        return
    n_chunks = min(len(jobs), workers * 4)  # a few chunks per worker balances the load
    bounds = np.linspace(0, len(jobs), n_chunks + 1).astype(int)
    chunks = [jobs[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    with ProcessPoolExecutor(min(workers, n_chunks), mp_context=_mp_context()) as pool:
        for _ in pool.map(_write_jobs, [root] * n_chunks, [seed] * n_chunks, chunks):
            pass


def _is_nonempty_dir(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def _check_args(
    out: Path, num_patches: int, layout: str, seed: int, workers: int, overwrite: bool
) -> None:
    if isinstance(num_patches, bool) or not isinstance(num_patches, int) or num_patches < 1:
        raise ValueError(f"number of patches must be an integer >= 1, got {num_patches!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory")
    if _is_nonempty_dir(out) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty (use --overwrite to replace it)")


def _publish(tmp: Path, out: Path, overwrite: bool) -> None:
    """Move the finished archive into place; an old OUT is removed only after the swap."""
    if _is_nonempty_dir(out):
        if not overwrite:
            raise FileExistsError(f"{out} exists and is not empty (use --overwrite to replace it)")
        trash = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:12]}"
        os.rename(out, trash)
        os.rename(tmp, out)
        shutil.rmtree(trash)
        return
    if out.is_dir():
        out.rmdir()
    os.rename(tmp, out)


def generate_archive(
    out_dir: os.PathLike | str,
    num_patches: int,
    layout: str = "v1",
    seed: int = 0,
    workers: int = 1,
    *,
    overwrite: bool = False,
) -> list[SyntheticPatch]:
    """Write a synthetic ``layout`` archive of ``num_patches`` patches to ``out_dir``.

    Returns the patches in generation order. Raises ValueError on bad arguments and
    FileExistsError if ``out_dir`` is a file, or a non-empty directory without ``overwrite``.
    """
    out = Path(out_dir)
    _check_args(out, num_patches, layout, seed, workers, overwrite)
    patches, jobs, rows = _plan(num_patches, layout, seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Build beside OUT (same file system, so the final rename is atomic).
    tmp = out.parent / f".{out.name}.partial-{uuid.uuid4().hex[:12]}"
    tmp.mkdir()
    try:
        _run_jobs(str(tmp), seed, jobs, workers)
        if layout == "v2":
            _write_v2_metadata(tmp, rows)
        _publish(tmp, out, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return patches


# --------------------------------------------------------------------------- CLI


def _int_at_least(minimum: int):
    """argparse type: an integer >= ``minimum`` (one message shape for every flag)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


_positive_int, _non_negative_int = _int_at_least(1), _int_at_least(0)


def _build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="bigearthnet-synth",
        description=(
            "Write a small synthetic BigEarthNet archive in the real v1 or v2 (reBEN) format. "
            "Each class has a fixed 12-band spectral signature; a patch holds 1-3 classes as "
            "rectangular regions and is labelled with exactly those classes, so a small CNN "
            "learns the task in a few epochs."
        ),
    )
    parser.add_argument("out", metavar="OUT", type=Path, help="archive directory to create")
    parser.add_argument(
        "--patches", "-n", type=_positive_int, default=100, metavar="N",
        help="number of patches to generate, >= 1 (default: 100)",
    )  # fmt: skip
    parser.add_argument(
        "--layout", choices=LAYOUTS, default="v1",
        help="v1: one folder per patch with a labels JSON (43 classes); v2: reBEN "
        "BigEarthNet-S2/<tile>/<patch>/ folders plus metadata parquet files (19 classes, "
        "train/validation/test splits, snow/cloud list) (default: v1)",
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=_non_negative_int, default=0, metavar="S",
        help="archive seed, >= 0: same seed gives byte-identical files (default: 0)",
    )  # fmt: skip
    parser.add_argument(
        "--workers", "-j", type=_positive_int, default=1, metavar="W",
        help="processes writing patches in parallel; output does not depend on it (default: 1)",
    )  # fmt: skip
    parser.add_argument(
        "--overwrite", action="store_true",
        help="replace OUT if it exists and is not empty (the old one is removed only at the end)",
    )  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the exit status (0 ok, 2 bad arguments)."""
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and bad arguments; return instead
        return exc.code if isinstance(exc.code, int) else 2
    start = time.perf_counter()
    try:
        generate_archive(
            args.out, args.patches, args.layout, args.seed, args.workers, overwrite=args.overwrite
        )
    except (ValueError, FileExistsError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - start
    print(
        f"wrote {args.patches} {args.layout} patches to {args.out} in {elapsed:.2f} s "
        f"({1000 * elapsed / args.patches:.2f} ms/patch, {args.workers} worker(s))"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
