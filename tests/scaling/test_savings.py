"""bigearthnet.scaling.savings: the cost of a run to a validation target, from its history."""

from __future__ import annotations

import pytest
from helpers import history_row

from bigearthnet.scaling.savings import compare, cost_to_target


def test_costs_count_up_to_the_first_epoch_that_reached_the_target() -> None:
    rows = [
        history_row(1, val_micro_f1=0.5, world_size=2, global_batch=32, steps=15, samples=480),
        history_row(2, val_micro_f1=0.7, world_size=2, global_batch=32, steps=15, samples=480),
        history_row(3, val_micro_f1=0.9, world_size=4, global_batch=64, steps=11, samples=480),
        history_row(4, val_micro_f1=0.95, world_size=4, global_batch=64, steps=8, samples=480),
    ]
    cost = cost_to_target("elastic", rows, 0.85)
    assert cost.reached and cost.reached_epoch == 3
    assert (cost.steps, cost.samples) == (41, 1440)
    assert cost.rank_seconds == pytest.approx(1.0 * (2 + 2 + 4))  # seconds=1 per epoch
    assert cost.worlds == (2, 2, 4)
    table = compare([cost, cost_to_target("never", rows, 0.99)])
    assert "| elastic | 3 | 41 | 1,440 | 8 | 2 (2 ep), 4 (1 ep) |" in table
    assert "| never | not reached (0.950) | 49 | 1,920 |" in table


def test_histories_without_step_counts_derive_them_from_the_batch() -> None:
    rows = [history_row(1, val_micro_f1=0.9, samples_per_s=100.0, seconds=4.8, global_batch=32)]
    cost = cost_to_target("old", rows, 0.5)
    assert (cost.samples, cost.steps) == (480, 15)
    with pytest.raises(ValueError, match="no epochs"):
        cost_to_target("empty", [], 0.5)
