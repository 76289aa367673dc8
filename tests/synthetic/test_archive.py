"""bigearthnet.synthetic.archive: real formats, determinism, the learnable rule and the CLI."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.crs import CRS

from bigearthnet.cli.synth import main
from bigearthnet.core.constants import (
    BAND_NATIVE_SIZE,
    BAND_RESOLUTION_M,
    BANDS,
    CLASSES_19,
    CLASSES_43,
    DROPPED_IN_19,
    MAP_43_TO_19,
    PATCH_METRES,
    labels43_to_19,
)
from bigearthnet.formats.archive_origin import MARK
from bigearthnet.preprocessing import archive
from bigearthnet.synthetic import archive as synthetic
from bigearthnet.synthetic import render as synthetic_render
from bigearthnet.synthetic import sizes
from bigearthnet.synthetic import tiff as synthetic_tiff
from bigearthnet.synthetic.archive import (
    ArchiveSpec,
    SyntheticPatch,
    class_signatures,
    generate_archive,
)

V1_NAME = re.compile(r"^(S2[AB])_MSIL2A_(\d{8}T\d{5,6})_(\d+)_(\d+)$")
V2_NAME = re.compile(r"^S2[AB]_MSIL2A_\d{8}T\d{6}_N9999_R\d{3}_T\d{2}[A-Z]{3}_(\d+)_(\d+)$")
S1_NAME = re.compile(r"^S1[AB]_IW_GRDH_1SDV_\d{8}T\d{6}_\d{2}[A-Z]{3}_\d+_\d+$")
JSON_KEYS = ["labels", "coordinates", "projection", "tile_source", "acquisition_date"]


def _band_path(folder: Path, name: str, band: str) -> Path:
    return folder / f"{name}_{band}.tif"


def _v2_folder(root: Path, patch_id: str) -> Path:
    return root / "BigEarthNet-S2" / patch_id.rsplit("_", 2)[0] / patch_id


def _read_patch(folder: Path, name: str) -> dict[str, np.ndarray]:
    out = {}
    for band in BANDS:
        with rasterio.open(_band_path(folder, name, band)) as src:
            out[band] = src.read(1)
    return out


def _all_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module")
def v1_archive(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[SyntheticPatch]]:
    root = tmp_path_factory.mktemp("v1") / "archive"
    return root, generate_archive(root, ArchiveSpec(40, layout="v1", seed=7, difficulty="simple"))


@pytest.fixture(scope="module")
def v2_archive(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[SyntheticPatch]]:
    root = tmp_path_factory.mktemp("v2") / "archive"
    return root, generate_archive(root, ArchiveSpec(40, layout="v2", seed=11, difficulty="simple"))


# --------------------------------------------------------------------------- v1 format


def test_v1_files_sizes_dtypes_and_georeferencing(v1_archive):
    root, patches = v1_archive
    names = sorted(p.name for p in root.iterdir())
    assert names == sorted([synthetic.OWNER.mark, MARK, *(p.name for p in patches)])  # + marks
    needs = ArchiveSpec(len(patches), layout="v1").needs().disk  # what --patches is checked by
    assert _taken(root) <= needs <= 1.05 * _taken(root) + sizes.ARCHIVE_EXTRA
    for patch in patches:
        folder = root / patch.name
        expected = {f"{patch.name}_{b}.tif" for b in BANDS} | {f"{patch.name}_labels_metadata.json"}
        assert {p.name for p in folder.iterdir()} == expected
        for band in BANDS:
            with rasterio.open(_band_path(folder, patch.name, band)) as src:
                size, res = BAND_NATIVE_SIZE[band], BAND_RESOLUTION_M[band]
                assert (src.count, src.width, src.height) == (1, size, size)
                assert src.dtypes == ("uint16",)
                assert src.nodata is None
                assert src.compression is None and not src.profile["tiled"]
                assert src.crs == CRS.from_string(patch.crs)
                assert src.crs.to_epsg() // 100 == 326
                t = src.transform
                assert (t.a, t.b, t.d, t.e) == (res, 0, 0, -res)
                assert (t.c, t.f) == (patch.ulx, patch.uly)  # shared upper-left corner


def test_v1_json_metadata(v1_archive):
    root, patches = v1_archive
    for patch in patches:
        path = root / patch.name / f"{patch.name}_labels_metadata.json"
        meta = json.loads(path.read_text())
        assert list(meta) == JSON_KEYS
        assert meta["labels"] and set(meta["labels"]) <= set(CLASSES_43)
        assert tuple(meta["labels"]) == patch.labels
        # labels listed in official index order, at least one survives in the 19-class map
        idx = [CLASSES_43.index(n) for n in meta["labels"]]
        assert idx == sorted(idx)
        assert any(i in MAP_43_TO_19 for i in idx)
        c = meta["coordinates"]
        assert c == {
            "ulx": patch.ulx,
            "uly": patch.uly,
            "lrx": patch.ulx + PATCH_METRES,
            "lry": patch.uly - PATCH_METRES,
        }
        assert CRS.from_wkt(meta["projection"]) == CRS.from_string(patch.crs)
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", meta["acquisition_date"])
        assert re.fullmatch(
            r"S2[AB]_MSIL1C_\d{8}T\d{5,6}_N020[56]_R\d{3}_T\d\d[A-Z]{3}_\d{8}T\d{6}\.SAFE",
            meta["tile_source"],
        )
        mission, stamp = V1_NAME.match(patch.name).group(1, 2)
        assert meta["tile_source"].startswith(f"{mission}_MSIL1C_{stamp}_")
        date = meta["acquisition_date"]
        assert stamp.startswith(date[:10].replace("-", "") + "T")


def test_v1_names_zones_and_tile_grid(v1_archive):
    _, patches = v1_archive
    assert all(V1_NAME.match(p.name) for p in patches)
    stamps = [V1_NAME.match(p.name).group(2) for p in patches]
    assert any(len(s) == 14 for s in stamps)  # hour without leading zero, like ..._T94033
    assert any(len(s) == 15 for s in stamps)
    assert len({p.crs for p in patches}) >= 2
    origins: dict[str, set[tuple[int, int]]] = {}
    for p in patches:
        tile, col, row = p.name.rsplit("_", 2)
        origins.setdefault(tile, set()).add(
            (p.ulx - int(col) * PATCH_METRES, p.uly + int(row) * PATCH_METRES)
        )
    assert len(origins) >= 2
    assert all(len(o) == 1 for o in origins.values())  # one grid origin per tile
    assert len({p.name for p in patches}) == len(patches)


def test_v1_pixels_positive_and_plausible(v1_archive):
    root, patches = v1_archive
    bands = _read_patch(root / patches[0].name, patches[0].name)
    for band, arr in bands.items():
        assert arr.min() >= 1, band
        assert 50 < arr.mean() < 8000, band


def test_v1_layout_matches_real_samples(v1_archive, real_v1):
    sample = sorted(p for p in real_v1.iterdir() if p.is_dir())[0]
    root, patches = v1_archive
    ours = root / patches[0].name
    keys = ("dtype", "nodata", "count", "width", "height", "blockysize", "tiled", "interleave")
    for band in BANDS:
        with (
            rasterio.open(_band_path(sample, sample.name, band)) as real,
            rasterio.open(_band_path(ours, patches[0].name, band)) as syn,
        ):
            assert {k: syn.profile[k] for k in keys} == {k: real.profile[k] for k in keys}
            assert syn.compression == real.compression
            assert syn.tags() == real.tags()
            assert syn.transform.a == real.transform.a
    real_meta = json.loads((sample / f"{sample.name}_labels_metadata.json").read_text())
    assert list(real_meta) == JSON_KEYS


def test_v1_dropped_classes_only_as_extra_labels():
    plan_patches = synthetic.plan_archive(400, "v1", 0)[0]
    dropped = {CLASSES_43[i] for i in DROPPED_IN_19}
    with_dropped = [p for p in plan_patches if dropped & set(p.labels)]
    assert 0 < len(with_dropped) < 0.2 * len(plan_patches)
    assert all(set(p.labels) - dropped for p in plan_patches)


def test_write_band_is_byte_identical_to_gdal(tmp_path):
    rng = np.random.default_rng(0)
    for size, nodata in ((120, None), (60, 0), (20, None)):
        data = rng.integers(1, 10000, size=(size, size), dtype=np.uint16)
        ours, ref = tmp_path / f"ours{size}.tif", tmp_path / f"ref{size}.tif"
        synthetic.write_band(ours, data, 32634, 538380, 4953240, nodata)
        profile = synthetic_tiff.geotiff_profile(size, 32634, 538380, 4953240, nodata)
        with rasterio.open(ref, "w", **profile) as dst:
            dst.write(data, 1)
        assert ours.read_bytes() == ref.read_bytes()


# --------------------------------------------------------------------------- v2 format


def test_v2_layout_metadata_and_nodata(v2_archive):
    import pandas as pd

    root, patches = v2_archive
    meta = pd.read_parquet(root / archive.V2_METADATA)
    flagged = pd.read_parquet(root / archive.V2_SNOW_CLOUD)
    assert list(meta.columns) == list(archive.V2_COLUMNS)
    assert list(flagged.columns) == list(archive.V2_COLUMNS)
    assert meta["contains_seasonal_snow"].dtype == bool
    assert meta["contains_cloud_or_shadow"].dtype == bool
    for col in ("patch_id", "split", "country", "s1_name", "s2v1_name"):
        assert all(isinstance(v, str) for v in meta[col]), col
    assert 1 <= len(flagged) <= 0.15 * len(patches)
    assert len(meta) + len(flagged) == len(patches)
    assert not set(meta.patch_id) & set(flagged.patch_id)
    assert not meta.contains_seasonal_snow.any() and not meta.contains_cloud_or_shadow.any()
    assert (flagged.contains_seasonal_snow | flagged.contains_cloud_or_shadow).all()
    both = pd.concat([meta, flagged])
    assert set(both.split) == set(archive.V2_SPLITS)
    assert both.split.value_counts().to_dict() == {"train": 24, "validation": 8, "test": 8}
    by_id = {p.name: p for p in patches}
    for row in both.itertuples():
        assert V2_NAME.match(row.patch_id) and S1_NAME.match(row.s1_name), row.patch_id
        assert V1_NAME.match(row.s2v1_name)
        assert row.s2v1_name.rsplit("_", 2)[1:] == row.patch_id.rsplit("_", 2)[1:]
        assert 1 <= len(row.labels) <= 3 and set(row.labels) <= set(CLASSES_19)
        patch = by_id[row.patch_id]
        assert tuple(row.labels) == patch.labels and row.split == patch.split
        assert patch.snow_or_cloud == (row.patch_id in set(flagged.patch_id))
    for patch in patches:
        folder = _v2_folder(root, patch.name)
        assert {p.name for p in folder.iterdir()} == {f"{patch.name}_{b}.tif" for b in BANDS}
    patch = patches[0]
    for band in BANDS:
        with rasterio.open(_band_path(_v2_folder(root, patch.name), patch.name, band)) as src:
            res = BAND_RESOLUTION_M[band]
            assert src.nodata == 0 and src.dtypes == ("uint16",)
            assert src.width == BAND_NATIVE_SIZE[band]
            assert (src.transform.a, src.transform.c, src.transform.f) == (
                res,
                patch.ulx,
                patch.uly,
            )
            assert src.read(1).min() >= 1  # no real pixel hides as nodata


# --------------------------------------------------------------------------- determinism


def test_same_seed_identical_different_seed_differs(tmp_path):
    a = generate_archive(tmp_path / "a", ArchiveSpec(6, layout="v1", seed=3, difficulty="simple"))
    b = generate_archive(
        tmp_path / "b", ArchiveSpec(6, layout="v1", seed=3, workers=2, difficulty="simple")
    )
    c = generate_archive(tmp_path / "c", ArchiveSpec(6, layout="v1", seed=4, difficulty="simple"))
    assert a == b
    files_a, files_b = _all_files(tmp_path / "a"), _all_files(tmp_path / "b")
    assert files_a == files_b
    assert [p.name for p in c] != [p.name for p in a]
    assert _all_files(tmp_path / "c") != files_a
    # a leftover temporary directory would mean an unfinished archive next to OUT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "c"]


def test_v2_same_seed_identical(tmp_path):
    generate_archive(tmp_path / "a", ArchiveSpec(12, layout="v2", seed=5, difficulty="simple"))
    generate_archive(
        tmp_path / "b", ArchiveSpec(12, layout="v2", seed=5, workers=3, difficulty="simple")
    )
    assert _all_files(tmp_path / "a") == _all_files(tmp_path / "b")


def test_signatures_fixed_and_separated():
    sig = class_signatures(43)
    assert sig.shape == (43, len(BANDS)) and sig.dtype == np.float32
    assert sig.min() >= 100 and sig.max() <= 5000
    dist = np.linalg.norm(sig[:, None] - sig[None], axis=-1)
    assert dist[~np.eye(43, dtype=bool)].min() > 5000
    sig19 = class_signatures(19)
    for k in range(19):
        first_source = min(i for i, j in MAP_43_TO_19.items() if j == k)
        assert np.array_equal(sig19[k], sig[first_source])
    with pytest.raises(ValueError):
        class_signatures(10)


# --------------------------------------------------------------------------- learnable rule


def _nearest_signature_labels(bands: dict[str, np.ndarray], sig: np.ndarray) -> set[int]:
    """Classes covering >= 5 % of the 60 m pixels by nearest signature (Euclidean)."""
    grid = np.stack(
        [
            synthetic_render.block_mean(bands[b].astype(np.float32), bands[b].shape[0] // 20)
            for b in BANDS
        ],
        axis=-1,
    ).reshape(-1, len(BANDS))
    nearest = np.argmin(np.linalg.norm(grid[:, None] - sig[None], axis=-1), axis=1)
    counts = np.bincount(nearest, minlength=len(sig))
    return set(np.flatnonzero(counts >= 0.05 * len(grid)).tolist())


def _micro_f1(true: list[set[int]], pred: list[set[int]]) -> float:
    tp = sum(len(t & p) for t, p in zip(true, pred))
    fp = sum(len(p - t) for t, p in zip(true, pred))
    fn = sum(len(t - p) for t, p in zip(true, pred))
    return 2 * tp / (2 * tp + fp + fn)


def test_learnable_rule_v1(v1_archive):
    root, patches = v1_archive
    sig = class_signatures(43)
    true = [{CLASSES_43.index(n) for n in p.labels} for p in patches]
    pred = [_nearest_signature_labels(_read_patch(root / p.name, p.name), sig) for p in patches]
    assert _micro_f1(true, pred) >= 0.95


def test_learnable_rule_v2(v2_archive):
    root, patches = v2_archive
    clean = [p for p in patches if not p.snow_or_cloud]
    sig = class_signatures(19)
    true = [{CLASSES_19.index(n) for n in p.labels} for p in clean]
    pred = [
        _nearest_signature_labels(_read_patch(_v2_folder(root, p.name), p.name), sig) for p in clean
    ]
    assert _micro_f1(true, pred) >= 0.95


def test_regions_cover_meaningful_area():
    rng = np.random.default_rng(0)
    for _ in range(300):
        k = int(rng.integers(1, 4))
        cells = synthetic_render.region_cells(rng, k)
        fractions = np.bincount(cells.ravel(), minlength=k) / cells.size
        assert len(fractions) == k and fractions.min() >= 0.1


def test_coarse_bands_are_block_means_of_the_field():
    """Without noise the 20/60 m bands equal 2x2/6x6 block means of a 10 m rendering."""
    sig = np.tile(class_signatures(43)[[4, 30]][:, :1], (1, len(BANDS)))  # same value all bands
    bands = synthetic.render_patch(np.random.default_rng(1), sig)
    b10 = bands["B02"].astype(np.float64)
    for band, factor in (("B05", 2), ("B01", 6)):
        n = 120 // factor
        expected = b10.reshape(n, factor, n, factor).mean(axis=(1, 3))
        rel = np.abs(bands[band] - expected) / expected
        assert np.median(rel) < 0.03  # equal up to independent sensor noise


# --------------------------------------------------------------------------- CLI


def test_cli_creates_archive(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(out), "--patches", "3", "--layout", "v1", "--seed", "1"]) == 0
    assert len([p for p in out.iterdir() if p.is_dir()]) == 3
    assert "wrote 3 v1 patches" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["--patches", "0"],
        ["--patches", "-3"],
        ["--patches", "x"],
        ["--layout", "v3"],
        ["--seed", "-1"],
        ["--workers", "0"],
    ],
)
def test_cli_bad_arguments_return_2(tmp_path, reported_errors, argv):
    out = tmp_path / "out"
    assert main([str(out), *argv]) == 2
    (err,) = reported_errors()
    assert "bigearthnet-synth: error:" in err
    assert not out.exists()


def test_cli_replaces_only_its_own_archive_and_only_with_overwrite(tmp_path, reported_errors):
    out = tmp_path / "out"
    assert main([str(out), "--patches", "2", "--difficulty", "simple"]) == 0
    first = _all_files(out)
    assert main([str(out), "--patches", "2", "--difficulty", "simple"]) == 2
    assert "exists and is not empty (--overwrite replaces it)" in reported_errors()[-1]
    assert main([str(out), "--patches", "3", "--difficulty", "simple", "--overwrite"]) == 0
    assert _all_files(out) != first and len(list(out.iterdir())) == 5  # + its marks
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing left beside it


def test_empty_out_dir_is_fine_and_file_is_not(tmp_path):
    (tmp_path / "empty").mkdir()
    assert len(generate_archive(tmp_path / "empty", ArchiveSpec(1, difficulty="simple"))) == 1
    (tmp_path / "file").write_text("x")
    assert main([str(tmp_path / "file"), "--patches", "1"]) == 2


def test_failed_run_leaves_no_out(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("killed")

    monkeypatch.setattr(synthetic, "write_jobs", boom)
    with pytest.raises(RuntimeError):
        generate_archive(tmp_path / "out", ArchiveSpec(3, difficulty="simple"))
    assert list(tmp_path.iterdir()) == []


def test_api_validates_arguments(tmp_path):
    for kwargs in (
        {"patches": 0},
        {"patches": 2, "layout": "v9"},
        {"patches": 2, "seed": -1},
    ):
        with pytest.raises(ValueError):
            generate_archive(tmp_path / "x", ArchiveSpec(**{"difficulty": "simple", **kwargs}))
    assert not (tmp_path / "x").exists()


def test_module_help_runs():
    result = subprocess.run(
        [sys.executable, "-m", "bigearthnet.cli.synth", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    for flag in ("--patches", "--layout", "--seed", "--workers", "--overwrite"):
        assert flag in result.stdout


def test_labels43_to_19_follows_the_map_for_matrices_and_vectors():
    labels43 = (np.random.default_rng(3).random((500, 43)) < 0.1).astype(np.uint8)
    expected = np.zeros((500, 19), dtype=np.uint8)
    for idx43, idx19 in MAP_43_TO_19.items():
        expected[:, idx19] |= labels43[:, idx43]
    got = labels43_to_19(labels43)
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(labels43_to_19(labels43[7]), expected[7])
    assert not labels43_to_19(np.eye(43, dtype=np.uint8)[list(DROPPED_IN_19)]).any()


# --------------------------------------------------------------------------- OUT (issue #46)


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


@pytest.mark.bad_input
@pytest.mark.parametrize("holds", ["user files", "a shards folder"])
def test_overwrite_never_replaces_a_folder_it_did_not_make(
    shards_v1, tmp_path, reported_errors, bad_input_row, holds
):
    """D07: --overwrite emptied a folder of the user's files and replaced a copy of shards."""
    out = tmp_path / "mydata"
    if holds == "user files":
        (out / "sub").mkdir(parents=True)
        (out / "notes.txt").write_text("mine\n")
        (out / "sub" / "results.csv").write_text("a,b\n")
    else:
        shutil.copytree(shards_v1, out)
    before = _tree(out)
    code = main([str(out), "--patches", "4", "--difficulty", "simple", "--overwrite"])
    assert code == 2 and _tree(out) == before
    (line,) = reported_errors()
    assert line.startswith(f"bigearthnet-synth: error: {out}: OUT holds other files (")
    assert "is no folder of bigearthnet-synth (--overwrite replaces only a folder it made)" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mydata"]
    bad_input_row(f"OUT holding {holds}, --overwrite", "bigearthnet-synth OUT --overwrite", code,
                  "refused naming the folder and what it holds; nothing touched")  # fmt: skip


@pytest.mark.bad_input
def test_overwrite_replaces_a_realistic_v2_archive_made_before_marks(
    tmp_path, reported_errors, bad_input_row
):
    """make demo's archive of an earlier version: truth.parquet (no real archive holds it)
    beside the v2 layout; a real reBEN archive (no truth.parquet) is never replaced."""
    out = tmp_path / "archive"
    assert main([str(out), "--patches", "4", "--layout", "v2"]) == 0
    (out / synthetic.OWNER.mark).unlink()
    code = main([str(out), "--patches", "4", "--layout", "v2", "--seed", "1", "--overwrite"])
    assert code == 0 and (out / synthetic.OWNER.mark).is_file()
    (out / synthetic.OWNER.mark).unlink()
    (out / "truth.parquet").unlink()  # now it looks like a real archive
    assert main([str(out), "--patches", "4", "--layout", "v2", "--overwrite"]) == 2
    assert "is no folder of bigearthnet-synth" in reported_errors()[-1]
    verdict = "replaced (truth.parquet says it is synthetic); a real archive never"
    bad_input_row("OUT a realistic v2 archive of an earlier version (no mark), --overwrite",
                  "bigearthnet-synth OUT --overwrite", code, verdict)  # fmt: skip


@pytest.mark.bad_input
@pytest.mark.parametrize("out", ["", ".", ".."])
def test_an_out_the_user_stands_in_is_refused_when_parsed(
    tmp_path, monkeypatch, reported_errors, bad_input_row, out
):
    """D19: "" and "." generated the whole archive, then failed renaming the working
    directory; ".." would have been the folder holding it."""
    here = tmp_path / "work"
    here.mkdir()
    (here / "notes.txt").write_text("mine\n")
    monkeypatch.chdir(here)
    code = main([out, "--patches", "4", "--difficulty", "simple", "--overwrite"])
    assert code == 2
    (line,) = reported_errors()
    assert "argument OUT: " in line and "working directory" in line, line
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["notes.txt", "work"]
    bad_input_row(f"OUT {out!r} in a folder of user files, --overwrite",
                  "bigearthnet-synth OUT --overwrite", code,
                  "refused when parsed, naming the working directory")  # fmt: skip


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "flags, needle",
    [(["--patches", "99999999999999999999"], "--patches/-n: 99999999999999999999: at most 1,"),
     (["--patches", str(synthetic.MAX_PATCHES), "--s1"], "--patches 1000000: needs ")],
    ids=["1e20", "larger than the disk"],
)  # fmt: skip
def test_an_archive_too_large_is_refused_before_any_work(
    tmp_path, reported_errors, bad_input_row, flags, needle
):
    """D15: --patches 1e20 ran for 10 minutes, 4.3 GB of memory and growing; an archive
    larger than the disk is refused by its estimate (327 kB a patch with S1: 327 GB)."""
    out = tmp_path / "archive"
    spec_needs = synthetic.ArchiveSpec(synthetic.MAX_PATCHES, s1=True).needs()
    if "needs" in needle and spec_needs.disk <= shutil.disk_usage(tmp_path).free:
        pytest.skip("this disk holds a million patches")
    code = main([str(out), *flags])
    assert code == 2 and not out.exists() and list(tmp_path.iterdir()) == []
    (line,) = reported_errors()
    assert needle in line, line
    bad_input_row(" ".join(flags), "bigearthnet-synth OUT", code,
                  "refused at once: the option's range, or the disk it needs")  # fmt: skip


def _taken(root: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in root.rglob("*"))


def test_the_disk_estimate_bounds_an_archive_with_s1(tmp_path):
    """What --patches is checked against (the v1 case: test_v1_files_sizes_...): never
    less than the archive takes, and not far above."""
    spec = ArchiveSpec(2, layout="v2", s1=True, difficulty="simple")
    generate_archive(tmp_path / "a", spec)
    taken = _taken(tmp_path / "a")
    assert taken <= spec.needs().disk <= 1.05 * taken + sizes.ARCHIVE_EXTRA


@pytest.mark.fault
def test_a_killed_run_s_partial_folder_is_removed_by_the_next(tmp_path, caplog, fault_row):
    """D23: SIGKILLed mid-write, bigearthnet-synth left .NAME.partial-* (191 MB) for good;
    the next run into the same OUT removes it and says so in one line."""
    out = tmp_path / "kill"
    argv = [sys.executable, "-m", "bigearthnet.cli.synth", str(out), "--patches", "3000",
            "--layout", "v2", "--difficulty", "simple"]  # fmt: skip
    writer = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    started = time.monotonic()
    while not list(tmp_path.glob(".kill.partial-*/BigEarthNet-S2/*")):
        assert writer.poll() is None and time.monotonic() - started < 120, writer.stderr
        time.sleep(0.1)
    writer.kill()
    writer.wait()
    (partial,) = tmp_path.iterdir()
    assert partial.name.startswith(f".kill.partial-{writer.pid}@") and not out.exists()
    assert main([str(out), "--patches", "2", "--difficulty", "simple"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kill"]
    (line,) = [r.getMessage() for r in caplog.records if "killed runs" in r.getMessage()]
    assert line.startswith(f"{out}: removed what killed runs of bigearthnet-synth left beside "
                           f"it: {partial.name} (")  # fmt: skip
    lost = "none: the rerun removed the killed run's partial folder, saying so"
    fault_row("bigearthnet-synth SIGKILLed mid-write, then rerun", runs=2, detect_s=None,
              data_lost=lost)  # fmt: skip
