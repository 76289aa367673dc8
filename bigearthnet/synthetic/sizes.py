"""What each synthetic generator takes on disk and in memory, estimated before it writes:
one function per generator, checked by :func:`bigearthnet.core.room.check_room`.

The figures are bounds on what the generators measurably write and hold:

* an archive patch is one GeoTIFF per band in whole disk blocks, a folder and a metadata
  file: 196,608 bytes for a patch, 327,680 with Sentinel-1 (measured on 40 patches:
  196,608 v1, 193,126 v2; 327,782 and 320,410 with Sentinel-1, the archive's own files
  included); planning holds 2.1-2.9 kB per patch;
* a scene or region tile stores its bands at their own resolution, uncompressed at most
  (11.4 bytes per 10 m pixel; the band stack 24): measured 5.3-11.5 (24.0 the stack) at
  720 px, plus less than 1 MB of metadata and chunk tables per scene;
* rendering holds 164-209 bytes per 10 m pixel of a scene at its peak, and a region tile
  with the blocks under its pixels 184-296.
"""

from __future__ import annotations

from bigearthnet.core.constants import BAND_NATIVE_SIZE, BAND_RESOLUTION_M, BANDS, PATCH_SIZE
from bigearthnet.core.room import DISK_BLOCK, Needs, on_disk

TIFF_HEADER = 512  # bytes, a bound: tags, geokeys and strip table of a band (measured 360-408)
ARCHIVE_EXTRA = 1_000_000  # the archive's own files (mark, parquet tables' headers): a bound
PLAN_BYTES = 4096  # memory per planned archive patch
WORKER_BYTES = 100_000_000  # memory of one process writing patches
SCENE_EXTRA = 1_000_000  # a scene's metadata, chunk tables, STAC item: a bound
SCENE_RENDER_BYTES = 256  # per 10 m pixel of a scene
TILE_RENDER_BYTES = 320  # per 10 m pixel of a region tile
TRUTH_CELL_BYTES = 72  # a region truth's class per block and date: array, list and JSON


def archive_needs(patches: int, workers: int, s1: bool) -> Needs:
    """``bigearthnet-synth``: ``patches`` written by ``workers`` processes."""
    rasters = [side * side * 2 for side in BAND_NATIVE_SIZE.values()]  # uint16
    folders = 1
    if s1:  # VV and VH, float32 at 10 m, in a folder of their own
        rasters += [PATCH_SIZE * PATCH_SIZE * 4] * 2
        folders += 1
    per_patch = sum(on_disk(size + TIFF_HEADER) for size in rasters)
    per_patch += 2 * folders * DISK_BLOCK  # each folder, and the metadata file in or for it
    return Needs(
        disk=patches * per_patch + ARCHIVE_EXTRA,
        memory=patches * PLAN_BYTES + min(workers, patches) * WORKER_BYTES,
        sized_by=f"--patches {patches}",
    )


def stored_bytes_per_px(layout: str) -> float:
    """Bytes per 10 m pixel of a scene's 12 bands and SCL stored uncompressed at their own
    resolution, or (``stack``) the 12 bands at 10 m."""
    if layout == "stack":
        return 2.0 * len(BANDS)
    return sum(2 / (res / 10) ** 2 for res in BAND_RESOLUTION_M.values()) + 1 / 4  # SCL: 20 m


def scene_needs(size: int, layout: str, sized_by: str) -> Needs:
    """``bigearthnet-synth scene``: one ``size`` px square scene written as ``layout``."""
    pixels = size * size
    return Needs(
        disk=round(pixels * stored_bytes_per_px(layout)) + SCENE_EXTRA,
        memory=pixels * SCENE_RENDER_BYTES,
        sized_by=sized_by,
    )


def region_needs(scenes: int, size: int, truth_cells: int, sized_by: str) -> Needs:
    """``bigearthnet-synth region``: ``scenes`` tiles of ``size`` px (one rendered at a
    time) and a truth of ``truth_cells`` blocks x dates."""
    per_scene = round(size * size * stored_bytes_per_px("tif")) + SCENE_EXTRA
    return Needs(
        disk=scenes * per_scene + truth_cells * 8,
        memory=size * size * TILE_RENDER_BYTES + truth_cells * TRUTH_CELL_BYTES,
        sized_by=sized_by,
    )
