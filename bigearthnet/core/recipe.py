"""A run's recipe: the options that shape what its epochs train, compared in one place.

Which options those are is said once, by each option's declaration
(``identity`` in :mod:`bigearthnet.core.options`, with the reasoning). Two callers compare:

* a resume (``train.py`` on a run folder with checkpoints) compares the recipe of the run's
  ``config.yaml`` with the options given: another recipe would mix two in one run's epochs
  and relabel the old ones in ``config.yaml``, so it is refused. ``--epochs`` (the
  ``LENGTH``) may change: the run trains on, and records it;
* a batch study or the seed table compares each point's run folder with the options the
  point would be given now, the length included: a point's budget shapes its LR schedule,
  so a point of another budget is another point.

Free of TensorFlow: the studies run on login nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from bigearthnet.core.config import LENGTH, RECIPE, TrainConfig
from bigearthnet.core.declare import flag_name

__all__ = ["Change", "RECIPE_OPTIONS", "LENGTH_OPTIONS", "changes", "listed"]

_FIELDS = {f.name: f for f in fields(TrainConfig)}
RECIPE_OPTIONS = tuple(n for n, f in _FIELDS.items() if f.metadata.get("identity") == RECIPE)
LENGTH_OPTIONS = tuple(n for n, f in _FIELDS.items() if f.metadata.get("identity") == LENGTH)


@dataclass(frozen=True)
class Change:
    """One option whose value differs between what a run was made with and what is given."""

    name: str  # the TrainConfig field
    old: Any
    new: Any

    @property
    def flag(self) -> str:
        return flag_name(_FIELDS[self.name])

    def __str__(self) -> str:
        return f"{self.flag} {_shown(self.old)} -> {_shown(self.new)}"


def changes(
    old: TrainConfig, new: TrainConfig, names: Iterable[str] = RECIPE_OPTIONS
) -> list[Change]:
    """The options among ``names`` whose values differ from ``old`` (a run's) to ``new``."""
    return [
        Change(name, getattr(old, name), getattr(new, name))
        for name in names
        if getattr(old, name) != getattr(new, name)
    ]


def listed(found: Sequence[Change]) -> str:
    """``--lr 0.025 -> 0.9, --batch-size 8 -> 4``."""
    return ", ".join(map(str, found))


def _shown(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(_shown(v) for v in value)
    return repr(value) if isinstance(value, float) else str(value)
