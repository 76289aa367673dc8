"""formats/shard_maps.py and the manifest's reference_maps: the map datasets a ShardWriter
writes and read_rows reads, the section's counts and shares, old manifests without it."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

from bigearthnet.core import constants
from bigearthnet.formats import shard_maps
from bigearthnet.formats.manifest import Manifest, read_manifest, write_manifest
from bigearthnet.formats.shards import ShardWriter, read_rows

ATTRS = {"bands": ["B02"], "classes19": list(constants.CLASSES_19)}


def _block(maps: np.ndarray, has: list[int]) -> dict:
    n = len(maps)
    return {
        "images": np.zeros((n, 120, 120, 1), np.uint16),
        "labels19": np.zeros((n, 19), np.uint8),
        "names": [f"p{i}" for i in range(n)],
        "crs": ["EPSG:32633"] * n,
        "ulxy": np.zeros((n, 2)),
        shard_maps.MAP_KEY: maps,
        shard_maps.HAS_MAP_KEY: np.asarray(has, np.uint8),
    }


def test_the_writer_stores_maps_and_the_reader_reads_them(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    maps = rng.integers(0, 19, (20, 120, 120)).astype(np.uint8)
    maps[3] = shard_maps.absent_map()
    writer = ShardWriter(tmp_path / "train-00000-of-00001.h5", "train", 20, ATTRS, False, True)
    writer.append(_block(maps[:12], [1] * 12))
    writer.append(_block(maps[12:], [1] * 8))
    writer.commit()
    path = tmp_path / "train-00000-of-00001.h5"
    np.testing.assert_array_equal(read_rows(path, "map19", 0, 20), maps)
    assert read_rows(path, "has_map", 0, 20).tolist() == [1] * 20
    with h5py.File(path) as f:
        assert f["map19"].compression == "gzip" and f["map19"].chunks == (16, 120, 120)
        assert f.attrs["map_no_label"] == constants.NO_LABEL
    plain = ShardWriter(tmp_path / "val-00000-of-00001.h5", "val", 2, ATTRS, False)
    block = _block(maps[:2], [1, 1])
    del block["map19"], block["has_map"]
    plain.append(block)
    plain.commit()
    with h5py.File(tmp_path / "val-00000-of-00001.h5") as f:
        assert "map19" not in f and "has_map" not in f


def test_counts_and_shares_per_split() -> None:
    maps = np.full((2, 120, 120), constants.NO_LABEL, np.uint8)
    maps[0, :60] = 2
    maps[1, :30] = 18
    counts = shard_maps.class_pixels(maps)
    assert counts[2] == 7200 and counts[18] == 3600 and counts[19] == 28800 - 10800
    stats = shard_maps.MapStats(
        patches={"train": 2, "val": 0, "test": 0},
        class_pixels={"train": counts.tolist(), "val": [0] * 20, "test": [0] * 20},
    )
    assert stats.class_share("train")[2] == 0.25 and stats.no_label_share("train") == 0.625
    assert stats.class_share("val") == [0.0] * 19 and stats.no_label_share("val") == 0.0
    body = stats.to_json()
    assert body["class_share"]["train"][18] == 0.125
    assert shard_maps.MapStats.from_json(json.loads(json.dumps(body))) == stats


def test_a_manifest_without_the_field_has_no_maps(tmp_path: Path) -> None:
    stats = shard_maps.MapStats(mismatched=3, map_only=3, refused=1)
    write_manifest(tmp_path, Manifest(shards=(), counts={"train": 0}, reference_maps=stats))
    assert read_manifest(tmp_path).reference_maps == stats and read_manifest(tmp_path).has_maps
    raw = json.loads((tmp_path / "manifest.json").read_text())
    del raw["reference_maps"]  # a manifest written before maps existed
    (tmp_path / "manifest.json").write_text(json.dumps(raw))
    manifest = read_manifest(tmp_path)
    assert manifest.reference_maps is None and not manifest.has_maps
