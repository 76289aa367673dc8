"""A region series' products computed block by block, at a fine cell: the same products
whatever the block size, shares of the blocks computed apart (Slurm tasks) combine into the
products of one run, maps coarser than a fine grid refused, fine maps averaged into coarse
cells, and the series scored against the truth at its own cell.

The scene maps are made from the synthetic region's truth (:mod:`bigearthnet.synthetic
.region_maps`): the products step takes scene maps however they were made, so these tests
need no model, and take fine maps before any model makes them. At 20 m with a warp lattice
of 64 cells (blocks are whole tiles of it: 256 in use) the region has 6 blocks and costs a
quarter of its 10 m series (the 10 m series: tests/pages/test_region_viewer.py, slow; its
memory against the region's size: benchmarks/region_memory.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.transform import Affine

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError
from bigearthnet.formats import region_folder
from bigearthnet.formats.class_map import DENSE_HEAD, HEAD_TAG, NODATA, write_class_map
from bigearthnet.maps.region import blocks, grid, plan, products
from bigearthnet.maps.region.grid import GridWindow, RegionGrid, map_resampling, warp_map
from bigearthnet.maps.region.periods import from_product_name
from bigearthnet.maps.region.plan import SceneMap
from bigearthnet.maps.scene.options import MapKind
from bigearthnet.synthetic.region_maps import write_truth_maps
from bigearthnet.synthetic.region_score import score_series


def _maps(region: Path, folder: Path, cell: float) -> list[SceneMap]:
    pairs = write_truth_maps(region, folder, cell=cell, error=0.05, seed=1)
    return [SceneMap(from_product_name(scene), path) for scene, path in pairs]


CELL, TILE = 20.0, 64
CLASSIFIER = MapKind(stride=60).tags()[HEAD_TAG]  # a classifier's cell maps' head tag


@pytest.fixture(scope="module")
def fine_maps(fine_region, tmp_path_factory) -> list[SceneMap]:
    return _maps(fine_region, tmp_path_factory.mktemp("maps-fine"), CELL)


@pytest.fixture(scope="module")
def whole(fine_maps, tmp_path_factory) -> Path:
    """The series at 20 m in one block of 1,024 cells."""
    out = tmp_path_factory.mktemp("series") / "whole"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(grid, "WARP_TILE", TILE)
        _build(out, fine_maps)
    return out


PLAN = dict(period="scene-date", crs="EPSG:3035", cell=CELL, persistence=0.99, block_size=1024)


def _build(out: Path, maps: list[SceneMap], cell: float = CELL, **options):
    out.mkdir(exist_ok=True)
    settings = dict(PLAN, cell=cell, tags={}, skipped=[])
    return products.build_products(out, maps, **{**settings, **options})


def _products(out: Path) -> dict[str, np.ndarray | bytes]:
    found: dict[str, np.ndarray | bytes] = {}
    for path in sorted(out.rglob("*.tif")):
        with rasterio.open(path) as src:
            found[str(path.relative_to(out))] = src.read()
    for name in ("areas.csv", "transitions.csv", "consistency.json"):
        found[name] = (out / name).read_bytes()
    return found


def test_shares_of_blocks_combine_into_the_products_of_one_block(
    fine_maps, whole, tmp_path, monkeypatch
):
    """Six blocks of 64 cells, computed as shares 1/2 and 2/2 (two Slurm tasks), then
    combined: the products of one 1,024-cell block, map for map and byte for byte."""
    monkeypatch.setattr(grid, "WARP_TILE", TILE)
    record = region_folder.read_consistency(whole)
    assert record.grid.cell_m == CELL and record.grid.width > 2 * TILE
    split = tmp_path / "whole"  # the same relative paths to the scenes
    for k in (1, 2):
        assert _build(split, fine_maps, block_size=TILE, share=(k, 2)) is None
    assert not (split / region_folder.CONSISTENCY).exists()
    computed = []
    monkeypatch.setattr(products, "compute_block", lambda *args: computed.append(args))
    combined = _build(split, fine_maps, block_size=TILE)
    assert computed == []  # every block came from the shares
    assert combined == record
    _assert_same_products(split, whole)
    # What the maps hold: the truth's classes, so the products are a series, not noise.
    assert record.flicker_rate["raw"] > 0.01 and record.flicker_rate["consistent"] == 0.0
    assert record.lasting_changes > 500


def _assert_same_products(found_in: Path, expected_in: Path) -> None:
    """Every map, table and figure alike, byte for byte; no block left."""
    found, expected = _products(found_in), _products(expected_in)
    assert found.keys() == expected.keys()
    for name, value in expected.items():
        np.testing.assert_array_equal(found[name], value, err_msg=name)
    assert not list(found_in.glob(f"{region_folder.BLOCKS_PREFIX}*"))


@pytest.mark.bad_input
def test_blocks_of_another_cell_are_never_combined(
    fine_maps, whole, tmp_path, monkeypatch, bad_input_row
):
    """A Slurm share of the blocks computed at --cell 40, then the job rerun at --cell 20
    into the same --out: the 40 m blocks (named by another digest) are removed, never
    combined, and the products are those of a 20 m run alone."""
    monkeypatch.setattr(grid, "WARP_TILE", TILE)
    out = tmp_path / "whole"  # the same relative paths to the scenes as `whole`
    assert _build(out, fine_maps, cell=40.0, share=(1, 2)) is None  # else as the rerun
    assert len(list(out.glob(f"{region_folder.BLOCKS_PREFIX}*/r*"))) >= 1
    assert _build(out, fine_maps) == region_folder.read_consistency(whole)
    _assert_same_products(out, whole)
    bad_input_row("a `--blocks-only 1/2` share at `--cell 40`, then `--cell 20` into the same "
                  "--out", "bigearthnet-map region (products step)", 0,
                  "40 m blocks removed, never combined: the products of a 20 m run")  # fmt: skip


def test_the_series_scored_at_its_cell(fine_region, whole):
    """Every cell against the truth at its centre: inside the parcels the 5 % wrong cells
    of each map; within 30 m of a boundary also the boundary's own resampling."""
    out = whole
    score = score_series(fine_region, out)
    assert min(score.pixel_agreement) >= 0.9
    assert score.inside_agreement >= 0.94 and score.boundary_agreement < score.inside_agreement
    assert score.boundary_cells > 2_500 and score.inside_cells > 25_000
    record = json.loads((out / region_folder.CONSISTENCY).read_text())
    assert score.flicker_raw == record["flicker_triples"]["raw"] / record["triples"]
    assert "within 30 m of a boundary" in score.summary()


@pytest.mark.bad_input
def test_a_grid_finer_than_a_classifiers_maps_is_refused(fine_region, tmp_path, bad_input_row):
    """600 m cell maps (a classifier's) feed a grid of 60 m or more as before; under 60 m
    they are refused, naming --cell and what to do, whatever made them (the command refuses
    a model without the dense head before mapping: test_region_grid_bad_input.py)."""
    coarse = _maps(fine_region, tmp_path / "maps", 600.0)
    assert _build(tmp_path / "a", coarse, cell=60.0) is not None
    with pytest.raises(InputError, match=r"--cell 30: the scene map .* 600 m .*dense head"):
        _build(tmp_path / "b", coarse, cell=30.0)
    bad_input_row("600 m scene maps (a classifier's) for `--cell 30`", "region products step",
                  2, "refused naming --cell and the dense head; --cell 60 works")  # fmt: skip


@pytest.mark.bad_input
def test_maps_of_two_heads_in_one_series_are_refused(fine_maps, tmp_path, bad_input_row):
    """The smoother reads the dense head's probabilities (a softmax) otherwise than a
    classifier's sigmoid scores, as each map's ``head`` tag says, and a period's mean of
    the two kinds is neither: maps of two heads are refused naming the first odd one. Maps
    of the dense head make a plan that reads them so, under another digest."""
    import shutil

    assert MapKind(stride=None).tags()[HEAD_TAG] == DENSE_HEAD  # the tag the maps carry
    copies = []
    for scene in fine_maps[:2]:
        for path in (scene.path, scene.probabilities):
            shutil.copy2(path, tmp_path / path.name)
        copies.append(SceneMap(scene.acquisition, tmp_path / scene.path.name))
    dense = plan.SeriesPlan.of(copies, **PLAN)  # the generator's maps: the dense head's
    with rasterio.open(copies[1].path, "r+", IGNORE_COG_LAYOUT_BREAK="YES") as dst:
        dst.update_tags(head=CLASSIFIER)
    with pytest.raises(InputError, match=rf"{copies[1].path}: made by 'classifier.*one model"):
        _build(tmp_path / "out", copies)
    with rasterio.open(copies[0].path, "r+", IGNORE_COG_LAYOUT_BREAK="YES") as dst:
        dst.update_tags(head=CLASSIFIER)
    classifier = plan.SeriesPlan.of(copies, **PLAN)
    assert dense.exclusive and not classifier.exclusive and dense.digest != classifier.digest
    bad_input_row("a region's scene maps made by two heads (dense head and classifier)",
                  "region products step", 2,
                  "refused naming the map and both heads")  # fmt: skip


def test_fine_maps_are_averaged_into_coarse_cells(tmp_path):
    """A 10 m map into 60 m cells: each cell the mean of its 36 pixels; a cell more than
    half unseen is unseen, as a scene map's own cells."""
    coarse = RegionGrid("EPSG:3035", Affine(60.0, 0, 4_000_020.0, 0, -60.0, 3_000_000.0), 2, 1)
    values = np.zeros((19, 6, 12), np.uint8)
    values[0, :, :6] = 250  # cell 0: class 0 certain on 4 of its 6 columns, 2 unseen
    values[:, :, 4:6] = NODATA
    values[1, :, 6:] = 100  # cell 1: 4 of 6 columns unseen
    values[:, :, 6:10] = NODATA
    top = np.zeros((6, 12), np.uint8)
    path = tmp_path / "map.tif"
    write_class_map(path, top, {"crs": coarse.crs, "transform": Affine(10.0, 0, 4_000_020.0, 0,
                                                                     -10.0, 3_000_000.0)},
                    constants.CLASSES_19, {}, probabilities=values)  # fmt: skip
    resampling = map_resampling(10.0, coarse.cell)
    assert resampling.name == "average" and map_resampling(600.0, 600.0).name == "bilinear"
    with rasterio.open(f"{path}.probabilities.tif") as src:
        warped = warp_map(src, coarse, GridWindow(0, 0, 1, 2), resampling)
    assert warped[0, 0, 0] == pytest.approx(250.0)
    assert np.isnan(warped[:, 0, 1]).all()


def test_a_block_too_large_for_memory_is_its_figure(monkeypatch):
    """What the memory check compares: a block's peak, which does not depend on the grid."""
    small, large = (blocks.block_memory(size, 19, 6) for size in (1024, 4096))
    assert 0.3e9 < small < 1.5e9 and large > 10 * small / 2
