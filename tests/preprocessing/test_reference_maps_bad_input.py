"""Bad reference maps and bad --map-label-mismatch values (rows of `make bad-input`): a map
is placed by its georeferencing or refused for its patch with the reason in rejects.csv; the
patch keeps its labels either way, and no map is ever stored shifted."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import rasterio
from helpers import preprocess
from rasterio.transform import Affine

from bigearthnet.core import constants
from bigearthnet.formats.manifest import read_manifest
from bigearthnet.formats.shards import read_locations, read_rows
from bigearthnet.preprocessing.archive import V2_MAPS_DIR, V2_S2_DIR, v2_map_file

pytestmark = [pytest.mark.bad_input, pytest.mark.xdist_group("reference-maps-bad-input")]
COMMAND = "bigearthnet-preprocess ARCHIVE OUT"
REFUSED = {  # the case -> what rejects.csv says after "reference map refused, patch kept ..."
    "missing": "missing reference map",
    "truncated": "is truncated",
    "60 x 60 at 10 m": "covers 25% of its patch",
    "shifted by 20 m": "covers 98% of its patch (120x120 px of 10 m, its corner +20 m east",
    "shifted by 5 m": "off the patch's 10 m grid (its corner is +5 m east",
    "on another CRS": "is on EPSG:3035",
    "of float values": "holds float32, not integer codes",
}
PLACED = ("60 x 60 at 20 m", "larger, around its patch")
STORED_AS_NO_LABEL = ("with codes outside CORINE", "with its declared nodata 65535")
NO_BANDS = {"without its S2 folder": "listed in metadata.parquet but missing on disk",
            "with an empty S2 folder": "missing band B01"}  # fmt: skip
CASES = (*REFUSED, *PLACED, *STORED_AS_NO_LABEL, *NO_BANDS)


def _rewrite(path: Path, codes: np.ndarray, *, dx: float = 0.0, dy: float = 0.0,
             pixel: float = 10.0, crs: str | None = None, nodata: int = 0) -> None:  # fmt: skip
    """Write ``codes`` as the map at ``path``, its corner moved by dx east, dy north."""
    with rasterio.open(path) as src:
        profile, t = src.profile, src.transform
    profile.update(height=codes.shape[0], width=codes.shape[1], dtype=codes.dtype.name,
                   transform=Affine(pixel, 0, t.c + dx, 0, -pixel, t.f + dy), nodata=nodata,
                   crs=crs or profile["crs"])  # fmt: skip
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(codes, 1)


def _break(archive: Path, case: str, name: str) -> None:
    path = Path(v2_map_file(archive / V2_MAPS_DIR, name))
    with rasterio.open(path) as src:
        codes = src.read(1)
    if case == "missing":
        path.unlink()
    elif case == "truncated":
        path.write_bytes(path.read_bytes()[:300])
    elif case == "60 x 60 at 10 m":
        _rewrite(path, codes[:60, :60])
    elif case == "shifted by 20 m":
        _rewrite(path, codes, dx=20)
    elif case == "shifted by 5 m":
        _rewrite(path, codes, dx=5)
    elif case == "on another CRS":
        _rewrite(path, codes, crs="EPSG:3035")
    elif case == "of float values":
        _rewrite(path, codes.astype(np.float32))
    elif case == "60 x 60 at 20 m":  # the simple maps' borders lie on the 60 m grid
        _rewrite(path, codes[::2, ::2], pixel=20.0)
    elif case == "larger, around its patch":
        larger = np.full((140, 150), 112, np.uint16)
        larger[10:130, 20:140] = codes
        _rewrite(path, larger, dx=-200, dy=100)
    elif case == "with codes outside CORINE":
        codes[:12, :] = 999
        codes[12:24, :] = 7
        _rewrite(path, codes)
    elif case == "with its declared nodata 65535":
        codes[:24, :] = 65535
        _rewrite(path, codes, nodata=65535)
    else:  # a map folder whose patch has no bands
        s2 = archive / V2_S2_DIR / name.rsplit("_", 2)[0] / name
        shutil.rmtree(s2)
        if case == "with an empty S2 folder":
            s2.mkdir()


@pytest.fixture(scope="module")
def broken(synth_v2: Path, tmp_path_factory) -> dict:
    """synth_v2 with one patch per case broken, preprocessed once: the patch of each case,
    its map before, the rows written (name -> labels, map, has_map), rejects, manifest."""
    root = tmp_path_factory.mktemp("maps-bad")
    archive = root / "v2"
    shutil.copytree(synth_v2, archive)
    table = pd.read_parquet(archive / "metadata.parquet")
    victims = dict(zip(CASES, table["patch_id"]))
    before = {name: _stored(archive, name) for name in victims.values()}
    for case, name in victims.items():
        _break(archive, case, name)
    out = root / "out"
    assert preprocess(archive, out) == 0
    manifest = read_manifest(out)
    rows = {}
    for entry in manifest.shards:
        names = read_locations(entry.path(out)).names
        columns = [read_rows(entry.path(out), k, 0, entry.count)
                   for k in ("labels19", "map19", "has_map")]  # fmt: skip
        rows.update({n: r for n, *r in zip(names, *columns)})
    with open(out / "rejects.csv", newline="") as f:
        rejects = {row["patch"]: row["reason"] for row in csv.DictReader(f)}
    labels = dict(zip(table["patch_id"], table["labels"]))
    return dict(victims=victims, before=before, rows=rows, rejects=rejects,
                manifest=manifest, labels=labels, archive=archive)  # fmt: skip


def _stored(archive: Path, name: str) -> np.ndarray:
    """What the patch's pristine map becomes in the shards."""
    with rasterio.open(v2_map_file(archive / V2_MAPS_DIR, name)) as src:
        return constants.corine_to_19(src.read(1))


def _kept_with_labels(broken: dict, name: str) -> tuple:
    labels19, map19, has_map = broken["rows"][name]
    names = {constants.CLASSES_19[k] for k in np.flatnonzero(labels19)}
    assert names == set(broken["labels"][name])  # the patch keeps its labels
    return map19, has_map


@pytest.mark.parametrize("case", REFUSED)
def test_a_map_that_cannot_be_placed_is_refused(case, broken, bad_input_row) -> None:
    name = broken["victims"][case]
    map19, has_map = _kept_with_labels(broken, name)
    assert has_map == 0 and (map19 == constants.NO_LABEL).all()  # absent, never shifted
    reason = broken["rejects"][name]
    assert reason.startswith("reference map refused, patch kept without it: ") and (
        REFUSED[case] in reason
    ), reason
    assert broken["manifest"].reference_maps.refused == len(REFUSED)
    bad_input_row(f"a reference map {case}", COMMAND, 0,
                  "map refused for that patch (reason in rejects.csv); the patch is written "
                  "with its labels, has_map 0")  # fmt: skip


@pytest.mark.parametrize("case", PLACED)
def test_a_map_on_another_grid_is_placed_by_its_georeferencing(case, broken, bad_input_row):
    name = broken["victims"][case]
    map19, has_map = _kept_with_labels(broken, name)
    assert has_map == 1 and name not in broken["rejects"]
    np.testing.assert_array_equal(map19, broken["before"][name])
    verdict = "placed by its georeferencing: the patch's window, equal to its 10 m map"
    bad_input_row(f"a reference map {case}", COMMAND, 0, verdict)


@pytest.mark.parametrize("case", STORED_AS_NO_LABEL)
def test_unknown_codes_and_declared_nodata_have_no_label(case, broken, bad_input_row) -> None:
    name = broken["victims"][case]
    map19, has_map = _kept_with_labels(broken, name)
    assert has_map == 1 and name not in broken["rejects"]
    assert (map19[:24] == constants.NO_LABEL).all()
    np.testing.assert_array_equal(map19[24:], broken["before"][name][24:])
    maps = broken["manifest"].reference_maps
    assert maps.unknown_code_pixels == 24 * 120  # 999 and 7; not the declared nodata
    assert sum(c[-1] for c in maps.class_pixels.values()) == 2 * 24 * 120  # no-label pixels
    verdict = {"with codes outside CORINE": "stored as no label (255), counted in the manifest's "
               "unknown_code_pixels and the run's summary",
               "with its declared nodata 65535": "the file's nodata read, not assumed: no label, "
               "not counted as unknown"}[case]  # fmt: skip
    bad_input_row(f"a reference map {case}", COMMAND, 0, verdict)


@pytest.mark.parametrize("case", NO_BANDS)
def test_a_map_whose_patch_has_no_bands(case, broken, bad_input_row) -> None:
    name = broken["victims"][case]
    assert name not in broken["rows"] and NO_BANDS[case] in broken["rejects"][name]
    verdict = "the patch is rejected for its bands (rejects.csv); its map is not read"
    bad_input_row(f"a reference map, its patch {case}", COMMAND, 0, verdict)


def test_strict_refuses_a_refused_map(broken, tmp_path, bad_input_row) -> None:
    out = tmp_path / "strict"
    code = preprocess(broken["archive"], out, "--strict")
    assert code == 1 and not (out / "manifest.json").exists()
    with open(out / "rejects.csv", newline="") as f:
        reasons = {row["patch"]: row["reason"] for row in csv.DictReader(f)}
    assert "missing reference map" in reasons[broken["victims"]["missing"]]
    bad_input_row("a refused reference map with --strict", f"{COMMAND} --strict", code,
                  "exit 1, rejects.csv, no manifest (as for a rejected patch)")  # fmt: skip


# ----------------------------------------------------------------- maps against labels


@pytest.fixture(scope="module")
def disagreeing(synth_v2: Path, tmp_path_factory) -> tuple[Path, str, str]:
    """synth_v2 with two maps that disagree with their labels: one holds a class its labels
    lack (a 60 m corner of Arable land or Pastures), one lacks a class its labels name."""
    archive = tmp_path_factory.mktemp("maps-disagree") / "v2"
    shutil.copytree(synth_v2, archive)
    table = pd.read_parquet(archive / "metadata.parquet")
    extra, lacking = (table[table["labels"].map(len) == n]["patch_id"].iloc[0] for n in (1, 2))
    path = Path(v2_map_file(archive / V2_MAPS_DIR, extra))
    with rasterio.open(path) as src:
        codes = src.read(1)
    codes[:6, :6] = 231 if codes[0, 0] == 211 else 211  # Pastures or Arable land
    _rewrite(path, codes)
    path = Path(v2_map_file(archive / V2_MAPS_DIR, lacking))
    with rasterio.open(path) as src:
        codes = src.read(1)
    codes[:] = codes[0, 0]  # one of its two classes everywhere
    _rewrite(path, codes)
    return archive, extra, lacking


@pytest.mark.parametrize("policy", ["keep", "drop-map", "drop-patch"])
def test_maps_that_disagree_with_labels(policy, disagreeing, tmp_path, bad_input_row) -> None:
    archive, extra, lacking = disagreeing
    out = tmp_path / "out"
    assert preprocess(archive, out, "--map-label-mismatch", policy) == 0
    manifest = read_manifest(out)
    maps = manifest.reference_maps
    assert (maps.mismatched, maps.map_only, maps.labels_only) == (2, 1, 1)  # counted always
    assert maps.mismatch_policy == policy
    rows = {}
    for entry in manifest.shards:
        names = read_locations(entry.path(out)).names
        rows.update(zip(names, read_rows(entry.path(out), "has_map", 0, entry.count)))
    with open(out / "rejects.csv", newline="") as f:
        rejects = {row["patch"]: row["reason"] for row in csv.DictReader(f)}
    for name in (extra, lacking):
        if policy == "keep":
            assert rows[name] == 1 and name not in rejects
        elif policy == "drop-map":
            assert rows[name] == 0 and "reference map dropped" in rejects[name]
        else:
            assert name not in rows and "map and labels disagree" in rejects[name]
    if policy != "keep":
        assert "the map holds" in rejects[extra] and "the labels name" in rejects[lacking]
    assert manifest.summary["rejected"] == (2 if policy == "drop-patch" else 0)
    verdict = {"keep": "both stored, counted in the manifest (mismatched, map_only, "
               "labels_only)", "drop-map": "patches written without their maps (has_map 0), "
               "reason in rejects.csv, counted", "drop-patch": "patches left out, reason in "
               "rejects.csv, counted as rejected"}[policy]  # fmt: skip
    bad_input_row(f"maps that disagree with their labels, --map-label-mismatch {policy}",
                  f"{COMMAND} --map-label-mismatch {policy}", 0, verdict)  # fmt: skip


# ----------------------------------------------------------------- the option


@pytest.mark.parametrize("value", ["maybe", "", "KEEP"])
def test_an_unknown_policy_is_one_line(value, synth_v2, tmp_path, reported_errors, bad_input_row):
    out = tmp_path / "out"
    code = preprocess(synth_v2, out, "--map-label-mismatch", value)
    assert code == 2 and not out.exists()
    line = reported_errors()[-1]
    assert "--map-label-mismatch" in line and "keep" in line and "Traceback" not in line
    bad_input_row(f"--map-label-mismatch {value!r}", f"{COMMAND} --map-label-mismatch X", code,
                  "refused: one line naming the option and its choices")  # fmt: skip


def test_a_policy_without_maps_is_refused(real_v1, tmp_path, reported_errors, bad_input_row):
    out = tmp_path / "out"
    code = preprocess(real_v1, out, "--map-label-mismatch", "drop-patch")
    assert code == 2 and not out.exists()
    line = reported_errors()[-1]
    assert "--map-label-mismatch drop-patch" in line and "no Reference_Maps/" in line
    bad_input_row("--map-label-mismatch drop-patch on a v1 archive (no maps)",
                  f"{COMMAND} --map-label-mismatch drop-patch", code,
                  "refused before anything is written: no map to compare")  # fmt: skip


def test_a_rerun_after_the_policy_changed(synth_v2, tmp_path, reported_errors, bad_input_row):
    out = tmp_path / "out"
    assert preprocess(synth_v2, out) == 0
    before = (out / "manifest.json").read_bytes()
    code = preprocess(synth_v2, out, "--map-label-mismatch", "drop-patch")
    assert code == 2 and (out / "manifest.json").read_bytes() == before
    assert "--overwrite" in reported_errors()[-1]
    assert preprocess(synth_v2, out, "--map-label-mismatch", "drop-patch", "--overwrite") == 0
    assert read_manifest(out).reference_maps.mismatch_policy == "drop-patch"
    bad_input_row("a rerun into OUT with --map-label-mismatch changed", COMMAND, code,
                  "refused (another plan): --overwrite or another OUT; shards kept")  # fmt: skip


def test_a_rerun_after_maps_appeared(synth_v2, tmp_path, reported_errors, bad_input_row) -> None:
    """v2 without Reference_Maps/ works as before maps (no map datasets, the manifest says
    so); the same OUT after the maps appear is another plan, not a mix of shards."""
    archive, out = tmp_path / "v2", tmp_path / "out"
    shutil.copytree(synth_v2, archive, ignore=shutil.ignore_patterns(V2_MAPS_DIR))
    assert preprocess(archive, out) == 0
    manifest = read_manifest(out)
    assert manifest.reference_maps is None
    for entry in manifest.shards:
        with pytest.raises(Exception, match="map19"):
            read_rows(entry.path(out), "map19", 0, 1)
    shutil.copytree(synth_v2 / V2_MAPS_DIR, archive / V2_MAPS_DIR)
    code = preprocess(archive, out)
    assert code == 2 and "--overwrite" in reported_errors()[-1]
    assert read_manifest(out).reference_maps is None  # the earlier result is untouched
    bad_input_row("a rerun into OUT after Reference_Maps/ appeared", COMMAND, code,
                  "refused (another plan): no mix of shards with and without maps")  # fmt: skip
