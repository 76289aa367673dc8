"""Finding and reading patches in the two BigEarthNet-S2 archive layouts.

v1.0 (590,326 patches)::

    ROOT/<name>/<name>_B01.tif ... <name>_B12.tif, <name>_B8A.tif
    ROOT/<name>/<name>_labels_metadata.json      # "labels": 43-class CORINE names

v2.0 / reBEN (549,488 patches)::

    ROOT/BigEarthNet-S2/<tile>/<patch_id>/<patch_id>_B01.tif ...
    ROOT/metadata.parquet                         # patch_id, labels (19-class), split, ...
    ROOT/metadata_for_patches_with_snow_cloud_or_shadow.parquet
    ROOT/Reference_Maps/<tile>/<patch_id>/<patch_id>_reference_map.tif   # where present

With Sentinel-1 (the band configurations ``s1`` and ``all``), each S2 patch is paired with
its S1 patch (:mod:`bigearthnet.preprocessing.sentinel1`); where a v2 archive has reference
maps, each patch names its map file (read by :mod:`.reference_maps`). Listing only gathers
names (cheap, in the main process); reading a patch - its bands' GeoTIFFs plus, for v1, its
JSON - happens in the workers and raises :class:`PatchError` with a one-line reason for anything
wrong with that patch, so preprocessing can record it in ``rejects.csv`` and carry on.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError
from bigearthnet.core.util import first_line
from bigearthnet.preprocessing import sentinel1
from bigearthnet.preprocessing.geotiff import Raster, read_part

# The reBEN (v2) layout: the one home of its names (the reader here, the synthetic writer).
V2_S2_DIR = "BigEarthNet-S2"
V2_METADATA = "metadata.parquet"
V2_SNOW_CLOUD = "metadata_for_patches_with_snow_cloud_or_shadow.parquet"
V2_MAPS_DIR = "Reference_Maps"
V2_MAP_SUFFIX = "_reference_map.tif"
V2_SPLITS: tuple[str, ...] = ("train", "validation", "test")  # as metadata.parquet says
V2_SPLIT_NAMES = {"train": "train", "validation": "val", "val": "val", "test": "test"}
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


class ArchiveError(InputError):
    """The archive as a whole cannot be used (missing, empty, unknown layout)."""


class PatchError(InputError):
    """One patch cannot be used; str(err) is the reason written to rejects.csv."""


@dataclass(frozen=True)
class PatchRef:
    """Where a patch lives and what the archive's tables say about it."""

    name: str
    folder: str
    labels19: tuple[str, ...] | None = None  # v2: from metadata.parquet
    split: str | None = None  # v2: train/val/test from metadata.parquet
    s1_folder: str | None = None  # the paired S1 patch (only when S1 is asked for)
    map_file: str | None = None  # v2 with Reference_Maps/: where its map should be


@dataclass
class Patch:
    """A patch read from disk, bands at native resolution (S1: float32 dB)."""

    name: str
    bands: dict[str, np.ndarray]
    labels19: np.ndarray  # (19,) uint8
    labels43: np.ndarray | None  # (43,) uint8, v1 only
    crs: str
    ulx: float
    uly: float


@dataclass
class Listing:
    """What :func:`list_patches` found."""

    version: str
    patches: list[PatchRef]
    missing: list[tuple[str, str]]  # (name, reason): listed in a table but not on disk
    snow_cloud: list[PatchRef]  # v2 patches of the snow/cloud table
    # v2: the first metadata row whose split is none of V2_SPLITS ("file row N (patch):
    # split 'Test '"); the official split cannot be used then (plan refuses it)
    bad_split: str = ""
    maps: bool = False  # v2 with Reference_Maps/: every patch names its map file


def detect_version(root: Path) -> str:
    """'v1' or 'v2' from the layout of ``root``; ArchiveError when neither fits."""
    if not root.is_dir():
        raise ArchiveError(f"{root}: archive folder does not exist")
    if (root / V2_METADATA).is_file():
        return "v2"
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.is_dir() and os.path.exists(os.path.join(entry.path, f"{entry.name}_B02.tif")):
                return "v1"
    raise ArchiveError(
        f"{root}: not a BigEarthNet archive (no {V2_METADATA} and no <patch>/<patch>_B02.tif)"
    )


def list_patches(
    root: Path,
    version: str,
    bands: tuple[str, ...] = constants.BANDS,
    s1_root: Path | None = None,
) -> Listing:
    """All patches of the archive, sorted by name. When ``bands`` hold Sentinel-1, each is
    paired with its S1 patch in ``s1_root`` (default: :func:`default_s1_root`; v2 by
    ``s1_name``, v1 through the S1 labels JSON)."""
    if not any(band in constants.S1_BANDS for band in bands):
        s1_root = None
    elif s1_root is None:
        s1_root = default_s1_root(root, version)
    if version == "v1":
        listing = _list_v1(root)
        if s1_root is not None:
            pairs = sentinel1.v1_pairs(_existing(s1_root))
            listing.patches = [_with_s1(r, pairs.get(r.name)) for r in listing.patches]
        return listing
    if version == "v2":
        return _list_v2(root, None if s1_root is None else _existing(s1_root))
    raise ArchiveError(f"unknown archive version {version!r}; use v1 or v2")


def default_s1_root(root: Path, version: str) -> Path:
    """Where a configuration with S1 reads it when not told: reBEN's BigEarthNet-S1 folder;
    v1 has no default (BigEarthNet-S1 v1.0 is a separate archive)."""
    if version == "v1":
        raise ArchiveError(
            f"{root}: a v1 archive holds no Sentinel-1; pass --s1-archive "
            f"(the {sentinel1.V1_S1_ARCHIVE} folder)"
        )
    found = sentinel1.v2_root(root)
    if found is None:
        raise ArchiveError(f"{root}: no {sentinel1.V2_S1_DIR} folder; pass --s1-archive")
    return found


def _existing(s1_root: Path) -> Path:
    if not s1_root.is_dir():
        raise ArchiveError(f"{s1_root}: Sentinel-1 archive folder does not exist")
    return s1_root


def _with_s1(ref: PatchRef, folder: str | None) -> PatchRef:
    return dataclasses.replace(ref, s1_folder=folder)


def _list_v1(root: Path) -> Listing:
    refs = []
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.is_dir() and "_MSIL2A_" in entry.name:
                refs.append(PatchRef(entry.name, entry.path))
    if not refs:
        raise ArchiveError(f"{root}: no v1 patch folders (<mission>_MSIL2A_<date>_<col>_<row>)")
    refs.sort(key=lambda r: r.name)
    return Listing("v1", refs, [], [])


def _list_v2(root: Path, s1_root: Path | None) -> Listing:
    s2_dir = _v2_image_dir(root)
    maps_dir = root / V2_MAPS_DIR if (root / V2_MAPS_DIR).is_dir() else None
    table = _read_v2_table(root / V2_METADATA, with_s1=s1_root is not None)
    patches, missing = _v2_refs(table, s2_dir, V2_METADATA, s1_root, maps_dir)
    bad_split = _first_bad_split(table, root / V2_METADATA)
    snow_cloud: list[PatchRef] = []
    if (root / V2_SNOW_CLOUD).is_file():
        extra_table = _read_v2_table(root / V2_SNOW_CLOUD, with_s1=s1_root is not None)
        extra, extra_missing = _v2_refs(extra_table, s2_dir, V2_SNOW_CLOUD, s1_root, maps_dir)
        snow_cloud, missing = extra, missing + extra_missing
    if not patches:
        raise ArchiveError(f"{root / V2_METADATA}: no patches listed")
    return Listing("v2", patches, missing, snow_cloud, bad_split, maps_dir is not None)


def v2_map_file(maps_dir: str | Path, patch_id: str) -> str:
    """Where reBEN keeps a patch's reference map (its tile: the patch_id less two fields)."""
    tile = patch_id.rsplit("_", 2)[0]
    return os.path.join(maps_dir, tile, patch_id, f"{patch_id}{V2_MAP_SUFFIX}")


def _first_bad_split(table, path: Path) -> str:
    """Where the metadata's split column first leaves its vocabulary (a value other than
    train/validation/test, or none), as "FILE row N (PATCH): split VALUE"; "" if nowhere."""
    for row, (patch_id, split) in enumerate(zip(table["patch_id"], table["split"])):
        if not isinstance(split, str) or split not in V2_SPLIT_NAMES:
            return f"{path} row {row} ({patch_id}): split {split!r}"
    return ""


def _v2_image_dir(root: Path) -> Path:
    candidates = sorted(p for p in root.glob(f"{V2_S2_DIR}*") if p.is_dir())
    if not candidates:
        raise ArchiveError(f"{root}: v2 archive without a BigEarthNet-S2 folder")
    return candidates[0]


def _read_v2_table(path: Path, with_s1: bool):
    import pandas as pd  # heavy import, only v2 needs it

    columns = ["patch_id", "labels", "split", *(["s1_name"] if with_s1 else [])]
    try:
        table = pd.read_parquet(path, columns=columns)
    except Exception as err:  # pyarrow raises many types for broken files
        raise ArchiveError(f"{path}: cannot read parquet ({first_line(err)})") from None
    return table


def _v2_refs(
    table, s2_dir: Path, source: str, s1_root: Path | None, maps_dir: Path | None
) -> tuple[list[PatchRef], list[tuple[str, str]]]:
    refs, missing = [], []
    s1_names = table["s1_name"] if s1_root is not None else [None] * len(table)
    for patch_id, labels, split, s1_name in zip(
        table["patch_id"], table["labels"], table["split"], s1_names
    ):
        # Metadata is data, not a path to follow: a name that would leave the folder is refused.
        if not _plain_name(str(patch_id)):
            missing.append((str(patch_id), f"patch_id in {source} is not a plain name: refused"))
            continue
        tile = patch_id.rsplit("_", 2)[0]
        folder = os.path.join(s2_dir, tile, patch_id)
        if not os.path.isdir(folder):
            missing.append((patch_id, f"listed in {source} but missing on disk"))
            continue
        split_name = V2_SPLIT_NAMES.get(str(split))
        s1_folder = None
        if s1_root is not None and s1_name and _plain_name(str(s1_name)):
            s1_folder = sentinel1.v2_folder(s1_root, str(s1_name))
        map_file = None if maps_dir is None else v2_map_file(maps_dir, patch_id)
        refs.append(PatchRef(patch_id, folder, tuple(labels), split_name, s1_folder, map_file))
    refs.sort(key=lambda r: r.name)
    return refs, missing


def _plain_name(name: str) -> bool:
    return name not in ("", ".", "..") and Path(name).name == name and "\\" not in name


def read_patch(ref: PatchRef, version: str, bands: tuple[str, ...] = constants.BANDS) -> Patch:
    """Read ``bands`` (S2 and S1 names) and the labels of one patch; PatchError with the
    reason if unusable. The corner comes from the first band read (all share it)."""
    arrays: dict[str, np.ndarray] = {}
    geo: Raster | None = None
    for band in bands:
        raster = (
            _read_s1_band(ref, band)
            if band in constants.S1_BANDS
            else _read_checked_band(ref, band)
        )
        arrays[band] = raster.data
        geo = geo or raster
    if version == "v1":
        labels43 = _v1_labels(ref)
        labels19 = constants.labels43_to_19(labels43)
    else:
        labels43 = None
        labels19 = _labels_vector(ref.labels19 or (), constants.CLASSES_19)
    if geo is None:
        raise PatchError("no band asked for")
    return Patch(ref.name, arrays, labels19, labels43, geo.crs, geo.ulx, geo.uly)


def _read_s1_band(ref: PatchRef, band: str) -> Raster:
    try:
        return sentinel1.read_s1_band(ref.s1_folder, band)
    except sentinel1.S1Error as err:
        raise PatchError(str(err)) from None


def _read_checked_band(ref: PatchRef, band: str) -> Raster:
    raster = read_part(
        os.path.join(ref.folder, f"{ref.name}_{band}.tif"), f"band {band}", PatchError
    )
    size = constants.BAND_NATIVE_SIZE[band]
    if raster.data.shape != (size, size):
        h, w = raster.data.shape
        raise PatchError(f"band {band} is {w}x{h} px, expected {size}x{size}")
    if raster.data.dtype != np.uint16:
        raise PatchError(f"band {band} has dtype {raster.data.dtype}, expected uint16")
    return raster


def _v1_labels(ref: PatchRef) -> np.ndarray:
    path = os.path.join(ref.folder, f"{ref.name}_labels_metadata.json")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise PatchError(f"missing labels file {ref.name}_labels_metadata.json") from None
    if not text.strip():
        raise PatchError(f"empty labels file {ref.name}_labels_metadata.json")
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as err:
        raise PatchError(f"invalid JSON in {ref.name}_labels_metadata.json ({err.msg})") from None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    if not isinstance(labels, list):
        raise PatchError(f"{ref.name}_labels_metadata.json has no 'labels' list")
    return _labels_vector(labels, constants.CLASSES_43)


def _labels_vector(names, classes: tuple[str, ...]) -> np.ndarray:
    if len(names) == 0:
        raise PatchError("empty label list")
    try:
        return constants.multi_hot(list(names), classes)
    except KeyError as err:
        raise PatchError(f"unknown label {err.args[0]!r}") from None
