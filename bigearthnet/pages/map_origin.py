"""Which run and which weights made a map, from its tags (``run_dir``, ``checkpoint`` or
``export``, ``weights_sha256``: :mod:`bigearthnet.formats.class_map`). The paths are kept
relative to the map's folder, so a map moved with its run still finds it; a map copied from
another run's folder finds this one too, and only the weights' digest tells them apart."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path

from bigearthnet.core.util import files_digest
from bigearthnet.formats import checkpoints, exported, run_folder
from bigearthnet.formats.class_map import RUN_DIR_TAG, WEIGHTS_DIGEST


def map_tags(path: Path) -> dict[str, str] | None:
    """The map's tags; None when it cannot be read."""
    import rasterio

    try:
        with rasterio.open(path) as src:
            return dict(src.tags())
    except rasterio.errors.RasterioIOError:
        return None


def tagged_place(
    path: Path, value: str, found: Callable[[Path], bool], folder: Path | None = None
) -> Path | None:
    """Where the tag ``value`` of the map at ``path`` points, the first place ``found``
    accepts: relative to the map's folder (maps keep their paths so: ``linked_tags``); in
    maps made before, as the command was given it: from where it ran, or ``folder``."""
    if not value:
        return None
    places = (path.parent / value, Path(value), *(() if folder is None else (folder / value,)))
    return next((place for place in places if found(place)), None)


def map_run(path: Path, folder: Path | None = None) -> Path | None:
    """The run folder whose model made the map at ``path`` (a map made from a run's export
    carries its run too); None when the map does not say (or cannot be read), or the run is
    not there."""
    tags = map_tags(path)
    if tags is None:
        return None
    return tagged_place(path, tags.get(RUN_DIR_TAG, ""),
                        lambda p: (p / run_folder.CONFIG).is_file(), folder)  # fmt: skip


def made_by_these_weights(path: Path, tags: Mapping[str, str]) -> bool:
    """Whether the export or checkpoint the map's tags name is there, with the weights
    whose digest the map carries."""
    if "export" in tags:
        place = tagged_place(path, tags["export"], lambda p: (p / exported.INFO_FILE).is_file())
        files = exported.weights_files(place) if place is not None else []
    else:
        place = tagged_place(path, tags.get("checkpoint", ""),
                             lambda p: Path(f"{p}.index").is_file())  # fmt: skip
        files = checkpoints.weights_files(place) if place is not None else []
    digest = tags.get(WEIGHTS_DIGEST, "")
    if not (files and digest and all(f.is_file() for f in files)):
        return False
    stamps = tuple((f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    return _weights_digest(tuple(str(f) for f in files), stamps) == digest


@lru_cache(maxsize=8)
def _weights_digest(files: tuple[str, ...], stamps: tuple[tuple[int, int], ...]) -> str:
    """The weights' digest, hashed once per page for every map the same weights made (a
    ResNet-50 checkpoint is ~100 MB); ``stamps`` (size, mtime) key out a rewritten file."""
    del stamps  # part of the cache key only
    return files_digest(files)
