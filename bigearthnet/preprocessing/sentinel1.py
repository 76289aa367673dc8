"""Sentinel-1 patches of the two BigEarthNet archives: where they are and reading them.

reBEN (v2)::

    ROOT/BigEarthNet-S1/<product>/<s1_name>/<s1_name>_VV.tif, _VH.tif

paired with the S2 patch by ``metadata.parquet``'s ``s1_name`` column; ``<product>`` is the
name without its last three parts (tile, column, row).

BigEarthNet-S1 v1.0 (its own archive, beside BigEarthNet-v1.0)::

    S1ROOT/<s1_name>/<s1_name>_VV.tif, _VH.tif, <s1_name>_labels_metadata.json

paired through the JSON's ``corresponding_s2_patch``. Values are float32 backscatter in dB
on the S2 patch's 10 m grid (120 x 120 px). A missing or broken S1 file is a reject of the
patch, like a broken S2 band.
"""

from __future__ import annotations

import dataclasses
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError
from bigearthnet.preprocessing.geotiff import Raster, read_part

V2_S1_DIR = "BigEarthNet-S1"
V1_S1_ARCHIVE = "BigEarthNet-S1-v1.0"  # the folder the S1 v1.0 tarball unpacks to
PAIR_KEY = "corresponding_s2_patch"


class S1Error(InputError):
    """One patch's Sentinel-1 data cannot be used (the reason goes to rejects.csv)."""


def v2_folder(s1_root: Path, s1_name: str) -> str:
    """The folder of one reBEN S1 patch."""
    return os.path.join(s1_root, s1_name.rsplit("_", 3)[0], s1_name)


def v2_root(archive: Path) -> Path | None:
    """``ARCHIVE/BigEarthNet-S1*`` if the reBEN archive has one."""
    candidates = sorted(p for p in archive.glob(f"{V2_S1_DIR}*") if p.is_dir())
    return candidates[0] if candidates else None


def v1_pairs(s1_root: Path, threads: int = 16) -> dict[str, str]:
    """S2 patch name -> S1 patch folder, from every S1 patch's labels JSON.

    The JSON files are read by a pool of threads: on a parallel file system the listing of
    590,326 small files is bound by latency, not bandwidth. A folder whose JSON is missing
    or names no S2 patch pairs with nothing (its S2 patch is then rejected as unpaired).
    """
    with os.scandir(s1_root) as entries:
        folders = sorted(e.path for e in entries if e.is_dir() and "_IW_" in e.name)
    with ThreadPoolExecutor(threads) as pool:
        partners = list(pool.map(_partner, folders))
    return {s2: folder for s2, folder in zip(partners, folders) if s2 is not None}


def _partner(folder: str) -> str | None:
    name = os.path.basename(folder)
    try:
        with open(os.path.join(folder, f"{name}_labels_metadata.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    partner = meta.get(PAIR_KEY) if isinstance(meta, dict) else None
    return str(partner) if partner else None


def read_s1_band(folder: str | None, band: str) -> Raster:
    """One polarisation of one S1 patch as float32 dB; S1Error with the reason if unusable."""
    if folder is None:
        raise S1Error("no Sentinel-1 patch pairs with it")
    name = os.path.basename(folder)
    path = os.path.join(folder, f"{name}_{band}.tif")
    raster = read_part(path, f"Sentinel-1 band {band}", S1Error)
    size = constants.PATCH_SIZE
    if raster.data.shape != (size, size):
        h, w = raster.data.shape
        raise S1Error(f"Sentinel-1 band {band} is {w}x{h} px, expected {size}x{size}")
    if raster.data.dtype.kind not in "fiu":
        raise S1Error(f"Sentinel-1 band {band} has dtype {raster.data.dtype}")
    data = raster.data.astype(np.float32)
    if not np.isfinite(data).all():
        raise S1Error(f"Sentinel-1 band {band} has non-finite values")
    return dataclasses.replace(raster, data=data)
