"""The class map format's quantised probabilities (formats/class_map.py)."""

from __future__ import annotations

import numpy as np
import pytest

from bigearthnet.formats import class_map
from bigearthnet.formats.class_map import NODATA, scaled, scaled_pixels, unscaled


@pytest.mark.parametrize("chunk", [1, 7 * 5 * 3, 1 << 21])  # a row, rows and a bit, all
def test_pixels_are_stored_as_scaled_stores_them_band_first(monkeypatch, chunk):
    monkeypatch.setattr(class_map, "PIXEL_CHUNK", chunk)
    rng = np.random.default_rng(3)
    probabilities = rng.dirichlet(np.ones(3), size=(11, 5)).astype(np.float32)
    probabilities[0, 0] = [0.002, 0.006, 0.992]  # near the rounding halves (0.5, 1.5 x 1/250)
    unseen = rng.random((11, 5)) < 0.2
    stored = scaled_pixels(probabilities, unseen)
    expected = scaled(np.where(unseen[..., None], np.nan, probabilities)).transpose(2, 0, 1)
    assert stored.dtype == np.uint8 and stored.shape == (3, 11, 5)
    np.testing.assert_array_equal(stored, expected)
    assert (stored[:, unseen] == NODATA).all()
    seen = unscaled(stored)[:, ~unseen]
    np.testing.assert_allclose(seen, probabilities[~unseen].T, atol=0.5 / 250)
