"""bigearthnet-map region's grid given bad input (rows of `make bad-input`): ``--cell``
finer than the model's maps, a rerun at another ``--cell``, scenes of one UTM zone on 10 m
grids a fraction of a pixel apart, a block or a window too large for the memory, products
too large for the disk, and ``--blocks-only`` with ``--scenes-only``. Each is refused before
the first scene is mapped, in one line saying what to do; a rerun reuses only what still matches."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from region_cli import map_region, scene_maps, scenes_of

from bigearthnet.formats import region_folder

pytestmark = [pytest.mark.bad_input, pytest.mark.xdist_group("region-inputs")]


def test_blocks_only_with_scenes_only_is_refused(
    simple_region, trained_run, tmp_path, reported_errors, bad_input_row
) -> None:
    out = tmp_path / "out"
    code = map_region(out, trained_run, *scenes_of(simple_region),
                   extra=("--scenes-only", "--blocks-only", "1/2"))  # fmt: skip
    assert code == 2 and not out.exists()
    line = reported_errors()[-1]
    assert "--scenes-only and --blocks-only" in line, line
    bad_input_row("`--scenes-only --blocks-only 1/2`", "bigearthnet-map region", code,
                  "refused when parsed: two steps of a job")  # fmt: skip


def test_a_block_too_large_for_memory_is_refused_before_mapping(
    simple_region, trained_run, tmp_path, reported_errors, bad_input_row
) -> None:
    """Memory is a block's, whatever the region: a block of 16,384 cells a side (~100 GB)
    is refused naming --block-size and one that fits, before any scene is mapped."""
    out = tmp_path / "out"
    code = map_region(out, trained_run, *scenes_of(simple_region), extra=("--block-size", "16384"))
    assert code == 2 and not list(out.glob(f"{region_folder.SCENES}/*.tif"))
    line = reported_errors()[-1]
    assert "--block-size 16384" in line and "GB" in line and "take --block-size" in line, line
    bad_input_row("`--block-size 16384` (a block of ~100 GB)", "bigearthnet-map region", code,
                  "refused before mapping: the memory a block needs, a size that fits")  # fmt: skip


def test_a_window_too_large_for_memory_is_refused_before_mapping(
    simple_region, trained_head_run, tmp_path, reported_errors, bad_input_row
) -> None:
    """A 10 m region's ``--window 960000`` (terabytes of activations) is refused from the
    model's measured bytes a px, before any scene is mapped and without building the model
    at that window (a square model of 960,000 px could not be built)."""
    out = tmp_path / "out"
    code = map_region(out, trained_head_run, *scenes_of(simple_region),
                      extra=("--cell", "20", "--window", "960000"))  # fmt: skip
    assert code == 2 and not list(out.glob(f"{region_folder.SCENES}/*.tif"))
    line = reported_errors()[-1]
    assert "--window 960000" in line and "GB" in line and "take --window" in line, line
    bad_input_row("`--window 960000` for a region at `--cell 20`", "bigearthnet-map region",
                  code, "refused before mapping, no model built: a window that fits")  # fmt: skip


def test_products_larger_than_the_disk_are_refused_before_mapping(
    simple_region, trained_run, small_disk, reported_errors, bad_input_row
) -> None:
    """A stray tile of Lisbon (UTM 29) among the region's at 12 E: at --cell 60 a grid of
    ~38,000 x 15,000 cells, whose products need ~60 GB; --out on a 4 MB disk."""
    import rasterio
    from rasterio.crs import CRS
    from rasterio.transform import Affine
    from rasterio.warp import transform

    first = Path(scenes_of(simple_region)[0])
    stray = small_disk.path.parent / first.name.replace("T32UQU", "T29SMC")
    shutil.copytree(first, stray)
    (x,), (y,) = transform("EPSG:4326", "EPSG:32629", [-9.1], [38.7])
    for band in stray.glob("*.tif"):
        with rasterio.open(band, "r+") as dst:
            a, e = dst.transform.a, dst.transform.e
            dst.crs = CRS.from_epsg(32629)
            dst.transform = Affine(a, 0, round(x / 60) * 60, 0, e, round(y / 60) * 60)
    out = small_disk.path / "out"
    code = map_region(
        out, trained_run, *scenes_of(simple_region), str(stray), extra=("--cell", "60")
    )
    assert code == 2 and not list(out.glob(f"{region_folder.SCENES}/*.tif"))
    line = reported_errors()[-1]
    assert "--cell 60" in line and "on disk" in line and str(stray) in line, line
    bad_input_row("a stray tile of Lisbon among tiles at 12 E, `--cell 60`, a 4 MB --out disk",
                  "bigearthnet-map region", code,
                  "refused before mapping: the disk it needs, the farthest scene")  # fmt: skip


def test_a_cell_finer_than_a_classifiers_maps_is_refused_before_mapping(
    simple_region, trained_run, tmp_path, reported_errors, bad_input_row
) -> None:
    """Issue 50: `--cell 10` with a model without the dense head, whose finest maps are of
    60 m cells (--stride 6): one line saying what to do, nothing mapped; --cell 60 works
    (test_areas_are_ground_areas_whatever_the_crs)."""
    out = tmp_path / "out"
    code = map_region(
        out, trained_run, *scenes_of(simple_region), extra=("--cell", "10", "--stride", "6")
    )
    assert code == 2 and not list(out.glob(f"{region_folder.SCENES}/*.tif"))
    line = reported_errors()[-1]
    assert "--cell 10" in line and "60 m" in line and "dense head" in line, line
    assert "--cell 60 or more" in line, line
    bad_input_row("`--cell 10` with a classifier-only model", "bigearthnet-map region", code,
                  "refused before mapping: a model with the dense head, or --cell 60")  # fmt: skip


def test_a_rerun_with_another_cell_remakes_the_products_only(
    simple_region, trained_run, tmp_path, bad_input_row
) -> None:
    """Scene maps do not depend on --cell (their cell is --stride's): a rerun at 300 m after
    600 m reuses every map and remakes every product on the new grid."""
    out = tmp_path / "out"
    assert map_region(out, trained_run, *scenes_of(simple_region)) == 0
    maps = scene_maps(out)
    before = json.loads((out / region_folder.CONSISTENCY).read_text())["grid"]
    code = map_region(out, trained_run, *scenes_of(simple_region), extra=("--cell", "300"))
    assert code == 0 and scene_maps(out) == maps
    grid = json.loads((out / region_folder.CONSISTENCY).read_text())["grid"]
    assert grid["cell_m"] == 300.0 and grid["width"] >= 2 * before["width"] - 1
    import rasterio

    for path in (out / region_folder.PERIODS).glob("*.tif"):
        with rasterio.open(path) as src:
            assert (src.width, src.height, src.res) == (grid["width"], grid["height"], (300, 300))
    assert not list(out.glob(".blocks-*")) and not list(out.glob(".products-*"))
    bad_input_row("a rerun with `--cell 300` after 600", "bigearthnet-map region", code,
                  "scene maps reused, every product remade on the 300 m grid")  # fmt: skip


def test_scenes_of_one_zone_on_offset_grids_are_refused_before_mapping(
    simple_region, trained_run, tmp_path, reported_errors, bad_input_row
) -> None:
    """Issue 50: a scene of tile 32UQU whose 10 m grid is shifted 5 m (a pixel's corner
    georeferenced as its centre) among the zone's true tiles: refused naming both scenes
    and the offset, nothing mapped (its map would shift every boundary against the rest)."""
    import rasterio
    from rasterio.transform import Affine

    scenes = scenes_of(simple_region)
    first = Path(scenes[0])
    shifted = tmp_path / first.name.replace("20200315", "20200317")
    shutil.copytree(first, shifted)
    for band in shifted.glob("*.tif"):
        with rasterio.open(band, "r+") as dst:
            dst.transform = Affine.translation(5.0, -5.0) @ dst.transform
    out = tmp_path / "out"
    code = map_region(out, trained_run, *scenes, str(shifted))
    assert code == 2 and not list(out.glob(f"{region_folder.SCENES}/*.tif"))
    line = reported_errors()[-1]
    assert str(shifted) in line and "offset by (5, 5) m" in line and str(first) in line, line
    bad_input_row("two scenes of UTM 32 whose 10 m grids are 5 m apart",
                  "bigearthnet-map region", code,
                  "refused before mapping, naming both and the offset")  # fmt: skip
