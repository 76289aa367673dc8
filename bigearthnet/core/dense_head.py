"""Whether a run trains the dense head, decided once from ``--pixel-loss-weight`` and the
shards (free of TensorFlow: ``train.py`` decides before any rank starts, a batch study on a
login node).

Unset, the weight is :data:`~bigearthnet.core.options.DEFAULT_PIXEL_LOSS_WEIGHT` where the
train split holds reference maps and 0 where it holds none; a weight > 0 without maps is
refused (nothing to learn from). A run saves the resolved weight in ``config.yaml``, and a
resume compares it as part of the recipe (:mod:`bigearthnet.core.recipe`): a run without the
head resumed on shards with maps (weight 0 -> 0.1), or the reverse, is refused, naming
``--pixel-loss-weight``; the two are never mixed silently.
"""

from __future__ import annotations

import dataclasses

from bigearthnet.core.config import TrainConfig
from bigearthnet.core.errors import ConfigError
from bigearthnet.core.options import DEFAULT_PIXEL_LOSS_WEIGHT


def has_dense_head(cfg: TrainConfig) -> bool:
    """Whether ``cfg`` (resolved, or with a weight given) trains the dense head."""
    return bool(cfg.pixel_loss_weight)


def with_pixel_head(cfg: TrainConfig, train_maps: int) -> TrainConfig:
    """``cfg`` with ``--pixel-loss-weight`` resolved for shards whose train split holds
    ``train_maps`` reference maps; ConfigError for a weight > 0 without any."""
    weight = cfg.pixel_loss_weight
    if weight is None:
        resolved = DEFAULT_PIXEL_LOSS_WEIGHT if train_maps else 0.0
        return dataclasses.replace(cfg, pixel_loss_weight=resolved)
    if weight > 0 and not train_maps:
        raise ConfigError(
            f"--pixel-loss-weight {weight:g}: the train split of --data {cfg.data} holds no "
            "reference maps for the dense head to learn from (a v2 archive with "
            "Reference_Maps/ gives them); give --pixel-loss-weight 0, or leave it out"
        )
    return cfg


def resume_note(past: TrainConfig, given: TrainConfig) -> str:
    """What resumes a run whose pixel-loss weight differs from the one given ("" when it
    does not): a refused resume names the way on, not only the difference."""
    old, new = past.pixel_loss_weight or 0.0, given.pixel_loss_weight or 0.0
    if old == new:
        return ""
    if not old:
        return (
            f"; the run trained without the dense head: --pixel-loss-weight 0 resumes it so "
            f"on {given.data}"
        )
    if not new:
        return (
            f"; the run trained the dense head (--pixel-loss-weight {old:g}): it resumes on "
            "shards with reference maps only"
        )
    return f"; --pixel-loss-weight {old:g} resumes it as it trained"
