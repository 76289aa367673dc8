"""``RUN/efficiency.json``: the POP-style efficiency of the last epoch, per rank and overall.

Rank 0 writes it after every epoch (:func:`write_efficiency`, the one writer) from the
table of every rank's times (:func:`bigearthnet.training.efficiency.efficiency_report`);
the run page and the benchmarks read it back (:func:`read_efficiency`, the one reader).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bigearthnet.core.errors import InputError
from bigearthnet.core.util import atomic_write_json
from bigearthnet.formats.run_folder import EFFICIENCY


@dataclass(frozen=True)
class RankTimes:
    """One rank's split of the epoch's time (seconds)."""

    rank: int
    step_s: float
    compute_s: float | None  # --comm-timing only
    communication_s: float | None  # --comm-timing only
    data_wait_s: float
    samples: int
    samples_per_s: float


@dataclass(frozen=True)
class EfficiencyReport:
    """An epoch's efficiency factors (see training/efficiency.py for their formulas)."""

    epoch: int
    world_size: int
    communication_measured: bool
    per_rank: tuple[RankTimes, ...]
    load_balance: float
    communication_efficiency: float | None  # None without --comm-timing
    input_efficiency: float
    parallel_efficiency: float
    data_wait_fraction: float
    communication_fraction: float | None
    samples_per_s_total: float
    samples_per_s_per_rank: float
    epoch_seconds_max: float
    gradient_noise: dict[str, Any] | None = None  # training.gns.noise_report
    precise_bn: dict[str, float] | None = None  # samples and seconds of the BN recompute

    def get(self, key: str) -> Any:
        """A factor by name (the run page's table)."""
        return getattr(self, key)


def write_efficiency(run_dir: str | Path, report: EfficiencyReport) -> None:
    atomic_write_json(Path(run_dir) / EFFICIENCY, dataclasses.asdict(report))


def read_efficiency(run_dir: str | Path) -> EfficiencyReport | None:
    """The run's efficiency report; None when there is none yet, InputError naming the file
    when it cannot be read."""
    path = Path(run_dir) / EFFICIENCY
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise InputError(f"{path}: unreadable efficiency report ({err})") from None
    try:
        per_rank = tuple(RankTimes(**row) for row in body.pop("per_rank"))
        return EfficiencyReport(per_rank=per_rank, **body)
    except (AttributeError, KeyError, TypeError) as err:
        raise InputError(f"{path}: not an efficiency report ({err})") from None
