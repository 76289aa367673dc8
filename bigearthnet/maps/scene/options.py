"""How a scene is mapped, declared once and free of TensorFlow (``--help`` answers at once):
the window stride of the scene maps, :class:`SceneMapping` (what ``bigearthnet-map scene``
and ``region`` share) and :class:`SceneMapOptions`."""

from __future__ import annotations

from dataclasses import dataclass

from bigearthnet.core import constants
from bigearthnet.core.declare import check_fields, option
from bigearthnet.core.errors import ConfigError, InputError, require_positive_int
from bigearthnet.maps.radiometry import OFFSET_CHOICES
from bigearthnet.maps.scene.input import WINDOW, band_list, parse_bbox
from bigearthnet.maps.scene.tiles import (
    DEFAULT_WINDOW,
    LATTICE,
    MAX_WINDOW,
    default_window,
    margin_for,
    require_window,
    require_window_for,
)
from bigearthnet.preprocessing.resample import METHODS

# Window steps that tile a 120 px window exactly and stay on the 60 m grid: the cell sizes.
STRIDES = tuple(s for s in range(6, WINDOW + 1, 6) if WINDOW % s == 0)
DEFAULT_STRIDE = 60  # a classifier's cell map: 600 m
PIXEL_CELL_M = 10  # the dense head's map: the scene's 10 m grid


@dataclass(frozen=True)
class MapKind:
    """Which map a scene gets: the dense head's at 10 m (``stride`` None; ``window``: the
    tiling's window, ``margin``: the px it discards at each border, the model's) or the
    classifier's cell map of ``stride`` px."""

    stride: int | None
    window: int = DEFAULT_WINDOW
    margin: int = 0
    window_given: bool = False  # --window; else the largest that fits (mapping.sized_kind)

    @property
    def pixels(self) -> bool:
        return self.stride is None

    @property
    def cell_m(self) -> int:
        return PIXEL_CELL_M if self.stride is None else self.stride * PIXEL_CELL_M

    def tags(self) -> dict[str, str]:
        """What a map's tags say of it (part of what made it: a map of another kind, or of
        another head, is never reused). The margin is (a ResNet's map made with 48 px has
        seams, and is remade); the window is not: at the model's margin it changes no pixel
        beyond float rounding (:mod:`.tiles`)."""
        if self.stride is None:
            return {"head": "dense head (per pixel)", "cell_m": str(PIXEL_CELL_M),
                    "margin_px": str(self.margin)}  # fmt: skip
        return {"head": "classifier (120 px windows)", "cell_m": str(self.cell_m),
                "stride_px": str(self.stride)}  # fmt: skip

    def describe(self) -> str:
        if self.stride is None:
            return (f"10 m from the dense head ({self.window} px windows, {self.margin} px "
                    f"margins)")  # fmt: skip
        return f"{self.cell_m} m cells of 120 px windows at a {self.stride} px stride"


def map_kind(opts: SceneMapping, has_dense_head: bool, source: object, model: str) -> MapKind:
    """The map ``opts`` ask of the registry model ``model`` (``source``: its folder, for
    messages): 10 m from the dense head unless ``--stride`` asks for the classifier's cell
    map, at the model's margin and ``--window`` (default: the margin's,
    :func:`~.tiles.default_window`, until the map sizes it to the memory:
    :func:`~.mapping.sized_kind`; one too small for the margin: InputError naming it); a
    model without the dense head makes cell maps, and refuses ``--window`` (InputError)."""
    if opts.stride is not None:
        if opts.window is not None:
            raise ConfigError("--window is for 10 m maps and --stride for the classifier's cell "
                              "maps: give one")  # fmt: skip
        return MapKind(opts.stride)
    if has_dense_head:
        margin = margin_for(model)
        if opts.window is None:
            return MapKind(None, default_window(margin), margin)
        return MapKind(None, require_window_for(opts.window, model), margin, window_given=True)
    if opts.window is not None:
        raise InputError(
            f"--window {opts.window}: the model of {source} has no dense head, so it makes no "
            f"10 m map; leave --window out for its cell map (--stride), or map with a model "
            f"trained with the dense head"
        )
    return MapKind(DEFAULT_STRIDE)


@dataclass(frozen=True, kw_only=True)
class SceneMapping:
    """How each scene is mapped, wherever scenes are: the options ``bigearthnet-map scene``
    and ``bigearthnet-map region`` share, declared once."""

    stride: int | None = option(
        None, "the classifier's cell map: 120 px windows slid by PX, the map's cell (60 = "
        "600 m; 12 = 120 m); default: 10 m from a model with the dense head, else 60",
        choices=STRIDES, metavar="PX",
    )  # fmt: skip
    window: int | None = option(
        None, f"10 m maps (a model with the dense head): the square window run through the "
        f"model at once, a multiple of {LATTICE} px; its border is discarded, as wide as "
        f"the model's context (tiny: {margin_for('tiny')} px, the ResNets: "
        f"{margin_for('resnet50')}); default: the largest that fits in half the free "
        f"memory, up to {MAX_WINDOW} px and no larger than the scene needs; memory grows "
        f"with its square",
        check=require_window, metavar="PX",
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
