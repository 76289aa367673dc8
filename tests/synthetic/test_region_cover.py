"""The realistic region's land cover: the archive's landscape model over the blocks."""

from __future__ import annotations

import numpy as np
import pytest

from bigearthnet.synthetic import landscape as ls
from bigearthnet.synthetic import region_cover as cover
from bigearthnet.synthetic.region import RegionSpec, generate_region, pixel_cover, read_truth
from bigearthnet.synthetic.region_cover import FLOOD_CLASS

SPEC = RegionSpec(tiles=2, dates=5, size=240, block=1200.0, seed=0)  # both kinds of event


@pytest.fixture(scope="module")
def region(tmp_path_factory):
    out = tmp_path_factory.mktemp("cover") / "region"
    generate_region(out, SPEC)
    return out


def test_blocks_hold_inland_landscapes_and_changes_that_happen(region):
    truth = read_truth(region)
    start = truth["classes"][0]
    assert ls.SEA not in start and ls.BEACH not in start  # 12 E 48 N: no coast
    counts = np.bincount(start.ravel(), minlength=ls.N)
    assert counts.max() < start.size * 0.6  # several classes, none everywhere
    kinds = {e["kind"] for e in truth["events"]}
    assert kinds == {"lasting", "transient"}
    for event in truth["events"]:
        r, c = event["block"]
        before = truth["classes"][event["date_index"] - 1, r, c]
        assert event["from"] == before
        if event["kind"] == "lasting":
            assert event["to"] in cover.LASTING[before]  # felled, built on, ploughed
            assert (truth["classes"][event["date_index"] :, r, c] == event["to"]).all()
        else:
            assert before in cover.FLOODABLE and event["to"] == FLOOD_CLASS
            assert truth["classes"][event["date_index"] + 1, r, c] == before


def test_small_features_are_on_the_ground_but_not_in_the_blocks(region):
    truth = read_truth(region)
    assert 0.25 < len(truth["features"]) / truth["classes"][0].size < 0.65
    block_area = truth["block_m"] ** 2
    for f in truth["features"]:
        r, c = f["block"]
        assert f["class"] != truth["classes"][0, r, c]
        assert np.pi * f["radius"] ** 2 < ls.MMU * block_area  # under the mapping unit
    tile = truth["tiles"][0]
    (rows, cols), feature = pixel_cover(tile, SPEC, truth)
    on_ground = feature >= 0
    assert 0.0 < on_ground.mean() < ls.MMU  # features cover pixels, a minority of them
    # A feature's pixels take its class; every other pixel its block's.
    assert (feature[on_ground] != truth["classes"][0][rows, cols][on_ground]).all()
