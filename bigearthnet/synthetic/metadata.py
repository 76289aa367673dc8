"""A synthetic archive's label metadata in BigEarthNet's formats: v1's labels JSONs (S2
and S1) and reBEN's parquet tables (``metadata.parquet`` and the snow/cloud table).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path

from bigearthnet.core.constants import PATCH_METRES
from bigearthnet.preprocessing.archive import V2_METADATA, V2_SNOW_CLOUD
from bigearthnet.preprocessing.sentinel1 import PAIR_KEY
from bigearthnet.synthetic.places import Tile, stamp, utm_wkt


def v1_labels_json(tile: Tile, labels: Sequence[str], ulx: int, uly: int) -> str:
    """A v1 patch's ``<name>_labels_metadata.json``: its labels, corner, projection,
    L1C tile source and acquisition date, as BigEarthNet v1.0 writes them."""
    baseline = "N0205" if tile.when < dt.datetime(2017, 11, 1) else "N0206"
    meta = {
        "labels": list(labels),
        "coordinates": {
            "ulx": ulx,
            "uly": uly,
            "lrx": ulx + PATCH_METRES,
            "lry": uly - PATCH_METRES,
        },
        "projection": utm_wkt(tile.zone),
        "tile_source": (
            f"{tile.mission}_MSIL1C_{stamp(tile.when, tile.strip_hour)}_{baseline}"
            f"_R{tile.orbit:03d}_T{tile.mgrs}_{stamp(tile.processed)}.SAFE"
        ),
        "acquisition_date": tile.when.strftime("%Y-%m-%d %H:%M:%S"),
    }
    return json.dumps(meta) + "\n"


def v1_s1_json(labels: Sequence[str], v1_name: str) -> str:
    """A v1 S1 patch's labels JSON: its labels and the S2 patch it pairs with."""
    return json.dumps({"labels": list(labels), PAIR_KEY: v1_name}) + "\n"


def write_v2_tables(root: Path, rows: list[dict]) -> None:
    """``metadata.parquet`` and the snow/cloud table: reBEN's columns, rows sorted by
    patch_id; flagged patches in the second file only."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("patch_id", pa.string()),
            ("labels", pa.list_(pa.string())),
            ("split", pa.string()),
            ("country", pa.string()),
            ("s1_name", pa.string()),
            ("s2v1_name", pa.string()),
            ("contains_seasonal_snow", pa.bool_()),
            ("contains_cloud_or_shadow", pa.bool_()),
        ]
    )
    rows = sorted(rows, key=lambda r: r["patch_id"])
    flagged = [r for r in rows if r["contains_seasonal_snow"] or r["contains_cloud_or_shadow"]]
    clean = [r for r in rows if r not in flagged]
    for file_name, subset in ((V2_METADATA, clean), (V2_SNOW_CLOUD, flagged)):
        pq.write_table(pa.Table.from_pylist(subset, schema=schema), root / file_name)
