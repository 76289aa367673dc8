"""``RUN/history.csv``: one row per finished epoch, its one writer and its one reader.

Written by rank 0 after every epoch (atomically, before the epoch's checkpoint: a kill in
between leaves a row the resume drops, never a finished epoch without its row), read back by
a resumed run, by ``evaluate.py``'s training-curve plot, by ``bigearthnet-elastic follow``
and by the batch-size study.

The gradient-noise-scale columns are empty ("n/a") where a run cannot measure it (one rank,
no accumulation: there is no second batch size to compare).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core.errors import InputError
from bigearthnet.core.util import first_line, write_csv
from bigearthnet.formats.run_folder import HISTORY


@dataclass(frozen=True)
class HistoryRow:
    """One epoch of a run: its learning rate, losses, validation scores and speed."""

    epoch: int  # 1-based: epochs completed with this row
    lr: float
    loss: float  # mean training loss over the epoch's steps
    val_loss: float
    val_micro_f1: float
    val_macro_f1: float
    samples_per_s: float  # all ranks together
    data_wait_fraction: float
    seconds: float
    world_size: int
    global_batch: int | None = None  # samples per optimizer update, all ranks and passes
    gns_b_simple: float | None = None  # the gradient noise scale tr(S)/|G|^2
    gns_grad_sq: float | None = None  # |G|^2 estimate
    gns_trace: float | None = None  # tr(S) estimate
    steps: int | None = None  # optimizer updates in the epoch (all of it, across resizes)
    samples: int | None = None  # training samples the epoch consumed, all ranks
    val_micro_map: float | None = None  # from the gathered validation scores
    val_macro_map: float | None = None  # (None in rows written before validation had them)
    # the --epochs the run had when this epoch trained: the length its LR schedule spanned (a
    # resume may change it; None in rows written before it was recorded)
    planned_epochs: int | None = None
    # the dense head's validation: pixel overall accuracy and mIoU against the reference maps,
    # from pixel counts summed over ranks (None: a run without the dense head)
    val_pixel_accuracy: float | None = None
    val_pixel_miou: float | None = None

    def score(self, metric: str) -> float | None:
        """A validation metric by its history name (``val_micro_f1``, ``val_macro_map``...)."""
        value = getattr(self, metric)
        return None if value is None else float(value)


FIELDS = tuple(f.name for f in dataclasses.fields(HistoryRow))
# Columns every history has had; the later ones (with defaults) may be absent in old runs.
REQUIRED = tuple(f.name for f in dataclasses.fields(HistoryRow) if f.default is dataclasses.MISSING)
_KINDS = {f.name: f.type for f in dataclasses.fields(HistoryRow)}


def write_history(run_dir: str | Path, rows: list[HistoryRow]) -> None:
    """Replace ``RUN/history.csv`` with ``rows`` (atomically)."""
    write_csv(Path(run_dir) / HISTORY, FIELDS, (_cells(row) for row in rows))


def read_history(run_dir: str | Path, *, through_epoch: int | None = None) -> list[HistoryRow]:
    """The rows of ``RUN/history.csv`` ([] when there is none), up to ``through_epoch``;
    InputError naming the file, the line and the problem when it cannot be read. The file is
    written whole and atomically, so one cut short (a partial copy, a full disk elsewhere) is
    refused, never read as fewer epochs."""
    path = Path(run_dir) / HISTORY
    if not path.is_file():
        return []
    try:
        text = path.read_text(encoding="utf-8")
        table = list(csv.DictReader(io.StringIO(text, newline="")))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise InputError(f"{path}: unreadable history ({first_line(err)})") from None
    header = text.partition("\n")[0].rstrip("\r").split(",")
    missing = [name for name in REQUIRED if name not in header]
    if missing or not text.endswith("\n"):
        problem = f"no column {missing[0]}" if missing else "its last line is cut short"
        raise InputError(f"{path}: truncated or not a history ({problem})")
    rows = []
    for line, cells in enumerate(table, start=2):  # line 1 is the header
        try:
            if None in cells.values() or None in cells:
                raise ValueError(f"{len(header)} cells expected")
            rows.append(_row(cells))
        except (ValueError, TypeError) as err:
            raise InputError(f"{path}: line {line} is not a history row ({err})") from None
    if through_epoch is not None:
        rows = [r for r in rows if r.epoch <= through_epoch]
    return rows


def _cells(row: HistoryRow) -> dict[str, object]:
    return {k: ("" if v is None else v) for k, v in dataclasses.asdict(row).items()}


def _row(cells: dict[str, str]) -> HistoryRow:
    values: dict[str, object] = {}
    for name, kind in _KINDS.items():
        text = (cells.get(name) or "").strip()
        if text in ("", "n/a", "None"):
            values[name] = None
        elif kind.startswith("int"):
            values[name] = int(float(text))
        else:
            number = float(text)
            values[name] = number if math.isfinite(number) or name != "gns_b_simple" else None
    return HistoryRow(**values)  # type: ignore[arg-type]
