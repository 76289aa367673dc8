"""What a run cost to reach a validation target: steps, samples and rank-seconds, read from
its ``history.csv``.

McCandlish et al. (2018) frame the choice of batch size as a trade between optimizer steps
(wall time, when ranks are free) and samples processed (compute): a small fixed world needs
many steps, a large one wastes samples early in training while the gradient noise scale is
still small. A run that follows the noise scale should sit between the two on both axes.
:func:`cost_to_target` reads one run's history up to the first epoch whose validation
micro-F1 reaches the target; :func:`compare` lays several side by side. TensorFlow-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bigearthnet.core.errors import InputError
from bigearthnet.formats.history import HistoryRow


@dataclass(frozen=True)
class CostToTarget:
    """One run's cost up to (and including) the first epoch that reached the target."""

    name: str
    target: float
    reached_epoch: int | None  # None: never reached; the costs are then the whole run's
    steps: int  # optimizer updates
    samples: int  # training samples processed, all ranks
    rank_seconds: float  # sum over epochs of epoch seconds x world size
    best_f1: float  # the best validation micro-F1 of the epochs counted
    worlds: tuple[int, ...]  # the world size of each epoch counted

    @property
    def reached(self) -> bool:
        return self.reached_epoch is not None


def cost_to_target(name: str, rows: Sequence[HistoryRow], target: float) -> CostToTarget:
    """The cost of ``rows`` up to the first epoch with validation micro-F1 >= ``target``.

    Histories written before the ``steps``/``samples`` columns existed count an epoch's steps
    as samples / global batch (exact for fixed-size runs; an epoch an elastic run resized in
    has the true count only in the new columns)."""
    if not rows:
        raise InputError(f"{name}: no epochs in the history")
    reached = next((r.epoch for r in rows if r.val_micro_f1 >= target), None)
    counted = [r for r in rows if reached is None or r.epoch <= reached]
    return CostToTarget(
        name=name,
        target=target,
        reached_epoch=reached,
        steps=sum(_steps(r) for r in counted),
        samples=sum(_samples(r) for r in counted),
        rank_seconds=sum(r.seconds * r.world_size for r in counted),
        best_f1=max(r.val_micro_f1 for r in counted),
        worlds=tuple(r.world_size for r in counted),
    )


def _samples(row: HistoryRow) -> int:
    if row.samples is not None:
        return row.samples
    return round(row.samples_per_s * row.seconds)  # a history from before the column


def _steps(row: HistoryRow) -> int:
    if row.steps is not None:
        return row.steps
    batch = row.global_batch or row.world_size
    return -(-_samples(row) // batch)


def compare(costs: Sequence[CostToTarget]) -> str:
    """A Markdown table of ``costs``, one row per run."""
    lines = [
        "| run | reached at epoch | steps | samples | rank-seconds | world sizes |",
        "|---|---|---|---|---|---|",
    ]
    for cost in costs:
        epoch = str(cost.reached_epoch) if cost.reached else f"not reached ({cost.best_f1:.3f})"
        worlds = _runs_of(cost.worlds)
        lines.append(
            f"| {cost.name} | {epoch} | {cost.steps:,} | {cost.samples:,} | "
            f"{cost.rank_seconds:,.0f} | {worlds} |"
        )
    return "\n".join(lines)


def _runs_of(worlds: Sequence[int]) -> str:
    """``2,2,2,4,4`` -> ``2x3, 4x2``: the world size over the epochs counted."""
    parts: list[list[int]] = []
    for world in worlds:
        if parts and parts[-1][0] == world:
            parts[-1][1] += 1
        else:
            parts.append([world, 1])
    return ", ".join(f"{w} ({n} ep)" for w, n in parts)
