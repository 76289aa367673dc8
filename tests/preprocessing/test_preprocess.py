"""bigearthnet-preprocess: real samples, synthetic v1/v2, bad input, resume, parallel runs."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import rasterio
from conftest import REPO, preprocess

from bigearthnet.core import constants
from bigearthnet.formats.manifest import read_manifest
from bigearthnet.formats.shards import read_locations, read_rows
from bigearthnet.formats.truth_maps import read_truth_maps
from bigearthnet.preprocessing.archive import V2_MAPS_DIR, v2_map_file
from bigearthnet.preprocessing.geotiff import read_band
from bigearthnet.preprocessing.plan import slurm_task_defaults
from bigearthnet.preprocessing.resample import upsample
from bigearthnet.synthetic.archive import ArchiveSpec, generate_archive


def load_all(out: Path) -> dict[str, dict[str, np.ndarray]]:
    """name -> {images, labels19, labels43, split} over every shard of a dataset."""
    manifest = read_manifest(out)
    rows: dict[str, dict] = {}
    for entry in manifest.shards:
        with h5py.File(entry.path(out), "r") as f:
            names = [n.decode() for n in f["names"][:]]
            assert len(names) == entry.count == f.attrs["count"]
            for i, name in enumerate(names):
                rows[name] = {
                    "image": f["images"][i],
                    "labels19": f["labels19"][i],
                    "labels43": f["labels43"][i] if "labels43" in f else None,
                    "split": entry.split,
                    "crs": f["crs"][i].decode(),
                    "ulxy": f["ulxy"][i],
                }
    return rows


def manifest_json(out: Path) -> dict:
    """manifest.json as written (the on-disk contract), after the reader accepted it."""
    read_manifest(out)
    return json.loads((out / "manifest.json").read_text())


def shard_contents(out: Path) -> dict[str, list[str]]:
    """shard file -> patch names in order, plus the sha of each file."""
    result = {}
    for entry in read_manifest(out).shards:
        with h5py.File(entry.path(out), "r") as f:
            result[entry.file] = [n.decode() for n in f["names"][:]]
    return result


def read_rejects(out: Path) -> dict[str, str]:
    with open(out / "rejects.csv", newline="") as f:
        return {row["patch"]: row["reason"] for row in csv.DictReader(f)}


# --------------------------------------------------------------------------- real samples


@pytest.fixture(scope="module")
def real_out(real_v1: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("real")
    assert preprocess(real_v1, out, "--shard-size", "4") == 0
    return out


def test_real_labels_decode_to_json_names(real_v1: Path, real_out: Path) -> None:
    rows = load_all(real_out)
    assert len(rows) == 11
    for name, row in rows.items():
        meta = json.loads((real_v1 / name / f"{name}_labels_metadata.json").read_text())
        decoded43 = {constants.CLASSES_43[i] for i in np.flatnonzero(row["labels43"])}
        assert decoded43 == set(meta["labels"])
        indices43 = [constants.CLASSES_43.index(n) for n in meta["labels"]]
        expected19 = {
            constants.CLASSES_19[constants.MAP_43_TO_19[i]]
            for i in indices43
            if i in constants.MAP_43_TO_19
        }
        assert {constants.CLASSES_19[i] for i in np.flatnonzero(row["labels19"])} == expected19


def test_real_10m_bands_bit_exact_and_upsampled_bands_close(real_v1, real_out) -> None:
    for name, row in load_all(real_out).items():
        for b, band in enumerate(constants.BANDS):
            with rasterio.open(real_v1 / name / f"{name}_{band}.tif") as src:
                native = src.read(1)
                if band == "B02":
                    assert row["ulxy"].tolist() == [src.transform.c, src.transform.f]
                    assert row["crs"] == f"EPSG:{src.crs.to_epsg()}"
            up = row["image"][:, :, b]
            if constants.BAND_RESOLUTION_M[band] == 10:
                assert np.array_equal(up, native), band
                continue
            k = 120 // native.shape[0]
            back = up.astype(np.float64).reshape(native.shape[0], k, native.shape[1], k)
            back = back.mean(axis=(1, 3))
            # Block means of a bilinear upsample equal the source up to a second-difference
            # (smoothing) term, which is largest on the noisy 60 m bands: bound it by the
            # band's own variability. The exact identity is tested on a ramp below.
            native = native.astype(np.float64)
            assert np.corrcoef(back.ravel(), native.ravel())[0, 1] > 0.97, (name, band)
            assert np.abs(back - native).mean() < 0.25 * native.std(), (name, band)


def test_real_manifest_contract(real_out: Path) -> None:
    read_manifest(real_out)  # the reader accepts what the writer wrote
    m = json.loads((real_out / "manifest.json").read_text())  # the on-disk contract
    assert m["bands"] == list(constants.BANDS) and m["classes43"] == list(constants.CLASSES_43)
    assert m["classes19"] == list(constants.CLASSES_19) and m["archive_version"] == "v1"
    assert (m["origin"], m["origin_detail"]) == ("real", "")  # no synthetic mark
    assert sum(m["counts"].values()) == 11 == m["summary"]["written"]
    assert len(m["band_mean"]) == len(m["band_std"]) == 12
    # v1 has no reference maps: the shards are as before them (the same datasets, the same
    # plan id as before maps existed, so a rerun continues earlier shards).
    assert m["reference_maps"] is None
    assert json.loads((real_out / ".parts" / "plan.json").read_text())["plan_id"] == (
        "34ab671d17d8cc2f"
    )
    for entry in m["shards"]:
        assert entry["file"].startswith(entry["split"] + "-")
        with h5py.File(real_out / entry["file"], "r") as f:
            assert f["images"].dtype == np.uint16 and f["images"].shape[1:] == (120, 120, 12)
            assert f["images"].chunks is not None
            assert list(f.attrs["bands"]) == list(constants.BANDS)
            assert f.attrs["resampling"] == "bilinear"
            assert set(f) == {"images", "labels19", "labels43", "names", "crs", "ulxy"}


def test_manifest_band_stats_match_train_split(real_out: Path) -> None:
    rows = [r["image"] for r in load_all(real_out).values() if r["split"] == "train"]
    pixels = np.stack(rows).reshape(-1, 12).astype(np.float64)
    m = manifest_json(real_out)
    np.testing.assert_allclose(m["band_mean"], pixels.mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(m["band_std"], pixels.std(axis=0), rtol=1e-6)


def test_fast_reader_equals_rasterio(real_v1: Path) -> None:
    for path in sorted(real_v1.glob("*/*_B0[19].tif"))[:6] + sorted(real_v1.glob("*/*_B8A.tif")):
        fast = read_band(path)
        with rasterio.open(path) as src:
            assert np.array_equal(fast.data, src.read(1))
            assert (fast.ulx, fast.uly, fast.pixel_size) == (src.transform.c, src.transform.f,
                                                              src.transform.a)  # fmt: skip


@pytest.mark.parametrize("method", ["bilinear", "bicubic", "nearest"])
def test_upsample_preserves_constant_and_block_means(method: str) -> None:
    flat = np.full((1, 20, 20), 1234, dtype=np.uint16)
    assert np.all(upsample(flat, 120, method) == 1234)
    ramp = (np.add.outer(np.arange(20) * 40, np.arange(20) * 7) + 500).astype(np.uint16)[None]
    up = upsample(ramp, 120, method)[0].astype(np.float64)
    block_means = up.reshape(20, 6, 20, 6).mean(axis=(1, 3))
    if method == "nearest":
        assert np.array_equal(up[::6, ::6], ramp[0])  # pure replication
    # Pixel centres aligned: a linear field comes back exactly away from the clamped edges.
    # (bicubic's 4 taps reach 2 source pixels, hence 2 edge pixels are left out)
    np.testing.assert_allclose(block_means[2:-2, 2:-2], ramp[0, 2:-2, 2:-2], atol=0.5)


@pytest.mark.parametrize("n_in, size", [(60, 120), (20, 120), (96, (192, 183)), (7, (40, 9))])
def test_bilinear_upsampling_is_the_dense_products_bit_for_bit(n_in, size) -> None:
    """Bilinear resampling gathers each output's two taps instead of the dense product
    ``W @ band @ W.T``: the same values to the bit (the same float32 terms, the zeros left
    out), on 20 m (2x), 60 m (6x) and a scene edge's odd window (training's shards and the
    maps read the same values as before)."""
    from bigearthnet.preprocessing.resample import weight_matrix

    bands = np.random.default_rng(n_in).integers(0, 65535, (3, n_in, n_in)).astype(np.uint16)
    height, width = (size, size) if isinstance(size, int) else size
    dense = weight_matrix(n_in, height, "bilinear") @ bands.astype(np.float32)
    dense = dense @ weight_matrix(n_in, width, "bilinear").T
    np.testing.assert_array_equal(upsample(bands, size), np.rint(dense).astype(np.uint16))


# --------------------------------------------------------------------------- synthetic


def test_synthetic_v1_end_to_end(synth_v1: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert preprocess(synth_v1, out, "--shard-size", "50", "--split-ratios", "0.5,0.25,0.25") == 0
    m = manifest_json(out)
    assert m["counts"] == {"train": 120, "val": 60, "test": 60}
    # the generator's mark, carried into the manifest (how a run page and a card know)
    assert m["origin"] == "synthetic"
    assert m["origin_detail"] == "bigearthnet-synth: 240 simple v1 patches, seed 7"
    train_files = [s["file"] for s in m["shards"] if s["split"] == "train"]
    assert train_files == [f"train-{i:05d}-of-00003.h5" for i in range(3)]
    rows = load_all(out)
    assert len(rows) == 240
    assert all(r["labels19"].any() for r in rows.values())  # the generator keeps a 19-class label
    assert len({r["crs"] for r in rows.values()}) >= 2


def test_synthetic_v2_end_to_end(synth_v2: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert preprocess(synth_v2, out, "--shard-size", "16") == 0
    m = manifest_json(out)
    table = pd.read_parquet(synth_v2 / "metadata.parquet")
    snow = pd.read_parquet(synth_v2 / "metadata_for_patches_with_snow_cloud_or_shadow.parquet")
    split_names = {"train": "train", "validation": "val", "test": "test"}
    expected = table["split"].map(split_names).value_counts().to_dict()
    assert m["counts"] == {s: expected.get(s, 0) for s in constants.SPLITS}
    assert m["archive_version"] == "v2" and m["classes43"] is None
    assert m["summary"]["excluded"] == len(snow) > 0
    assert m["summary"]["found"] == len(table) + len(snow)
    rows = load_all(out)
    assert set(rows) == set(table["patch_id"])
    for patch_id, labels, split in zip(table["patch_id"], table["labels"], table["split"]):
        assert rows[patch_id]["split"] == split_names[split]
        assert {constants.CLASSES_19[i] for i in np.flatnonzero(rows[patch_id]["labels19"])} == set(
            labels
        )
        assert rows[patch_id]["labels43"] is None
    _check_maps(synth_v2, out, read_manifest(out))


@pytest.mark.slow
def test_realistic_v2_maps_end_to_end(tmp_path: Path) -> None:
    """A realistic archive's maps (several codes per class, CORINE-like) pass through
    preprocessing as its files say; they agree with the ground as CORINE does."""
    archive, out = tmp_path / "v2", tmp_path / "out"
    generate_archive(archive, ArchiveSpec(40, layout="v2", seed=8))
    assert preprocess(archive, out, "--include-snow-cloud") == 0
    agreement = _check_maps(archive, out, read_manifest(out), exact=False)
    assert 0.8 <= agreement <= 0.97


def _check_maps(archive: Path, out: Path, manifest, exact: bool = True) -> float:
    """Every row's map, read through the shards reader, is the archive's CORINE map in 19
    classes and, ``exact`` (--difficulty simple), the generator's truth, pixel for pixel; the
    manifest's class counts are the maps' counts, its shares their ratio. Returns the share
    of pixels where map and truth agree."""
    truth = read_truth_maps(archive)
    agree = 0
    maps = manifest.reference_maps
    assert maps is not None and maps.refused == maps.mismatched == maps.unknown_code_pixels == 0
    for split in constants.SPLITS:
        counts = np.zeros(20, dtype=np.int64)
        for entry in manifest.split_shards(split):
            names = read_locations(entry.path(out)).names
            map19 = read_rows(entry.path(out), "map19", 0, entry.count)
            assert read_rows(entry.path(out), "has_map", 0, entry.count).all()
            for name, stored in zip(names, map19):
                codes = read_band(v2_map_file(archive / V2_MAPS_DIR, name)).data
                np.testing.assert_array_equal(stored, constants.corine_to_19(codes))
                if exact:
                    np.testing.assert_array_equal(stored, truth[name])
                agree += np.count_nonzero(stored == truth[name])
            values = np.bincount(map19.ravel(), minlength=256)
            assert values[19:255].sum() == 0  # 19 classes and no label, nothing else
            counts += np.r_[values[:19], values[constants.NO_LABEL]]
        assert maps.patches[split] == manifest.count(split)
        assert maps.class_pixels[split] == counts.tolist()
        total = counts.sum()
        shares = manifest_json(out)["reference_maps"]["class_share"][split]
        np.testing.assert_allclose(shares, counts[:19] / total if total else 0.0, rtol=1e-12)
    return agree / (sum(maps.patches.values()) * 14400)


def test_v2_include_snow_cloud(synth_v2: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert preprocess(synth_v2, out, "--include-snow-cloud") == 0
    m = manifest_json(out)
    assert m["summary"]["excluded"] == 0 and m["summary"]["written"] == m["summary"]["found"]


def test_official_split_files_and_exclusions(synth_v1: Path, tmp_path: Path) -> None:
    names = sorted(p.name for p in synth_v1.iterdir() if p.is_dir())
    splits = tmp_path / "splits"
    splits.mkdir()
    (splits / "train.csv").write_text("\n".join(names[:100]) + "\n")
    # The multi-modal variant: two columns, the second ignored.
    (splits / "val.csv").write_text("".join(f"{n},S1_x\n" for n in names[100:150]))
    (splits / "test.csv").write_text("\n".join(names[150:200] + ["S2A_MSIL2A_20990101T000000_1_1"]))
    exclude = tmp_path / "snow.csv"
    exclude.write_text("\n".join(names[:10]) + "\n")
    out = tmp_path / "out"
    assert preprocess(synth_v1, out, "--splits-dir", str(splits), "--exclude", str(exclude)) == 0
    m = manifest_json(out)
    assert m["counts"] == {"train": 90, "val": 50, "test": 50}
    s = m["summary"]
    assert s["found"] == s["written"] + s["rejected"] + s["excluded"] == 241
    assert s["excluded"] == 10 + 40 and s["rejected"] == 1
    rejects = read_rejects(out)
    assert "not in the archive" in rejects["S2A_MSIL2A_20990101T000000_1_1"]
    assert rejects[names[0]].startswith("excluded")


# --------------------------------------------------------------------------- bad input


def _break(archive: Path, broken: dict[str, str]) -> None:
    """Damage one patch per kind; returns nothing, names are the keys of ``broken``."""
    for name, kind in broken.items():
        folder = archive / name
        if kind == "truncated":
            tif = folder / f"{name}_B04.tif"
            tif.write_bytes(tif.read_bytes()[:500])
        elif kind == "garbage":
            (folder / f"{name}_B05.tif").write_bytes(b"this is not a tiff at all")
        elif kind == "missing band":
            (folder / f"{name}_B8A.tif").unlink()
        elif kind == "wrong size":
            _rewrite(folder / f"{name}_B11.tif", np.zeros((59, 60), np.uint16) + 7)
        elif kind == "wrong dtype":
            _rewrite(folder / f"{name}_B12.tif", np.zeros((60, 60), np.uint8) + 7)
        elif kind == "missing json":
            (folder / f"{name}_labels_metadata.json").unlink()
        elif kind == "empty json":
            (folder / f"{name}_labels_metadata.json").write_text("")
        elif kind == "invalid json":
            (folder / f"{name}_labels_metadata.json").write_text("{labels: [")
        elif kind in ("unknown label", "empty labels"):
            path = folder / f"{name}_labels_metadata.json"
            meta = json.loads(path.read_text())
            meta["labels"] = ["Lunar regolith"] if kind == "unknown label" else []
            path.write_text(json.dumps(meta))


def _rewrite(path: Path, data: np.ndarray) -> None:
    with rasterio.open(path) as src:
        profile = src.profile
    profile.update(height=data.shape[0], width=data.shape[1], dtype=data.dtype.name)
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(data, 1)


REASONS = {
    "truncated": "truncated",
    "garbage": "not a TIFF",
    "missing band": "missing band B8A",
    "wrong size": "band B11 is 60x59 px, expected 60x60",
    "wrong dtype": "band B12 has dtype uint8, expected uint16",
    "missing json": "missing labels file",
    "empty json": "empty labels file",
    "invalid json": "invalid JSON",
    "unknown label": "unknown label 'Lunar regolith'",
    "empty labels": "empty label list",
}


def test_bad_patches_are_rejected_with_reasons(real_v1: Path, tmp_path: Path, capsys) -> None:
    archive = tmp_path / "archive"
    shutil.copytree(real_v1, archive)
    names = sorted(p.name for p in archive.iterdir())
    broken = dict(zip(names, REASONS))
    _break(archive, broken)
    out = tmp_path / "out"
    assert preprocess(archive, out) == 0
    rejects = read_rejects(out)
    for name, kind in broken.items():
        assert REASONS[kind] in rejects[name], (kind, rejects[name])
        assert "\n" not in rejects[name]
    m = manifest_json(out)
    assert m["summary"] == {"found": 11, "written": 1, "rejected": 10, "excluded": 0}
    assert "found 11 = written 1 + rejected 10 + excluded 0" in capsys.readouterr().out
    # --strict: the same run is an error, and leaves no manifest (nothing looks complete,
    # so train.py refuses the folder); the rejects say why.
    assert preprocess(archive, tmp_path / "strict", "--strict") == 1
    assert not (tmp_path / "strict" / "manifest.json").exists()
    assert set(read_rejects(tmp_path / "strict")) == set(broken)


def test_v2_patch_missing_on_disk_is_rejected(synth_v2: Path, tmp_path: Path) -> None:
    archive = tmp_path / "v2"
    shutil.copytree(synth_v2, archive)
    victim = pd.read_parquet(archive / "metadata.parquet")["patch_id"].iloc[0]
    shutil.rmtree(archive / "BigEarthNet-S2" / victim.rsplit("_", 2)[0] / victim)
    assert preprocess(archive, tmp_path / "out") == 0
    assert "missing on disk" in read_rejects(tmp_path / "out")[victim]


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing archive", "archive folder does not exist"),
        ("not an archive", "not a BigEarthNet archive"),
        ("unwritable out", "output folder not writable"),
        ("bad ratios", "--split-ratios"),
        ("bad task", "--task-index"),
    ],
)
def test_fatal_errors_exit_2_with_one_line(case, message, real_v1, tmp_path) -> None:
    archive, out, extra = real_v1, tmp_path / "out", []
    if case == "missing archive":
        archive = tmp_path / "nope"
    elif case == "not an archive":
        archive = tmp_path / "empty"
        archive.mkdir()
    elif case == "unwritable out":
        out = Path("/proc/forbidden/out")
    elif case == "bad ratios":
        extra = ["--split-ratios", "0.9,0.9"]
    elif case == "bad task":
        extra = ["--num-tasks", "2", "--task-index", "5"]
    cmd = [sys.executable, "-m", "bigearthnet.cli.preprocess", str(archive), str(out), *extra]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr


# --------------------------------------------------------------------------- determinism, resume


def test_workers_and_tasks_do_not_change_contents(synth_v1: Path, tmp_path: Path) -> None:
    single, multi = tmp_path / "one", tmp_path / "two"
    assert preprocess(synth_v1, single, "--shard-size", "40") == 0
    assert preprocess(synth_v1, multi, "--shard-size", "40", "--workers", "2") == 0
    assert shard_contents(single) == shard_contents(multi)
    sha = {s["file"]: s["sha256"] for s in manifest_json(single)["shards"]}
    assert sha == {s["file"]: s["sha256"] for s in manifest_json(multi)["shards"]}
    # Two tasks (two nodes) then a join: the same shards and manifest counts.
    tasks = tmp_path / "tasks"
    for i in range(2):
        assert preprocess(synth_v1, tasks, "--shard-size", "40", "--num-tasks", "2",
                          "--task-index", str(i)) == 0  # fmt: skip
    assert (tasks / "manifest.json").exists()  # the last task joined
    os.remove(tasks / "manifest.json")
    assert preprocess(synth_v1, tasks, "--shard-size", "40", "--join") == 0
    assert {s["file"]: s["sha256"] for s in manifest_json(tasks)["shards"]} == sha


def test_join_before_all_tasks_finished_is_an_error(synth_v1: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert preprocess(synth_v1, out, "--num-tasks", "3", "--task-index", "0") == 0
    assert not (out / "manifest.json").exists()
    assert preprocess(synth_v1, out, "--join") == 2


@pytest.mark.fault
def test_resume_after_kill_gives_same_shards(synth_v1: Path, tmp_path: Path, fault_row) -> None:
    reference = tmp_path / "reference"
    assert preprocess(synth_v1, reference, "--shard-size", "20") == 0
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "bigearthnet.cli.preprocess", str(synth_v1), str(out),
           "--shard-size", "20", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    parts = out / ".parts"
    deadline = time.time() + 60
    while time.time() < deadline and len(list(parts.glob("*.h5.json"))) < 3:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = {p.name for p in parts.glob("*.h5.json")}
    assert 0 < len(done_before) < 12, "kill landed outside the run; make the archive bigger"
    assert not (out / "manifest.json").exists()
    # Nothing under a final name is partial: every *.h5 opens and holds its full count.
    for path in out.glob("*.h5"):
        with h5py.File(path, "r") as f:
            assert f.attrs["count"] == len(f["names"]) == len(f["images"]) > 0
    mtimes = {p: p.stat().st_mtime_ns for p in out.glob("*.h5") if p.name + ".json" in done_before}
    assert preprocess(synth_v1, out, "--shard-size", "20") == 0
    assert all(p.stat().st_mtime_ns == t for p, t in mtimes.items())  # not redone
    assert shard_contents(out) == shard_contents(reference)
    assert read_manifest(out).counts == read_manifest(reference).counts
    assert not list(out.glob(".*.tmp-*"))
    fault_row(
        "preprocessing SIGKILLed while writing shards",
        runs=2,
        data_lost="none (finished shards kept, the rest redone: identical shards)",
        detect_s=None,
    )


def test_rerun_with_other_options_needs_overwrite(synth_v1: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert preprocess(synth_v1, out, "--shard-size", "60") == 0
    assert preprocess(synth_v1, out, "--shard-size", "30") == 2
    assert preprocess(synth_v1, out, "--shard-size", "30", "--overwrite") == 0
    assert len(manifest_json(out)["shards"]) == 5 + 2 + 2  # ceil(144/30), ceil(48/30) x 2


def test_slurm_task_defaults() -> None:
    assert slurm_task_defaults({}) == (1, 0)
    array = {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "3"}
    assert slurm_task_defaults(array) == (4, 2)
    step = {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "8", "SLURM_PROCID": "3"}
    assert slurm_task_defaults(step) == (8, 3)
    batch_script = {"SLURM_NTASKS": "8", "SLURM_PROCID": "0"}  # not inside srun
    assert slurm_task_defaults(batch_script) == (1, 0)


def test_cli_help_explains_every_flag() -> None:
    result = subprocess.run([sys.executable, "-m", "bigearthnet.cli.preprocess", "--help"],
                            capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert result.returncode == 0
    for flag in (
        "--version",
        "--splits-dir",
        "--split-ratios",
        "--exclude",
        "--resampling",
        "--workers",
        "--num-tasks",
        "--task-index",
        "--join",
        "--strict",
        "--overwrite",
        "--map-label-mismatch",
    ):
        assert flag in result.stdout


# A real SIGKILL at a chosen line of preprocessing: the wrapped function kills the process
# when it is called (the Nth time), so the fault lands exactly where the row says.
KILL_AT = """
import os, signal, sys
import bigearthnet.formats.manifest as manifest
import bigearthnet.formats.shards as shards
where, nth = sys.argv[1], int(sys.argv[2])
calls = [0]
def dying(original):
    def wrapper(*args, **kwargs):
        calls[0] += 1
        if calls[0] == nth:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)
    return wrapper
if where == "join":  # the manifest's write (manifest.write_manifest), the join's last step
    manifest.atomic_write_json = dying(manifest.atomic_write_json)
else:  # appending a block to a shard under its temporary name
    shards.ShardWriter.append = dying(shards.ShardWriter.append)
from bigearthnet.cli.preprocess import main
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.fault
@pytest.mark.parametrize("where, nth", [("join", 1), ("shard", 3)])
def test_kill_during_join_or_shard_write_then_rerun_gives_same_shards(
    where: str, nth: int, synth_v1: Path, tmp_path: Path, fault_row
) -> None:
    """SIGKILL while joining (the manifest's write, after rejects.csv) or inside a shard's
    write (its 3rd block): no manifest, no partial shard
    under a final name; the rerun completes with the shards of an undisturbed run."""
    reference = tmp_path / "reference"
    assert preprocess(synth_v1, reference, "--shard-size", "20") == 0
    out = tmp_path / "killed"
    argv = [str(synth_v1), str(out), "--shard-size", "20", "--workers", "1", "--no-progress"]
    killed = subprocess.run([sys.executable, "-c", KILL_AT, where, str(nth), *argv], cwd=REPO)
    assert killed.returncode == -signal.SIGKILL
    assert not (out / "manifest.json").exists()
    for path in out.glob("*.h5"):  # every shard under its final name is whole
        with h5py.File(path, "r") as f:
            assert f.attrs["count"] == len(f["names"]) == len(f["images"]) > 0
    finished, total = len(list(out.glob("*.h5"))), len(list(reference.glob("*.h5")))
    assert (finished == total) if where == "join" else (finished < total)
    assert preprocess(synth_v1, out, "--shard-size", "20") == 0
    assert shard_contents(out) == shard_contents(reference)
    assert read_manifest(out).counts == read_manifest(reference).counts
    assert (out / "rejects.csv").read_text() == (reference / "rejects.csv").read_text()
    assert not list(out.glob(".*.tmp-*")) and not list(out.glob("*.tmp-*"))
    moment = "during the join" if where == "join" else "inside a shard write"
    fault_row(
        f"preprocessing SIGKILLed {moment}",
        runs=2,
        data_lost="none (rerun: "
        + ("joins again" if where == "join" else "the partial shard redone")
        + ", identical shards)",
        detect_s=None,
    )


@pytest.mark.bad_input
@pytest.mark.parametrize("out", ["user files", "", "shards made before marks"])
def test_shards_go_only_into_a_folder_of_this_command(
    real_v1, tmp_path, monkeypatch, reported_errors, bad_input_row, out
) -> None:
    """Issue #46: with OUT "" (the working directory) or a folder of the user's files, the
    shards were written beside those files; a shards folder of an earlier version (no mark)
    is still resumed."""
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    if out == "shards made before marks":
        assert preprocess(real_v1, folder / "shards") == 0
        (folder / "shards" / ".bigearthnet-preprocess").unlink()
        manifest = manifest_json(folder / "shards")
        code = preprocess(real_v1, folder / "shards")
        assert code == 0 and manifest_json(folder / "shards")["shards"] == manifest["shards"]
        bad_input_row("OUT a shards folder without the mark (an earlier version's)",
                      "bigearthnet-preprocess ARCHIVE OUT", code, "resumed, as before")  # fmt: skip
        return
    (folder / "notes.txt").write_text("mine\n")
    code = _preprocess_text(real_v1, str(folder) if out else "")
    assert code == 2 and sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    needle = (
        "holds other files (notes.txt) and is no folder of bigearthnet-preprocess"
        if out
        else "argument OUT: an empty path names the working directory"
    )
    assert needle in reported_errors()[-1]
    bad_input_row(f"OUT {'a folder of user files' if out else repr(out)}",
                  "bigearthnet-preprocess ARCHIVE OUT", code,
                  "refused; no shard beside the user's files")  # fmt: skip


def _preprocess_text(archive: Path, out: str) -> int:
    from bigearthnet.cli.preprocess import main

    return main([str(archive), out, "--no-progress"])
