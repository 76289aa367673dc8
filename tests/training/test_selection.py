"""--select-metric, early stopping's count, --warmup-steps and --dropout."""

from __future__ import annotations

import dataclasses
import math

import pytest
from helpers import history_row

from bigearthnet.core.config import SELECT_METRICS, ConfigError, TrainConfig
from bigearthnet.formats.history import HistoryRow
from bigearthnet.training.selection import best_index, is_new_best, validations_since_best
from bigearthnet.training.trainer import make_schedule


def row(epoch: int, **scores: float | None) -> HistoryRow:
    return history_row(epoch, **scores)


def test_the_best_is_the_first_highest_of_the_chosen_metric() -> None:
    maps = [0.40, 0.55, 0.55, 0.50]
    f1s = [0.30, 0.20, 0.60, 0.10]
    history = [
        row(i + 1, val_macro_map=m, val_micro_f1=f) for i, (m, f) in enumerate(zip(maps, f1s))
    ]
    assert best_index(history, "val_macro_map") == 1  # a tie keeps the earlier epoch
    assert best_index(history, "val_micro_f1") == 2
    assert validations_since_best(history, "val_macro_map") == 2
    assert [is_new_best(history[: n + 1], "val_macro_map") for n in range(4)] == [
        True,
        True,
        False,
        False,
    ]
    assert best_index([], "val_macro_map") is None and validations_since_best([], "x") == 0


def test_a_missing_score_never_wins() -> None:
    """Rows from before validation had mAPs (None) or NaN: every later score beats them."""
    history = [row(1, val_macro_map=None), row(2, val_macro_map=math.nan)]
    assert not is_new_best(history, "val_macro_map")
    history.append(row(3, val_macro_map=0.1))
    assert is_new_best(history, "val_macro_map") and best_index(history, "val_macro_map") == 2


@pytest.mark.parametrize("metric", SELECT_METRICS)
def test_every_select_metric_is_a_history_column(metric: str) -> None:
    assert row(1, val_macro_map=0.7, val_micro_map=0.8).score(metric) is not None


def test_warmup_steps_become_epochs_of_this_world() -> None:
    cfg = TrainConfig(data="d", run_dir="r", epochs=10, warmup_epochs=5, warmup_steps=30)
    assert make_schedule(cfg, world_size=4, updates_per_epoch=20).warmup_epochs == 1.5
    assert make_schedule(cfg, world_size=1, updates_per_epoch=2).warmup_epochs == 10.0  # capped
    cfg = dataclasses.replace(cfg, warmup_steps=None)
    assert make_schedule(cfg, world_size=4, updates_per_epoch=20).warmup_epochs == 5.0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("dropout", 1.0, "--dropout must be in [0, 1)"),
        ("early_stopping_patience", -1, "--early-stopping-patience"),
        ("warmup_steps", -5, "--warmup-steps"),
        ("select_metric", "val_loss", "--select-metric must be one of val_micro_f1"),
    ],
)
def test_bad_values_are_refused(field: str, value: object, message: str) -> None:
    cfg = TrainConfig(data="d", run_dir="r")
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(")", r"\)")):
        dataclasses.replace(cfg, **{field: value})


@pytest.mark.parametrize("dropout", [0.0, 0.15])
def test_dropout_reaches_the_model(dropout: float) -> None:
    """--dropout builds the registry model with a dropout layer before the classifier."""
    from bigearthnet.core import constants
    from bigearthnet.formats.model_inputs import ModelInputs
    from bigearthnet.training.replica import Replica

    cfg = TrainConfig(data="d", run_dir="r", model="tiny", dropout=dropout, epochs=1)
    bands = constants.BAND_CONFIGS["all"]
    n = len(bands)
    inputs = ModelInputs(bands, (0.0,) * n, (1.0,) * n, (1.0,) * n, (0.0,) * n, "bilinear",
                         constants.CLASSES_19)  # fmt: skip
    replica = Replica(
        cfg, inputs=inputs, schedule=make_schedule(cfg, world_size=1, updates_per_epoch=1)
    )
    layers = {layer.name: layer for layer in replica.model.layers}
    assert replica.model.input_shape == (None, 120, 120, 12)
    assert ("head_dropout" in layers) == (dropout > 0)
    if dropout:
        assert layers["head_dropout"].rate == dropout
