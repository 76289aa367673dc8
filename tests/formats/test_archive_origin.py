"""The synthetic archive's mark and the manifest's origin: written by the generator, read by
preprocessing into manifest.json; an archive without the mark is real, a manifest without
the field unknown; a damaged mark or an unknown origin is one line naming the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import preprocess, train_argv

from bigearthnet.core.errors import InputError
from bigearthnet.formats.archive_origin import MARK, read_origin, write_synthetic_mark
from bigearthnet.formats.manifest import MANIFEST, Manifest, read_manifest, write_manifest
from bigearthnet.formats.shards import ShardError


def test_the_mark_round_trips_and_its_absence_means_real(tmp_path: Path) -> None:
    assert read_origin(tmp_path).kind == "real" and not read_origin(tmp_path).synthetic
    write_synthetic_mark(tmp_path, layout="v2", difficulty="realistic", seed=0, patches=4000)
    origin = read_origin(tmp_path)
    assert origin.synthetic
    assert origin.detail == "bigearthnet-synth: 4,000 realistic v2 patches, seed 0"


@pytest.mark.parametrize("text", ['{"made_by": "bigearthnet-synth", "lay', "[1, 2]", "{}"])
def test_a_damaged_mark_is_one_line_naming_it(tmp_path: Path, text: str) -> None:
    (tmp_path / MARK).write_text(text)
    with pytest.raises(InputError) as caught:
        read_origin(tmp_path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{tmp_path / MARK}: unreadable mark")


def test_old_manifests_read_as_unknown_and_odd_origins_are_refused(tmp_path: Path) -> None:
    write_manifest(tmp_path, Manifest(shards=(), counts={}, origin="synthetic", origin_detail="x"))
    assert read_manifest(tmp_path).archive_origin.synthetic
    body = json.loads((tmp_path / MANIFEST).read_text())
    del body["origin"], body["origin_detail"]  # as written before origins were recorded
    (tmp_path / MANIFEST).write_text(json.dumps(body))
    assert read_manifest(tmp_path).origin == "unknown"
    (tmp_path / MANIFEST).write_text(json.dumps({**body, "origin": "made up"}))
    with pytest.raises(ShardError, match="origin 'made up' is none of synthetic, real, unknown"):
        read_manifest(tmp_path)


@pytest.mark.bad_input
def test_a_truncated_mark_stops_preprocessing_first(
    synth_v1, tmp_path, reported_errors, bad_input_row
) -> None:
    archive = tmp_path / "archive"
    shutil.copytree(synth_v1, archive)
    (archive / MARK).write_text((archive / MARK).read_text()[:20])
    out = tmp_path / "out"
    code = preprocess(archive, out)
    assert code == 2 and not out.exists()
    (line,) = reported_errors()
    assert str(archive / MARK) in line and "unreadable mark of a synthetic archive" in line
    bad_input_row("a truncated SYNTHETIC.json", "bigearthnet-preprocess ARCHIVE OUT", code,
                  "refused before any shard, naming the mark; no OUT")  # fmt: skip


@pytest.mark.bad_input
def test_a_manifest_of_unknown_origin_is_refused(
    shards_v1, tmp_path, reported_errors, bad_input_row
) -> None:
    import train

    data = tmp_path / "shards"
    shutil.copytree(shards_v1, data)
    body = json.loads((data / MANIFEST).read_text())
    (data / MANIFEST).write_text(json.dumps({**body, "origin": "Synthetic "}))
    code = train.main(train_argv(data, tmp_path / "run", 1))
    assert code == 2
    line = reported_errors()[-1]
    assert str(data / MANIFEST) in line and "origin 'Synthetic '" in line
    bad_input_row("manifest origin 'Synthetic '", "train.py --data SHARDS", code,
                  "refused, naming the manifest and the value")  # fmt: skip
