"""When to grow or shrink an elastic run: follow the gradient noise scale.

McCandlish et al. (2018): up to the critical batch size, which the simple noise scale
B_simple = tr(Sigma)/|G|^2 predicts, a larger batch buys proportionally fewer steps; past
it, extra workers mostly waste compute. B_simple grows as the loss falls, so a run should
start small and grow. The policy reads what ``train.py`` measured (``history.csv``:
``gns_b_simple``, ``global_batch``, ``world_size``, ``val_micro_f1``) and decides, once per
finished epoch:

* **grow** to the largest world (at most double, at most ``max_workers``) whose global
  batch, times ``margin``, stays at or below B_simple - larger batches still pay;
* **shrink** when B_simple has fallen below the current global batch (to the world whose
  batch fits under it), or when validation micro-F1 has plateaued (improved by less than
  ``plateau_delta`` over ``plateau_epochs`` epochs: give resources back, as the seed
  study's malleability work asks);
* **stay** otherwise, and always within ``dwell_epochs`` epochs of the last change (a
  resize costs a re-rendezvous and a new warm-up; the estimate needs time to settle).

B_simple is the mean over the last ``smoothing`` epochs that measured it. A world of one
rank without accumulation measures nothing (no second batch size): the policy then stays.
Every decision carries the numbers behind it. TensorFlow-free: it runs on a login node.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bigearthnet.core.declare import check_fields, option
from bigearthnet.core.errors import (
    ConfigError,
    require_non_negative_int,
    require_positive,
    require_positive_int,
)
from bigearthnet.formats.elastic_log import Decision
from bigearthnet.formats.history import HistoryRow


@dataclass(frozen=True)
class PolicySettings:
    """The policy's limits; declared once: ``bigearthnet-elastic follow --policy``'s
    options are generated from these fields."""

    max_workers: int = option(help="--policy: the largest world", check=require_positive_int,
                              metavar="N", required_by="--policy gns")  # fmt: skip
    min_workers: int = option(1, "--policy: the smallest world", check=require_positive_int,
                              metavar="N")  # fmt: skip
    margin: float = option(1.0, "--policy: grow only while global batch x margin <= B_simple",
                           check=require_positive)  # fmt: skip
    dwell_epochs: int = option(2, "--policy: epochs between two resizes",
                               check=require_non_negative_int, metavar="N")  # fmt: skip
    plateau_epochs: int = option(
        3, "--policy: shrink when validation micro-F1 gained less than --plateau-delta over "
        "this many epochs", check=require_positive_int, metavar="N",
    )  # fmt: skip
    plateau_delta: float = option(0.002, "--policy: see --plateau-epochs",
                                  check=require_positive)  # fmt: skip
    smoothing: int = 2  # epochs B_simple is averaged over

    def __post_init__(self) -> None:
        check_fields(self)
        if self.min_workers > self.max_workers:
            raise ConfigError("--min-workers must not exceed --max-workers")


def decide(
    rows: Sequence[HistoryRow], settings: PolicySettings, *, last_change_epoch: int = 0
) -> Decision | None:
    """The decision after the last row of ``rows`` (None: no epoch finished yet)."""
    if not rows:
        return None
    last = rows[-1]
    workers = last.world_size
    batch = last.global_batch or workers  # histories before global_batch: 1 per worker
    per_worker = batch / workers
    b_simple = _smoothed_b_simple(rows, settings.smoothing)

    def verdict(after: int, reason: str) -> Decision:
        after = max(settings.min_workers, min(settings.max_workers, after))
        return Decision(
            last.epoch, workers, after, b_simple, batch, round(after * per_worker), reason
        )

    if last.epoch - last_change_epoch < settings.dwell_epochs:
        since = f"after epoch {last_change_epoch}" if last_change_epoch else "at the start"
        return verdict(workers, f"dwell: {settings.dwell_epochs} epochs from the change {since}")
    if _plateaued(rows, settings):
        plateau = (
            f"validation micro-F1 plateaued at {last.val_micro_f1:.4f} (< "
            f"{settings.plateau_delta:g} better over {settings.plateau_epochs} epochs)"
        )
        if workers > settings.min_workers:
            return verdict(workers // 2, f"{plateau}: give resources back")
        # Growing on a plateau would take back what the last shrink gave away.
        return verdict(workers, f"{plateau}: stay at the smallest world")
    if b_simple is None:
        return verdict(workers, "no B_simple yet (one rank without accumulation measures none)")
    fits = max(1, math.floor(b_simple / (per_worker * settings.margin)))
    if b_simple < batch and fits < workers:
        return verdict(fits, f"B_simple {b_simple:,.0f} < global batch {batch:,}: shrink")
    target = min(2 * workers, fits, settings.max_workers)
    if target > workers:
        return verdict(
            target,
            f"B_simple {b_simple:,.0f} >= {settings.margin:g} x global batch "
            f"{round(target * per_worker):,} at {target} workers: larger batches still pay",
        )
    return verdict(workers, f"B_simple {b_simple:,.0f} vs global batch {batch:,}: stay")


def _smoothed_b_simple(rows: Sequence[HistoryRow], smoothing: int) -> float | None:
    measured = [r.gns_b_simple for r in rows if r.gns_b_simple is not None]
    recent = [v for v in measured[-smoothing:] if math.isfinite(v) and v > 0]
    return sum(recent) / len(recent) if recent else None


def _plateaued(rows: Sequence[HistoryRow], settings: PolicySettings) -> bool:
    if len(rows) <= settings.plateau_epochs:
        return False
    before = max(r.val_micro_f1 for r in rows[: -settings.plateau_epochs])
    recent = max(r.val_micro_f1 for r in rows[-settings.plateau_epochs :])
    return recent - before < settings.plateau_delta
