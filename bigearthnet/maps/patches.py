"""``bigearthnet-map``: land-cover GeoTIFFs from a trained run, one pixel per 1.2 km patch.

Input is either a BigEarthNet archive (v1 or v2, read with ``archive.read_patch`` and
assembled exactly as the shards store patches) or a folder of preprocessed shards (one or
more splits). Every patch is scored by the run's checkpoint (same normalisation as
training) on one process.

Files. Patches go to the same GeoTIFF when they share a CRS and the same 1200 m lattice
(``ulx mod 1200``, ``uly mod 1200``); in practice that is one file per Sentinel-2 tile,
and patches of different CRSs never share a file. A file is named by its tile when the
patch names carry one (v2: ``..._T33UUP_75_43`` -> ``T33UUP.tif``), else by CRS and
lattice offset (``EPSG32629_x0780_y0840.tif``). Patches that fall on the same pixel of a
group (several acquisitions of one place) go to extra files ``<name>_layer2.tif``, ...,
so no prediction is overwritten.

Geometry. Origin ``x0 = min ulx``, ``y0 = max uly`` of the file's patches, pixel size
1200 m: a patch lands at ``col = (ulx - x0) / 1200``, ``row = (y0 - uly) / 1200``.

Each file is a class map (:func:`bigearthnet.formats.class_map.write_class_map`), as a
scene map is: ``<name>.tif``, a Cloud-Optimized GeoTIFF of the most probable class (uint8,
0..C-1 in the official order of the run's label set, 255 = no patch there) with the CORINE
colour table, the class names as GDAL category names (``<name>.tif.aux.xml``), band tags and
the ``classes`` tag, and ``<name>.qml``, its QGIS style; ``<name>.tif.probabilities.tif``,
one band per class, p stored as ``round(p * 250)`` (resolution 0.004) with a GDAL scale of
1/250, so GIS tools that apply scale/offset show probabilities directly.

Beside each map: ``<name>.png``, a colour preview of the top class with a legend of the
classes present (a fixed CORINE colour per class). ``patches.csv`` lists every patch with
its file, row, column and top class.

The folder is published whole (:func:`bigearthnet.core.folders.publishing`): built beside
``--out`` and renamed into place, so a rerun never leaves the maps of an earlier one among
its own. ``--out`` is new, empty, or - with ``--overwrite`` - a folder of maps this command
made (checked before any patch is read).
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.declare import check_fields, option, reuse
from bigearthnet.core.errors import InputError, require_folder_path, require_positive_int
from bigearthnet.core.folders import Owner, Replacing, publishing
from bigearthnet.formats.class_map import NODATA, linked_tags, scaled, write_class_map
from bigearthnet.preprocessing.archive_input import ArchiveInput

if TYPE_CHECKING:
    from bigearthnet.formats.manifest import Manifest

PIXEL_M = constants.PATCH_METRES
PATCHES_CSV = "patches.csv"
# A folder of this command: its mark, or (made before marks) patches.csv beside the maps.
OWNER = Owner(
    "bigearthnet-map patches",
    ".bigearthnet-map-patches",
    option="--out",
    signature=PATCHES_CSV,
    names=frozenset({"*.tif", "*.png", "*.qml", "*.aux.xml"}),
)
TILE_PATTERN = re.compile(r"_(T\d{2}[A-Z]{3})(?=_|$)")  # Sentinel-2 MGRS tile in v2 names
PROG = "bigearthnet-map"


class MapError(InputError):
    """Bad input for the map command; printed as one line, exit code 2."""


@dataclass(frozen=True, kw_only=True)
class PatchMapOptions(ArchiveInput):
    """What ``bigearthnet-map [patches]`` maps and how, declared once: the archive
    (:class:`~bigearthnet.preprocessing.archive_input.ArchiveInput`) or the shards to read,
    and the output."""

    out: Path = option(help="output folder: <tile>.tif (+ .tif.probabilities.tif, .qml), "
                       "<tile>.png, patches.csv", check=require_folder_path,
                       metavar="DIR")  # fmt: skip
    shards: Path | None = option(
        None, "folder of shards made by bigearthnet-preprocess", metavar="DIR"
    )
    split: tuple[str, ...] | None = option(
        None, "with --shards: the split(s) to map (default: all)", choices=constants.SPLITS
    )
    batch_size: int = option(64, "patches per batch", check=require_positive_int, metavar="N")
    progress: bool = option(True, "a progress bar")
    overwrite: bool = reuse(Replacing, "overwrite")

    def __post_init__(self) -> None:
        check_fields(self)
        if (self.archive is None) == (self.shards is None):
            raise MapError("give --archive DIR or --shards DIR, one of them")
        if self.split and self.shards is None:
            raise MapError("--split applies to --shards only")


@dataclass(frozen=True)
class Place:
    """Where a patch is: its name, CRS and upper-left corner (CRS units, metres)."""

    name: str
    crs: str
    ulx: float
    uly: float


@dataclass
class MapFile:
    """One output GeoTIFF: its patches (indices into the places) and their pixels."""

    name: str
    crs: str
    indices: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    x0: float
    y0: float

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.rows.max()) + 1, int(self.cols.max()) + 1

    @property
    def transform(self):
        from rasterio.transform import Affine

        return Affine(PIXEL_M, 0.0, self.x0, 0.0, -PIXEL_M, self.y0)


# --------------------------------------------------------------------------- inputs


def archive_batches(
    root: Path,
    version: str,
    resampling: str,
    batch_size: int,
    snow_cloud: bool,
    skipped: list,
    *,
    bands: tuple[str, ...] = constants.BANDS,
    s1_root: Path | None = None,
) -> tuple[int, Iterator[tuple[np.ndarray, list[Place]]]]:
    """Number of patches listed, and batches of (uint16 images of ``bands``, places) read
    from the archive (with Sentinel-1 from ``s1_root``, by default the v2 archive's own).

    Unreadable patches are appended to ``skipped`` as (name, reason) and left out.
    """
    from bigearthnet.preprocessing.archive import (
        PatchError,
        detect_version,
        list_patches,
        read_patch,
    )
    from bigearthnet.preprocessing.assembly import assemble

    version = detect_version(root) if version == "auto" else version
    listing = list_patches(root, version, bands, s1_root)
    refs = listing.patches + (listing.snow_cloud if snow_cloud else [])

    def batches():
        for start in range(0, len(refs), batch_size):
            images, places = [], []
            for ref in refs[start : start + batch_size]:
                try:
                    patch = read_patch(ref, version, bands)
                except PatchError as err:
                    skipped.append((ref.name, str(err)))
                    continue
                images.append(assemble(patch, resampling, bands))
                places.append(Place(patch.name, patch.crs, patch.ulx, patch.uly))
            if places:
                yield np.stack(images), places

    return len(refs), batches()


def shard_batches(
    data_dir: Path, manifest: Manifest, splits: list[str], batch_size: int
) -> tuple[int, Iterator[tuple[np.ndarray, list[Place]]]]:
    """Number of patches, and batches of (uint16 images, places) read from the shards."""
    from bigearthnet.formats.manifest import split_shards, verify_shard
    from bigearthnet.formats.shards import read_locations, read_rows

    entries = [entry for split in splits for entry in split_shards(manifest, split)]
    for entry in entries:  # a changed or truncated shard: one line naming it, before any map
        verify_shard(data_dir, entry)

    def batches():
        for entry in entries:
            for lo in range(0, entry.count, batch_size):
                hi = min(lo + batch_size, entry.count)
                where = read_locations(entry.path(data_dir), lo, hi)
                places = [
                    Place(name, crs, float(x), float(y))
                    for name, crs, (x, y) in zip(where.names, where.crs, where.ulxy)
                ]
                yield read_rows(entry.path(data_dir), "images", lo, hi), places

    return sum(e.count for e in entries), batches()


def predict_places(loaded, batches, total: int, progress: bool) -> tuple[list[Place], np.ndarray]:
    """Score every batch; returns all places and their (N, C) float32 scores."""
    from tqdm import tqdm

    places: list[Place] = []
    scores = [np.zeros((0, loaded.num_classes), dtype=np.float32)]
    with tqdm(total=total, unit="patch", desc="map", disable=not progress) as bar:
        for images, batch_places in batches:
            scores.append(loaded.predict(images))
            places.extend(batch_places)
            bar.update(len(batch_places))
    return places, np.concatenate(scores)


# --------------------------------------------------------------------------- layout


def tile_of(name: str) -> str | None:
    """The Sentinel-2 tile (e.g. T33UUP) named in a v2 patch id, else None."""
    match = TILE_PATTERN.search(name)
    return match.group(1) if match else None


def lattice_key(place: Place) -> tuple[str, int, int, str]:
    """Patches with equal keys share one pixel grid: CRS, lattice offset, tile."""
    return (
        place.crs,
        round(place.ulx) % PIXEL_M,
        round(place.uly) % PIXEL_M,
        tile_of(place.name) or "",
    )


def _crs_label(crs: str) -> str:
    if crs.upper().startswith("EPSG:"):
        return "EPSG" + crs[5:]
    return "CRS" + hashlib.sha1(crs.encode()).hexdigest()[:8]  # a WKT: short and stable


def _base_name(key: tuple[str, int, int, str]) -> str:
    crs, off_x, off_y, tile = key
    return tile or f"{_crs_label(crs)}_x{off_x:04d}_y{off_y:04d}"


def _layers(members: list[int], places: list[Place]) -> list[list[int]]:
    """Split a group so that no two patches of a layer share a pixel (repeat acquisitions)."""
    seen: dict[tuple[int, int], int] = defaultdict(int)
    layers: list[list[int]] = []
    for i in sorted(members, key=lambda i: places[i].name):
        corner = (round(places[i].ulx), round(places[i].uly))
        layer = seen[corner]
        seen[corner] += 1
        if layer == len(layers):
            layers.append([])
        layers[layer].append(i)
    return layers


def _map_file(name: str, indices: list[int], places: list[Place]) -> MapFile:
    ulx = np.array([places[i].ulx for i in indices])
    uly = np.array([places[i].uly for i in indices])
    x0, y0 = float(ulx.min()), float(uly.max())
    cols = np.rint((ulx - x0) / PIXEL_M).astype(np.int64)
    rows = np.rint((y0 - uly) / PIXEL_M).astype(np.int64)
    return MapFile(name, places[indices[0]].crs, np.asarray(indices), rows, cols, x0, y0)


def plan_files(places: list[Place]) -> list[MapFile]:
    """The output files: one per CRS + lattice (+ tile), extra layers for overlaps."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, place in enumerate(places):
        groups[lattice_key(place)].append(i)
    files, used = [], set()
    for key in sorted(groups):
        base = _base_name(key)
        if base in used:  # the same tile on two lattices: unlikely, but never overwrite
            base = f"{base}_{_crs_label(key[0])}_x{key[1]:04d}_y{key[2]:04d}"
        used.add(base)
        for layer, indices in enumerate(_layers(groups[key], places)):
            name = base if layer == 0 else f"{base}_layer{layer + 1}"
            files.append(_map_file(name, indices, places))
    return files


# --------------------------------------------------------------------------- writing


def file_bands(map_file: MapFile, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The file's (H, W) top class and (C, H, W) probabilities as stored; NODATA where no
    patch lies."""
    probabilities = np.full((scores.shape[1], *map_file.shape), np.nan, dtype=np.float32)
    probabilities[:, map_file.rows, map_file.cols] = scores[map_file.indices].T
    top = np.full(map_file.shape, NODATA, dtype=np.uint8)
    top[map_file.rows, map_file.cols] = scores[map_file.indices].argmax(axis=1)
    return top, scaled(probabilities)


def write_preview(path: Path, map_file: MapFile, top: np.ndarray, classes: list[str]) -> None:
    """Colour PNG of the top class with a legend of the classes present."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch as LegendPatch

    from bigearthnet.evaluation.plots import save_figure

    colours = constants.class_colours(len(classes))
    valid = top != NODATA
    rgb = np.full((*top.shape, 3), 255, dtype=np.uint8)  # white where there is no patch
    rgb[valid] = colours[top[valid]]
    height, width = top.shape
    extent_km = np.array([0, width, -height, 0]) * PIXEL_M / 1000 + np.repeat(
        [map_file.x0 / 1000, map_file.y0 / 1000], 2
    )
    fig = Figure(figsize=(10, 6))
    ax = fig.add_subplot()
    ax.imshow(rgb, extent=tuple(extent_km), interpolation="nearest")
    ax.set(xlabel="easting (km)", ylabel="northing (km)")
    ax.set_title(f"{map_file.name}: {int(valid.sum())} patches, {map_file.crs}, 1.2 km pixels")
    present, counts = np.unique(top[valid], return_counts=True)
    handles = [
        LegendPatch(facecolor=colours[c] / 255, edgecolor="grey", label=f"{classes[c]} ({n})")
        for c, n in zip(present, counts)
    ]
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=7)
    save_figure(fig, path)


PATCH_FIELDS = (
    "name",
    "file",
    "row",
    "col",
    "crs",
    "ulx",
    "uly",
    "top_class",
    "class",
    "probability",
)


def patch_rows(files: list[MapFile], places: list[Place], scores: np.ndarray, classes) -> list:
    """One row per patch of patches.csv: where it went and what it was predicted to be."""
    rows = []
    for map_file in files:
        for i, row, col in zip(map_file.indices, map_file.rows, map_file.cols):
            place, top = places[i], int(scores[i].argmax())
            rows.append(
                [place.name, f"{map_file.name}.tif", row, col, place.crs, place.ulx, place.uly]
                + [top, classes[top], f"{scores[i, top]:.4f}"]
            )
    return rows


def write_maps(
    out: Path, places: list[Place], scores: np.ndarray, loaded, *, overwrite: bool = False
) -> list[MapFile]:
    """Every class map, its preview and patches.csv: the folder ``out``, published whole
    (``overwrite``: replacing one this command made)."""
    from rasterio.crs import CRS

    from bigearthnet.core.util import write_csv

    classes = loaded.class_names
    tags = linked_tags(loaded.provenance, out)  # the run, relative to where the maps will lie
    files = plan_files(places)
    with publishing(out, OWNER, replace=overwrite) as work:
        for map_file in files:
            top, probabilities = file_bands(map_file, scores)
            path = work / f"{map_file.name}.tif"
            write_preview(path.with_suffix(".png"), map_file, top, classes)
            grid = {"crs": CRS.from_user_input(map_file.crs), "transform": map_file.transform}
            write_class_map(path, top, grid, classes, tags, probabilities=probabilities)
        rows = patch_rows(files, places, scores, classes)
        write_csv(work / PATCHES_CSV, PATCH_FIELDS, rows)
    return files
