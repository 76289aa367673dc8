"""A synthetic region to test region series against: Sentinel-2 scenes of several tiles on
both sides of the UTM 32/33 boundary (12 E, 48 N), overlapping as MGRS tiles do, over
several dates, with land cover that changes in known places at known dates and clouds
marked in SCL.

* **Truth** lives on the European LAEA grid (EPSG:3035) in blocks of ``block`` metres, a
  class per block and date, as the look of ``--difficulty`` covers them
  (:mod:`.region_cover`). Realistic (the default): the archive's landscape model over the
  blocks, the changes that happen (a forest felled, a field built on; a flooded field for
  one date) and small unmapped features inside blocks. Simple: a few classes anywhere;
  about 25 % of blocks change lastingly to any other, about 15 % show a one-date
  look-alike that reverts (inland water). Lasting changes come at a date with at least two
  dates before and after it.
* **Tiles** are squares of ``size`` px at 10 m in their own UTM zone, in two columns (west
  of 12 E in zone 32, east in zone 33) and ``tiles / 2`` rows, overlapping by ``overlap``
  metres. Each pixel takes the class of the block its centre falls in (or of the small
  feature it lies in), rendered with the spectral signatures of the synthetic archive at
  the date's season (:func:`.scene.render_classes`).
* **Clouds**: in about a third of the scenes one rectangle, bright and SCL class 9.

Written as ``OUT/scenes/<product name>`` in the form ``--layout`` names (band GeoTIFF
folders, SAFE products, ``.zarr`` products, or STAC items ``.json`` with their COGs in
``OUT/assets/``; ``mixed`` takes the forms in turn), named like L2A products
(``S2B_MSIL2A_<date>T100559_N0400_R022_T<tile>_<date>T130116``) so tile and date come from
the name, and ``OUT/truth.json``: the grid, the blocks' classes per date,
the events, the small features and every scene's footprint.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rasterio.warp import transform

from bigearthnet.core import constants
from bigearthnet.core.declare import check_fields, option, reuse
from bigearthnet.core.errors import ConfigError
from bigearthnet.core.folders import Owner, Replacing, check_output, publishing
from bigearthnet.core.room import Needs, check_room
from bigearthnet.core.util import atomic_write_json
from bigearthnet.synthetic import region_cover as cover
from bigearthnet.synthetic import sizes
from bigearthnet.synthetic.look import SyntheticLook
from bigearthnet.synthetic.places import region_of
from bigearthnet.synthetic.scene import Appearance, render_classes, write_bands
from bigearthnet.synthetic.scene_forms import FORM_LAYOUTS, write_form

TRUTH_CRS = "EPSG:3035"
CENTRE_LONLAT = (12.0, 48.0)  # on the boundary of UTM zones 32 and 33
COUNTRY = "Austria"  # 12 E 48 N: how the realistic spectra look there
# Classes the synthetic archive's tiny model tells apart well (as bigearthnet-synth scene).
FIRST_DATE = dt.date(2020, 3, 15)
MIN_BLOCK = constants.PATCH_SIZE * 10.0  # metres: one BigEarthNet patch
MAX_BLOCK = 100_000.0  # metres: larger than any region this writes, a block of one class
DAYS_BETWEEN = 30
MAX_YEARS = 20  # a series longer than Sentinel-2's archive is no series anyone maps
MAX_DATES = MAX_YEARS * 365 // DAYS_BETWEEN + 1  # 244
ROW_LETTERS = {32: "UVWXYZ", 33: "PQRSTU"}  # the 100 km rows a tile is named in, per zone
MAX_TILES = 2 * len(ROW_LETTERS[32])  # two zones x six rows of tiles
OWNER = Owner("bigearthnet-synth region", ".bigearthnet-synth-region")
MIXED = ("safe", "zarr", "stac", "stac-pc", "tif")  # --layout mixed: scene i is MIXED[i % 5]
REGION_LAYOUTS = ("tif", "safe", *FORM_LAYOUTS, "mixed")


def _even_tiles(flag: str, value: int) -> int:
    if not _whole(value) or value < 2 or value % 2 or value > MAX_TILES:
        raise ConfigError(f"{flag} {value}: an even number from 2 to {MAX_TILES} (two UTM zones, "
                          f"{MAX_TILES // 2} rows of 100 km tiles named in each)")  # fmt: skip
    return value


def _enough_dates(flag: str, value: int) -> int:
    if not _whole(value) or not 5 <= value <= MAX_DATES:
        raise ConfigError(f"{flag} {value}: from 5 (changes need two dates each side) to "
                          f"{MAX_DATES} ({MAX_YEARS} years of dates {DAYS_BETWEEN} days "
                          "apart)")  # fmt: skip
    return value


def _tile_size(flag: str, value: int) -> int:
    if not _whole(value) or value % 120 or not 240 <= value <= constants.S2_TILE_PX:
        raise ConfigError(f"{flag} {value}: a multiple of 120 px from 240 to "
                          f"{constants.S2_TILE_PX} (a Sentinel-2 tile, 109.8 km)")  # fmt: skip
    return value


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class RegionSpec(SyntheticLook):
    """A synthetic region; its fields are ``bigearthnet-synth region``'s options."""

    tiles: int = option(4, f"tiles, an even number up to {MAX_TILES}: half in each UTM zone",
                        check=_even_tiles, metavar="N")  # fmt: skip
    dates: int = option(6, f"acquisition dates {DAYS_BETWEEN} days apart, 5 to {MAX_DATES}",
                        check=_enough_dates, metavar="M")  # fmt: skip
    size: int = option(720, "tile side in 10 m px, a multiple of 120 up to "
                       f"{constants.S2_TILE_PX} (a Sentinel-2 tile)", check=_tile_size,
                       metavar="PX")  # fmt: skip
    block: float = option(3600.0, "side of a land-cover block in metres, from 1200 (one "
                          "patch) to 100,000", metavar="M")  # fmt: skip
    layout: str = option(
        "tif", "how each scene is written: band GeoTIFF folders, L2A products (safe), EOPF "
        "Zarr products, STAC items with COGs (stac: Earth Search's style, stac-pc: Planetary "
        "Computer's), or mixed: the forms in turn", choices=REGION_LAYOUTS,
    )  # fmt: skip
    overwrite: bool = reuse(Replacing, "overwrite")
    overlap: float = 1200.0  # metres two neighbouring tiles share

    def __post_init__(self) -> None:
        check_fields(self)
        # A block smaller than one patch (the maps' cell) is truth no map can resolve, and
        # its count grows as 1/block^2: --block 1 ran for minutes. NaN fails this too.
        if not MIN_BLOCK <= self.block <= MAX_BLOCK:
            raise ConfigError(
                f"--block {self.block}: metres from {MIN_BLOCK:.0f} (one 120-px patch) to "
                f"{MAX_BLOCK:.0f}"
            )

    def needs(self) -> Needs:
        """Its scenes on disk, one tile's rendering and the truth (blocks x dates) in memory."""
        rows = self.tiles // 2
        side = self.size * 10.0
        extent = (2 * side, rows * side)  # metres, a bound: tiles overlap, the grid is tilted
        blocks = np.prod([np.ceil(e / self.block) + 2 for e in extent])
        sized_by = f"--tiles {self.tiles} --dates {self.dates} --size {self.size}"
        return sizes.region_needs(self.tiles * self.dates, self.size, int(blocks) * self.dates,
                                  sized_by)  # fmt: skip


def generate_region(out: Path, spec: RegionSpec) -> dict:
    """Write the region to ``out`` (a new path, an empty folder, or with ``spec.overwrite`` a
    region of this command), built beside it and renamed into place; returns the truth.
    InputError, before anything is written, for a folder that holds anything else, or a
    region too large for the disk or the memory."""
    check_output(out, OWNER, replace=spec.overwrite)
    check_room(out, spec.needs())
    rng = np.random.default_rng(spec.seed)
    tiles = _tiles(spec)
    truth = _truth(spec, tiles, rng)
    dates = [FIRST_DATE + dt.timedelta(days=DAYS_BETWEEN * d) for d in range(spec.dates)]
    with publishing(out, OWNER, replace=spec.overwrite) as tmp:
        scenes: list[dict] = []
        for tile in tiles:
            block_of, feature = pixel_cover(tile, spec, truth)
            for d, date in enumerate(dates):
                name = _product_name(tile["name"], date)
                grid = truth["classes"][d][block_of]
                grid = np.where(feature >= 0, feature, grid)  # unmapped small features
                cloud = _cloud(spec.size, rng)
                seen = Appearance(spec.look, month=date.month, region=region_of(COUNTRY))
                bands = render_classes(np.asarray(grid), cloud, 0, int(rng.integers(1 << 31)),
                                       seen)  # fmt: skip
                epsg, origin = tile["epsg"], (tile["left"], tile["top"])
                form = MIXED[len(scenes) % len(MIXED)] if spec.layout == "mixed" else spec.layout
                if form in FORM_LAYOUTS:
                    path = write_form(tmp / "scenes", bands, spec.size, form, epsg=epsg,
                                      origin=origin, name=name)  # fmt: skip
                else:
                    path = write_bands(tmp / "scenes" / name, bands, spec.size, form, epsg,
                                       origin)  # fmt: skip
                scenes.append({"name": name, "tile": tile["name"], "date": date.isoformat(),
                               "clouded_px": int(cloud.sum()), "form": form,
                               "path": path.relative_to(tmp).as_posix()})  # fmt: skip
        body = _truth_json(spec, tiles, truth, dates, scenes)
        atomic_write_json(tmp / "truth.json", body)
    return body


def _tiles(spec: RegionSpec) -> list[dict]:
    """Tile squares in LAEA placement, each in its own UTM zone, snapped to 60 m there."""
    (cx,), (cy,) = transform("EPSG:4326", TRUTH_CRS, [CENTRE_LONLAT[0]], [CENTRE_LONLAT[1]])
    side = spec.size * 10.0
    step = side - spec.overlap
    rows = spec.tiles // 2
    tiles = []
    for row in range(rows):
        for column, (zone, letters) in enumerate(((32, "UQ"), (33, "UU"))):
            x = cx + (column - 0.5) * step
            y = cy + ((rows - 1) / 2 - row) * step
            epsg = 32600 + zone
            (ux,), (uy,) = transform(TRUTH_CRS, f"EPSG:{epsg}", [x], [y])
            left = round((ux - side / 2) / 60) * 60
            top = round((uy + side / 2) / 60) * 60
            name = f"{zone}{letters}{ROW_LETTERS[zone][row]}"
            tiles.append({"name": name, "epsg": epsg, "left": float(left), "top": float(top),
                          "side": side})  # fmt: skip
    return tiles


def _truth(spec: RegionSpec, tiles: list[dict], rng: np.random.Generator) -> dict:
    """Blocks covering every tile, their classes per date, lasting changes and floods."""
    from rasterio.warp import transform_bounds

    boxes = [
        transform_bounds(f"EPSG:{t['epsg']}", TRUTH_CRS, t["left"], t["top"] - t["side"],
                         t["left"] + t["side"], t["top"], densify_pts=21)
        for t in tiles
    ]  # fmt: skip
    b = spec.block
    left = np.floor(min(x[0] for x in boxes) / b) * b
    top = np.ceil(max(x[3] for x in boxes) / b) * b
    cols = int(np.ceil((max(x[2] for x in boxes) - left) / b))
    rows = int(np.ceil((top - min(x[1] for x in boxes)) / b))
    start, plan, found = spec.look.region_cover(rng, rows, cols, spec.dates, spec.block)
    classes = np.repeat(start[None], spec.dates, axis=0)
    events = []
    for (r, c), kind, at, new in plan:
        if kind == "lasting":
            classes[at:, r, c] = new
        else:
            classes[at, r, c] = new
        events.append({"block": [int(r), int(c)], "kind": kind, "date_index": at,
                       "from": int(start[r, c]), "to": new})  # fmt: skip
    return {"left": float(left), "top": float(top), "rows": rows, "cols": cols,
            "classes": classes, "events": events, "features": found}  # fmt: skip


def pixel_cover(
    tile: dict, spec: RegionSpec, truth: dict
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """(rows, cols) block indices of every 10 m pixel centre of ``tile``, and the class of
    the small feature each pixel lies in (-1: none)."""
    centres = tile["left"] + 5.0 + 10.0 * np.arange(spec.size)
    ys = tile["top"] - 5.0 - 10.0 * np.arange(spec.size)
    px, py = np.meshgrid(centres, ys)
    lx, ly = transform(f"EPSG:{tile['epsg']}", TRUTH_CRS, px.ravel(), py.ravel())
    shape = (spec.size, spec.size)
    x = (np.asarray(lx) - truth["left"]).reshape(shape)
    y = (truth["top"] - np.asarray(ly)).reshape(shape)
    row = np.floor(y / spec.block).astype(int).clip(0, truth["rows"] - 1)
    col = np.floor(x / spec.block).astype(int).clip(0, truth["cols"] - 1)
    cls, fx, fy, radius = cover.feature_grid(truth["features"], truth["rows"], truth["cols"])
    dx = x - col * spec.block - fx[row, col]
    dy = y - row * spec.block - fy[row, col]
    inside = dx * dx + dy * dy < radius[row, col] ** 2
    return (row, col), np.where(inside, cls[row, col], -1)


def _cloud(size: int, rng: np.random.Generator) -> np.ndarray:
    """Mostly clear; a third of the scenes one rectangle of cloud (even-aligned)."""
    mask = np.zeros((size, size), bool)
    if rng.random() < 1 / 3:
        h, w = (int(v) * 2 for v in rng.integers(size // 10, size // 4, 2))
        r, c = (int(v) * 2 for v in rng.integers(0, (size - max(h, w)) // 2, 2))
        mask[r : r + h, c : c + w] = True
    return mask


def _product_name(tile: str, date: dt.date) -> str:
    day = date.strftime("%Y%m%d")
    return f"S2B_MSIL2A_{day}T100559_N0400_R022_T{tile}_{day}T130116"


def _truth_json(spec: RegionSpec, tiles, truth, dates, scenes) -> dict:
    return {
        "crs": TRUTH_CRS,
        "block_m": spec.block,
        "left": truth["left"],
        "top": truth["top"],
        "rows": truth["rows"],
        "cols": truth["cols"],
        "dates": [d.isoformat() for d in dates],
        "classes": truth["classes"].tolist(),  # [date][row][col], 19-class indices
        "events": truth["events"],
        "features": truth["features"],  # small unmapped features: disc per block, metres
        "tiles": tiles,
        "scenes": scenes,
        "spec": {
            k: getattr(spec, k) for k in ("tiles", "dates", "size", "overlap", "seed", "difficulty")
        },
    }


def read_truth(region: Path) -> dict:
    """``truth.json`` of a generated region, classes as an array [date, row, col]."""
    body = json.loads((region / "truth.json").read_text(encoding="utf-8"))
    body["classes"] = np.asarray(body["classes"], np.int16)
    return body
