"""Map previews (maps/preview.py, maps/scene/output.py): a large map is drawn from every
n-th pixel, no more than the figure shows, and its title gives the map's cells."""

from __future__ import annotations

import numpy as np
from PIL import Image
from rasterio.transform import Affine

from bigearthnet.core import constants
from bigearthnet.maps.preview import DRAWN_PX, drawn_step
from bigearthnet.maps.scene.output import preview


def test_a_map_is_drawn_from_at_most_drawn_px_a_side() -> None:
    assert drawn_step(DRAWN_PX, 10) == 1
    assert drawn_step(DRAWN_PX + 1, 10) == 2
    assert drawn_step(300, 10_980) == 11  # a tile's 10 m map: 999 px drawn


def test_a_decimated_10m_map_is_titled_by_its_own_cells(tmp_path) -> None:
    """The title once took the drawn pixels' size: a 1,728 px 10 m map said "20 m cells"."""
    top = np.repeat(np.arange(6, dtype=np.uint8), 400)[None].repeat(30, axis=0)
    step = drawn_step(*top.shape)
    assert step == 3
    out, grid = tmp_path / "map.png", Affine(10, 0, 500_000, 0, -10, 5_300_000)
    classes, tags = list(constants.CLASSES_19), {"scene": "x/S2B.SAFE"}
    preview(out, top[::step, ::step], transform=grid, classes=classes, tags=tags, step=step)
    with Image.open(out) as image:
        assert image.info["Title"] == "S2B.SAFE: 10 m cells"
        assert image.format == "PNG" and image.size[0] > 500
