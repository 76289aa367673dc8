"""bigearthnet.synthetic.look: a look is a strategy, one class each, that every generator asks
(the archive's splits, snow and truth, a scene's pixels, a region's cover)."""

from __future__ import annotations

import numpy as np
import pytest

from bigearthnet.core import constants
from bigearthnet.synthetic.look import DIFFICULTIES, LOOKS, Look, SyntheticLook
from bigearthnet.synthetic.region_cover import REGION_CLASSES


def test_the_looks_are_the_difficulties_offered():
    assert DIFFICULTIES == ("realistic", "simple")
    assert all(isinstance(look, Look) and look.name == name for name, look in LOOKS.items())
    assert SyntheticLook().look is LOOKS["realistic"]
    assert SyntheticLook(difficulty="simple").look is LOOKS["simple"]


@pytest.mark.parametrize("name", DIFFICULTIES)
def test_each_look_answers_every_generator(name):
    look, rng = LOOKS[name], np.random.default_rng(0)
    grid = np.kron(np.array([[0, 11], [13, 18]]), np.ones((30, 30), int))  # 60 m borders
    field = look.field(rng, grid, 8, 0)
    assert field.shape == (len(constants.BANDS), 60, 60) and np.all(field > 0)
    overlays = look.overlays(rng, 200)
    assert len(overlays) == 200 and set(overlays) == {None, "snow", "cloud"}
    truth = look.patch_truth(rng)
    assert (truth is not None) == look.truth_table
    start, events, features = look.region_cover(rng, 6, 6, 5, 1200.0)
    assert start.shape == (6, 6) and events
    assert all(1 <= at <= 3 and kind in ("lasting", "transient") for _, kind, at, _ in events)
    if name == "simple":
        assert set(start.ravel()) <= set(REGION_CLASSES) and features == []
