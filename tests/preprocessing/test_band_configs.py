"""Band configurations (s2, s2-10, s1, all) and Sentinel-1 reading, v2 and v1 archives."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import preprocess

from bigearthnet.core import constants
from bigearthnet.formats.manifest import read_manifest
from bigearthnet.formats.shards import S1_DB_OFFSET, S1_DB_SCALE, encode_db
from bigearthnet.preprocessing.geotiff import read_band
from bigearthnet.preprocessing.resample import upsample

HALF_STEP = S1_DB_SCALE / 2 + 1e-5  # the stored precision (float32 rounding of the source)


@pytest.fixture(scope="module")
def s1_v2(tmp_path_factory) -> Path:
    from bigearthnet.synthetic.archive import ArchiveSpec, generate_archive

    out = tmp_path_factory.mktemp("s1") / "v2"
    generate_archive(out, ArchiveSpec(24, layout="v2", seed=11, s1=True, difficulty="simple"))
    return out


@pytest.fixture(scope="module")
def s1_v1(tmp_path_factory) -> Path:
    from bigearthnet.synthetic.archive import ArchiveSpec, generate_archive

    out = tmp_path_factory.mktemp("s1") / "v1"
    generate_archive(out, ArchiveSpec(16, layout="v1", seed=12, s1=True, difficulty="simple"))
    return out


def rows(out: Path) -> dict[str, np.ndarray]:
    """patch name -> its stored image."""
    images = {}
    for entry in read_manifest(out).shards:
        with h5py.File(entry.path(out), "r") as f:
            for name, image in zip(f["names"][:], f["images"][:]):
                images[name.decode()] = image
    return images


def s2_folder(archive: Path, name: str) -> Path:
    found = list(archive.glob(f"BigEarthNet-S2/*/{name}")) or [archive / name]
    return found[0]


def s1_folder(archive: Path, name: str) -> Path:
    """The S1 patch of S2 patch ``name``: v2 by its metadata, v1 by the S1 labels JSON."""
    if (archive / "metadata.parquet").is_file():
        import pandas as pd

        table = pd.concat(
            [pd.read_parquet(p) for p in sorted(archive.glob("metadata*.parquet"))]
        ).set_index("patch_id")
        s1_name = table.loc[name, "s1_name"]
        return next(archive.glob(f"BigEarthNet-S1/*/{s1_name}"))
    for meta in archive.glob("BigEarthNet-S1-v1.0/*/*_labels_metadata.json"):
        if json.loads(meta.read_text())["corresponding_s2_patch"] == name:
            return meta.parent
    raise AssertionError(f"no S1 patch for {name}")


def expected_channel(archive: Path, name: str, band: str) -> np.ndarray:
    """What a channel of a shard image holds, from the source file: S2 10 m bit-exact, 20/60 m
    upsampled (bilinear), S1 the float32 dB values."""
    if band in constants.S1_BANDS:
        folder = s1_folder(archive, name)
        return read_band(folder / f"{folder.name}_{band}.tif").data
    data = read_band(s2_folder(archive, name) / f"{name}_{band}.tif").data
    return upsample(data[None], constants.PATCH_SIZE, "bilinear")[0]


@pytest.mark.parametrize("config", list(constants.BAND_CONFIGS))
def test_every_configuration_stores_its_channels_in_order(
    s1_v2: Path, tmp_path: Path, config: str
) -> None:
    out = tmp_path / config
    assert preprocess(s1_v2, out, "--bands", config) == 0
    manifest = read_manifest(out)
    bands = constants.BAND_CONFIGS[config]
    assert manifest.bands == bands and manifest.band_config == config
    assert manifest.image_shape == (120, 120, len(bands)) and len(manifest.band_mean) == len(bands)
    s1 = [b in constants.S1_BANDS for b in bands]
    assert manifest.channel_scale == tuple(S1_DB_SCALE if x else 1.0 for x in s1)
    assert manifest.channel_offset == tuple(S1_DB_OFFSET if x else 0.0 for x in s1)
    images = rows(out)
    assert len(images) == manifest.summary["written"] > 0
    for name, image in list(images.items())[:4]:
        assert image.shape == (120, 120, len(bands)) and image.dtype == np.uint16
        for i, band in enumerate(bands):
            want = expected_channel(s1_v2, name, band)
            if band in constants.S1_BANDS:  # decoded back to dB within the stored precision
                decoded = image[..., i] * manifest.channel_scale[i] + manifest.channel_offset[i]
                assert np.abs(decoded - want).max() <= HALF_STEP, (name, band)
            elif constants.BAND_RESOLUTION_M[band] == 10:  # stored as read: bit-exact
                np.testing.assert_array_equal(image[..., i], want, err_msg=f"{name} {band}")
            else:  # upsampled in float32: BLAS may round a sum differently by one DN
                diff = np.abs(image[..., i].astype(int) - want.astype(int))
                assert diff.max() <= 1 and (diff > 0).mean() < 0.01, (name, band)


def test_s1_statistics_are_per_channel_over_the_train_split(s1_v2: Path, tmp_path: Path) -> None:
    out = tmp_path / "all"
    assert preprocess(s1_v2, out, "--bands", "all") == 0
    manifest = read_manifest(out)
    train = [
        image
        for entry in manifest.split_shards("train")
        for image in h5py.File(entry.path(out), "r")["images"][:]
    ]
    stack = np.stack(train).reshape(-1, len(manifest.bands)).astype(np.float64)
    np.testing.assert_allclose(manifest.band_mean, stack.mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(manifest.band_std, stack.std(axis=0), rtol=1e-6)
    vv_db = manifest.band_mean[0] * S1_DB_SCALE + S1_DB_OFFSET
    assert -22.0 < vv_db < -4.0  # the synthetic VV range, in dB


def test_the_db_encoding_round_trips_and_saturates() -> None:
    db = np.random.default_rng(0).uniform(-80.0, 51.0, size=10_000).astype(np.float32)
    decoded = encode_db(db) * S1_DB_SCALE + S1_DB_OFFSET
    assert np.abs(decoded - db).max() <= HALF_STEP
    assert encode_db(np.array([-200.0, 200.0])).tolist() == [0, 65535]


def test_missing_or_broken_s1_is_a_reject_with_its_reason(s1_v2: Path, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    shutil.copytree(s1_v2, archive)
    names = sorted(rows_of_metadata(archive))
    gone, broken = s1_folder(archive, names[0]), s1_folder(archive, names[1])
    (gone / f"{gone.name}_VV.tif").unlink()
    (broken / f"{broken.name}_VH.tif").write_bytes(b"II*\0")
    assert preprocess(archive, tmp_path / "all", "--bands", "all") == 0
    with open(tmp_path / "all" / "rejects.csv") as f:
        reasons = {row["patch"]: row["reason"] for row in csv.DictReader(f)}
    assert reasons[names[0]] == f"missing Sentinel-1 band VV ({gone.name}_VV.tif)"
    assert reasons[names[1]].startswith("Sentinel-1 band VH: ")
    # Sentinel-2 alone does not need them: the same archive has no read reject.
    assert preprocess(archive, tmp_path / "s2", "--bands", "s2-10") == 0
    assert read_manifest(tmp_path / "s2").summary["rejected"] == 0


def rows_of_metadata(archive: Path) -> list[str]:
    import pandas as pd

    return list(pd.read_parquet(archive / "metadata.parquet")["patch_id"])


def test_v2_without_an_s1_folder_is_one_line_and_exit_2(
    synth_v2: Path, tmp_path: Path, reported_errors
) -> None:
    assert preprocess(synth_v2, tmp_path / "out", "--bands", "s1") == 2
    err = reported_errors()
    assert len(err) == 1 and "no BigEarthNet-S1 folder; pass --s1-archive" in err[0]


def test_v1_pairs_s1_through_its_labels_json(s1_v1: Path, tmp_path: Path, reported_errors) -> None:
    s1_root = s1_v1 / "BigEarthNet-S1-v1.0"
    assert preprocess(s1_v1, tmp_path / "none", "--bands", "all") == 2
    assert "a v1 archive holds no Sentinel-1; pass --s1-archive" in reported_errors()[-1]
    # One S1 patch loses its pairing: its S2 patch is rejected, the others pair.
    lonely = sorted(s1_root.iterdir())[0]
    meta = lonely / f"{lonely.name}_labels_metadata.json"
    partner = json.loads(meta.read_text())["corresponding_s2_patch"]
    archive = tmp_path / "archive"
    shutil.copytree(s1_v1, archive)
    (archive / "BigEarthNet-S1-v1.0" / lonely.name / meta.name).unlink()
    out = tmp_path / "all"
    assert (
        preprocess(archive, out, "--bands", "all", "--s1-archive", str(archive / s1_root.name)) == 0
    )
    manifest = read_manifest(out)
    assert manifest.label_sets == (19, 43) and manifest.summary["rejected"] == 1
    with open(out / "rejects.csv") as f:
        assert list(csv.DictReader(f)) == [
            {"patch": partner, "reason": "no Sentinel-1 patch pairs with it"}
        ]
    for name, image in list(rows(out).items())[:3]:
        vv = expected_channel(archive, name, "VV")
        assert np.abs(image[..., 0] * S1_DB_SCALE + S1_DB_OFFSET - vv).max() <= HALF_STEP
        np.testing.assert_array_equal(image[..., 2], expected_channel(archive, name, "B02"))
