"""How a scene is mapped, declared once and free of TensorFlow (``--help`` answers at once):
the window stride of the scene maps, :class:`SceneMapping` (what ``bigearthnet-map scene``
and ``region`` share) and :class:`SceneMapOptions`."""

from __future__ import annotations

from dataclasses import dataclass

from bigearthnet.core import constants
from bigearthnet.core.declare import check_fields, option
from bigearthnet.core.errors import require_positive_int
from bigearthnet.maps.radiometry import OFFSET_CHOICES
from bigearthnet.maps.scene.input import WINDOW, band_list, parse_bbox
from bigearthnet.preprocessing.resample import METHODS

# Window steps that tile a 120 px window exactly and stay on the 60 m grid: the cell sizes.
STRIDES = tuple(s for s in range(6, WINDOW + 1, 6) if WINDOW % s == 0)


@dataclass(frozen=True, kw_only=True)
class SceneMapping:
    """How each scene is mapped, wherever scenes are: the options ``bigearthnet-map scene``
    and ``bigearthnet-map region`` share, declared once."""

    stride: int = option(
        60, "window step in 10 m px, the scene map's cell size (60 = 600 m; 12 = 120 m for a "
        "fine map)", choices=STRIDES, metavar="PX",
    )  # fmt: skip
    batch_size: int = option(64, "windows per model call", check=require_positive_int,
                             metavar="N")  # fmt: skip
    progress: bool = option(True, "a progress bar")
    # On by default, as land-cover users expect, for scene and region alike: one scene gives
    # one map. A scene without SCL is not mapped (the scene command exits 2, a region skips
    # it), never mapped unmasked under a masked map's tags.
    mask_clouds: bool = option(
        True, "nodata where the L2A scene classification (SCL: *_SCL_20m.jp2, *SCL*.tif, a "
        "STAC item's scl asset, the Zarr's l2a_classification) marks cloud shadow, cloud, "
        "thin cirrus or snow (cells more than half masked); a scene without SCL (a band "
        "stack) is not mapped (one line naming it) unless --no-mask-clouds",
    )  # fmt: skip
    boa_offset: int | None = option(
        None, "DN to add to every band where a scene's metadata does not say (0: stored as "
        "10,000 x reflectance; -1000: baseline 04.00 on, +1,000); refused where it does and "
        "disagrees", choices=OFFSET_CHOICES, metavar="0|-1000",
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class SceneMapOptions(SceneMapping):
    """How a scene is mapped: ``bigearthnet-map scene``'s map options, declared once (the
    region command maps each scene with its :class:`SceneMapping` through the same object)."""

    resampling: str | None = option(
        None, "upsampling of the 20/60 m bands (default: the run's training data's)",
        choices=METHODS,
    )  # fmt: skip
    bbox: tuple[float, float, float, float] | None = option(
        None, "map only this box, in the scene's CRS (widened to the 60 m grid)",
        parse=parse_bbox, metavar="MINX,MINY,MAXX,MAXY",
    )  # fmt: skip
    band_order: tuple[str, ...] | None = option(
        None, "with a multi-band GeoTIFF: the band name of each of its bands in order ('-' "
        "for a band to ignore); default: the bands' descriptions, else the 12 BigEarthNet "
        "bands in canonical order (B01,B02,B03,B04,B05,B06,B07,B08,B8A,B09,B11,B12)",
        parse=band_list, metavar="B01,B02,...",
    )  # fmt: skip
    labels: int | None = option(
        None, "the class set the map must have: refused (exit 2) if the model predicts "
        "another (default: the model's)", choices=tuple(constants.CLASS_SETS),
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)
