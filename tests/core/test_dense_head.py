"""bigearthnet.core.dense_head: --pixel-loss-weight resolved against the shards' maps, once,
and what a refused resume says."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bigearthnet.core.config import RUN_CONFIG, TrainConfig, load_run_config, save_yaml
from bigearthnet.core.dense_head import has_dense_head, resume_note, with_pixel_head
from bigearthnet.core.errors import ConfigError
from bigearthnet.core.options import DEFAULT_PIXEL_LOSS_WEIGHT
from bigearthnet.core.recipe import RECIPE_OPTIONS, changes


def _cfg(weight: float | None) -> TrainConfig:
    return TrainConfig(data="shards", run_dir="run", pixel_loss_weight=weight)


@pytest.mark.parametrize(
    "given, maps, resolved",
    [(None, 34, DEFAULT_PIXEL_LOSS_WEIGHT), (None, 0, 0.0), (0.0, 34, 0.0), (0.25, 34, 0.25)],
)
def test_the_weight_is_resolved_by_the_maps(given, maps, resolved) -> None:
    cfg = with_pixel_head(_cfg(given), maps)
    assert cfg.pixel_loss_weight == resolved and has_dense_head(cfg) == (resolved > 0)
    assert with_pixel_head(cfg, maps) == cfg  # resolved once: a second pass changes nothing


def test_a_weight_without_maps_to_learn_from_is_refused() -> None:
    with pytest.raises(ConfigError, match="--pixel-loss-weight 1: the train split of --data "
                       "shards holds no reference maps"):  # fmt: skip
        with_pixel_head(_cfg(1.0), 0)


def test_the_weight_is_part_of_the_recipe() -> None:
    assert "pixel_loss_weight" in RECIPE_OPTIONS
    found = changes(with_pixel_head(_cfg(None), 0), with_pixel_head(_cfg(None), 34))
    assert [str(c) for c in found] == ["--pixel-loss-weight 0.0 -> 0.1"]


def test_a_run_saved_before_the_head_resumes_without_it(tmp_path: Path) -> None:
    """Its config.yaml has no pixel_loss_weight: it trained no dense head, so it reads as 0
    (and a resume on shards without maps finds the same recipe)."""
    save_yaml(_cfg(None), tmp_path / RUN_CONFIG)
    raw = yaml.safe_load((tmp_path / RUN_CONFIG).read_text())
    del raw["pixel_loss_weight"]
    (tmp_path / RUN_CONFIG).write_text(yaml.safe_dump(raw))
    past = load_run_config(tmp_path)
    assert past.pixel_loss_weight == 0.0
    assert not changes(past, with_pixel_head(_cfg(None), 0))


@pytest.mark.parametrize(
    "old, new, says",
    [
        (0.0, 1.0, "trained without the dense head: --pixel-loss-weight 0 resumes it"),
        (1.0, 0.0, "trained the dense head (--pixel-loss-weight 1): it resumes on shards with"),
        (1.0, 0.5, "--pixel-loss-weight 1 resumes it as it trained"),
        (0.5, 0.5, ""),
    ],
)
def test_a_refused_resume_names_the_way_on(old, new, says) -> None:
    note = resume_note(_cfg(old), _cfg(new))
    assert (says in note) if says else note == ""
