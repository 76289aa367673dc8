"""A region at a cell under 60 m from a model with the dense head, end to end: a synthetic v2
archive with Reference_Maps, preprocessed, the tiny model trained with its head
(``trained_head_run``), each scene mapped at 10 m, the products on a 20 m grid."""

from __future__ import annotations

import json

import pytest
import rasterio
from region_cli import map_region, scene_maps, scenes_of

from bigearthnet.synthetic.region_score import score_series

pytestmark = pytest.mark.slow  # 10 scenes at 10 m and a 20 m series: ~1 min


def test_a_dense_head_model_maps_a_region_at_20m(simple_region, trained_head_run, tmp_path):
    out = tmp_path / "series"
    code = map_region(out, trained_head_run, *scenes_of(simple_region),
                      extra=("--cell", "20", "--window", "192"))  # fmt: skip
    assert code == 0
    for path in scene_maps(out):
        with rasterio.open(path) as src:
            assert src.res == (10.0, 10.0) and src.tags()["head"] == "dense head (per pixel)"
    record = json.loads((out / "consistency.json").read_text())
    assert record["grid"]["cell_m"] == 20.0 and not record["skipped"]
    with rasterio.open(out / "periods" / f"{record['periods'][0]}.tif") as src:
        assert src.res == (20.0, 20.0) and src.tags()["head"] == "dense head (per pixel)"
    score = score_series(simple_region, out)
    print(score.summary())
    assert min(score.pixel_agreement) > 0.5, score.summary()  # 19 classes: chance ~0.05
