"""Cloud-Optimized GeoTIFFs, the one writer: every raster the map commands write (class
maps, their probabilities, change maps) is one, so a GIS reads it tiled, with overviews,
over HTTP range requests (``rio cogeo validate`` passes).

GDAL writes a COG by copying a dataset, so the bands, tags, colour table and descriptions
go into a plain GeoTIFF first (a hidden sibling: a kill leaves nothing a glob for ``*.tif``
takes), which the COG driver then copies, tiled (512 px), DEFLATE-compressed, with
nearest-neighbour overviews down to one tile, under a temporary name renamed at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from bigearthnet.core.util import atomic_path, temp_sibling

Describe = Callable[[Any], None]  # sets what the bands carry on an open rasterio dataset


def write_cog(
    path: Path,
    bands: np.ndarray,
    grid: Mapping[str, Any],
    tags: Mapping[str, str],
    describe: Describe,
    nodata: int,
) -> None:
    """``bands`` ((count, rows, cols), their dtype) on ``grid`` (``crs``, ``transform``) as
    a COG at ``path`` with ``tags``; ``describe`` adds band descriptions, colour table,
    scales."""
    import rasterio
    from rasterio.shutil import copy as copy_dataset

    count, height, width = bands.shape
    profile = dict(grid, driver="GTiff", height=height, width=width, count=count)
    profile.update(dtype=bands.dtype.name, nodata=nodata)
    plain = temp_sibling(path, "plain")
    try:
        with rasterio.open(plain, "w", **profile) as dst:
            dst.write(bands)
            dst.update_tags(**tags)
            describe(dst)
        with atomic_path(path) as tmp:
            copy_dataset(
                plain, tmp, driver="COG", compress="DEFLATE", overview_resampling="nearest"
            )
    finally:
        plain.unlink(missing_ok=True)
