"""The export's STAC item: valid MLM v1.5.2 offline (no socket may open), and the validator
really rejects what the schema forbids."""

from __future__ import annotations

import copy
import json
import socket
from pathlib import Path

import pytest

from bigearthnet.export.stac import MLM_SCHEMA, validate_item
from bigearthnet.formats import exported
from bigearthnet.formats.exported import ExportError, read_export_info
from bigearthnet.formats.stac_validation import bundled_schemas


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test: the schemas must all be local."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access during validation: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture(scope="module")
def item(tmp_path_factory, trained_run: Path) -> dict:
    from bigearthnet.cli.export import main as export_main

    out = tmp_path_factory.mktemp("stac") / "export"
    assert export_main([str(trained_run), "--out", str(out), "--format", "savedmodel"]) == 0
    return json.loads((out / exported.STAC_FILE).read_text())


def test_item_is_valid_mlm_offline(item, no_network):
    validate_item(item)
    assert MLM_SCHEMA in item["stac_extensions"] and item["stac_version"] == "1.1.0"
    properties = item["properties"]
    assert properties["mlm:framework"] == "TensorFlow"
    assert properties["mlm:tasks"] == ["classification"]
    (model_input,) = properties["mlm:input"]
    assert model_input["input"] == {
        "shape": [-1, 120, 120, 12],
        "dim_order": ["batch", "height", "width", "bands"],
        "data_type": "uint16",
    }
    assert model_input["bands"][0] == "B01" and model_input["value_scaling"] is None
    (output,) = properties["mlm:output"]
    assert "Multi-label" in output["description"]
    classes = output["classification:classes"]
    assert len(classes) == 19 and classes[0]["color_hint"] == "e6004d"
    assert item["assets"]["savedmodel"]["mlm:artifact_type"] == "tf.saved_model.save"
    assert "mlm:model" in item["assets"]["savedmodel"]["roles"]


def test_bundled_schema_is_the_one_stac_model_writes():
    from stac_model.schema import SCHEMA_URI

    assert SCHEMA_URI == MLM_SCHEMA
    assert bundled_schemas()[MLM_SCHEMA]["$id"] == MLM_SCHEMA


def test_footprint_is_the_training_patches(item, shards_v1):
    west, south, east, north = item["bbox"]
    # The synthetic archive lays its tiles in the BigEarthNet countries' UTM zones 29-35 N.
    assert -12 < west < east < 35 and 36 < south < north < 72
    assert item["properties"]["start_datetime"] <= item["properties"]["end_datetime"]


@pytest.mark.parametrize(
    "damage",
    [
        "task not in the vocabulary",
        "no mlm:input",
        "model asset without artifact type",
        "bad dtype",
    ],
)
def test_validator_rejects_what_the_schema_forbids(item, damage, no_network):
    broken = copy.deepcopy(item)
    properties = broken["properties"]
    if damage == "task not in the vocabulary":
        properties["mlm:tasks"] = ["multi-label-classification"]
    elif damage == "no mlm:input":
        del properties["mlm:input"]
    elif damage == "model asset without artifact type":
        del broken["assets"]["savedmodel"]["mlm:artifact_type"]
    elif damage == "bad dtype":
        properties["mlm:input"][0]["input"]["data_type"] = "uint12"
    with pytest.raises(ExportError, match="not valid MLM v1.5.2"):
        validate_item(broken)


def test_record_round_trip(tmp_path, trained_run):
    from bigearthnet.cli.export import main as export_main

    out = tmp_path / "export"
    assert export_main([str(trained_run), "--out", str(out), "--format", "savedmodel"]) == 0
    info = read_export_info(out)
    (out / exported.INFO_FILE).write_text(json.dumps({"format_version": 99}))
    with pytest.raises(ExportError, match="format_version 99"):
        read_export_info(out)
    assert info.num_classes == 19 and len(info.band_mean) == len(info.bands) == 12
