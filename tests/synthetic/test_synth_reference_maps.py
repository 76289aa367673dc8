"""synthetic/reference_maps.py: a v2 archive's Reference_Maps as reBEN ships them, the
labels' map of a realistic patch, and the truth per pixel beside the archive."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import rasterio

from bigearthnet.core import constants
from bigearthnet.formats.truth_maps import read_truth_maps
from bigearthnet.preprocessing.archive import V2_MAPS_DIR, V2_S2_DIR, v2_map_file
from bigearthnet.preprocessing.geotiff import read_band
from bigearthnet.synthetic import landscape
from bigearthnet.synthetic.archive import plan_archive
from bigearthnet.synthetic.reference_maps import corine_map, patch_maps


def _all_patch_ids(archive: Path) -> list[str]:
    tables = [archive / "metadata.parquet", *archive.glob("metadata_for_*.parquet")]
    return sorted(pid for t in tables for pid in pd.read_parquet(t, columns=["patch_id"]).patch_id)


def test_simple_maps_are_reben_files_and_the_truth(synth_v2: Path) -> None:
    """Every patch (the snow/cloud ones too) has its map: uint16 CORINE codes, nodata 0,
    120 x 120, deflated, on its 10 m bands' grid; --difficulty simple: map == truth."""
    names = _all_patch_ids(synth_v2)
    truth = read_truth_maps(synth_v2)
    assert sorted(truth) == names
    representative = {constants.CLC_CODES_43[min(s)] for s in landscape_sources()}
    for name in names:
        path = v2_map_file(synth_v2 / V2_MAPS_DIR, name)
        codes = read_band(path)
        band = read_band(Path(path.replace(V2_MAPS_DIR, V2_S2_DIR)).with_name(f"{name}_B02.tif"))
        assert codes.data.dtype == np.uint16 and codes.data.shape == (120, 120)
        assert (codes.crs, codes.transform, codes.nodata) == (band.crs, band.transform, 0)
        assert set(np.unique(codes.data).tolist()) <= representative
        np.testing.assert_array_equal(constants.corine_to_19(codes.data), truth[name])
    with rasterio.open(v2_map_file(synth_v2 / V2_MAPS_DIR, names[0])) as src:
        assert src.compression.value == "DEFLATE" and src.count == 1


def landscape_sources() -> list[tuple[int, ...]]:
    return [landscape.sources_of(k) for k in range(len(constants.CLASSES_19))]


def _realistic_maps(patches: int, seed: int):
    """(labels, parcels, truth, map classes, codes) of each planned realistic v2 patch, laid
    out and mapped as the archive's workers do (their random streams)."""
    _, jobs, rows = plan_archive(patches, "v2", seed, difficulty="realistic")
    for job, row in zip(jobs, rows):
        rng = np.random.default_rng(np.random.SeedSequence([seed, 1, job.index]))
        cells, parcel_of = landscape.lay_out_parcels(rng, job.parcels)
        truth, codes = patch_maps(seed, job, cells, parcel_of)
        np.testing.assert_array_equal(truth, cells)
        labels = {constants.CLASSES_19.index(name) for name in row["labels"]}
        mapped = constants.corine_to_19(codes[::6, ::6])  # one pixel per 60 m cell
        yield labels, job.parcels, parcel_of, truth, mapped, codes


def test_a_realistic_map_is_the_labels_map() -> None:
    """The map's classes are exactly the labels; each labelled polygon is where its parcel
    is (a wrong one shows the labelled class over its look-alike), small features are
    absorbed by a polygon, codes come from each class's sources with variety, and the map
    agrees with the ground about as CORINE does."""
    agree = cells_total = wrong_cells = 0
    codes_of: dict[int, set[int]] = {}
    for labels, parcels, parcel_of, truth, mapped, codes in _realistic_maps(150, seed=11):
        assert set(np.unique(mapped).tolist()) == labels
        map_class = np.asarray([p.map_class for p in parcels])[parcel_of]
        polygon = map_class != landscape.UNMAPPED
        thin = sum(1 for k in labels if not (map_class == k).any())
        # Every polygon cell shows its label, but for the slivers of too-thin polygons.
        assert np.count_nonzero(mapped[polygon] != map_class[polygon]) <= thin
        wrong_cells += np.count_nonzero(polygon & (truth != map_class))
        agree += np.count_nonzero(mapped == truth)
        cells_total += truth.size
        for k in labels:
            codes_of.setdefault(k, set()).update(np.unique(codes[::6, ::6][mapped == k]).tolist())
    assert wrong_cells > 0  # wrong polygons happen in 150 patches
    for k, codes in codes_of.items():
        assert codes <= {constants.CLC_CODES_43[s] for s in landscape.sources_of(k)}, k
    assert len(codes_of[landscape.ARABLE]) >= 2  # 211, 212, 213
    assert 0.80 <= agree / cells_total <= 0.97  # measured 0.91: CORINE-like, not the truth


def test_a_polygon_too_thin_for_a_cell_still_reaches_into_the_map() -> None:
    """A labelled polygon whose share rounds to no 60 m cell (1 patch in 4,000) becomes one
    border cell of the map's largest class; a patch of small features only (never drawn,
    but possible) is mapped as its first polygon."""
    P = landscape.Parcel
    parcels = (P(landscape.ARABLE, landscape.ARABLE, 300), P(landscape.LAKE, landscape.LAKE, 100),
               P(landscape.URBAN, landscape.URBAN, 0),
               P(landscape.MIXED, landscape.UNMAPPED, 0))  # fmt: skip
    rng = np.random.default_rng(0)
    _, parcel_of = landscape.lay_out_parcels(rng, parcels)
    codes = corine_map(np.random.default_rng(1), parcels, parcel_of)
    mapped = constants.corine_to_19(codes)
    assert set(np.unique(mapped).tolist()) == {landscape.ARABLE, landscape.LAKE, landscape.URBAN}
    ((row, col),) = np.argwhere(mapped == landscape.URBAN)
    assert row in (0, 19) or col in (0, 19)
    assert np.count_nonzero(mapped == landscape.ARABLE) == 299  # the largest gave the cell
    only_features = (
        P(landscape.ARABLE, landscape.ARABLE, 0),
        P(landscape.MIXED, landscape.UNMAPPED, 400),
    )
    _, parcel_of = landscape.lay_out_parcels(rng, only_features)
    mapped = constants.corine_to_19(corine_map(rng, only_features, parcel_of))
    assert set(np.unique(mapped).tolist()) == {landscape.ARABLE}
