"""Checkpoints that a kill at any moment cannot break.

``RUN/checkpoints/`` holds one folder per saved state (``latest-e0007/``, ``best-e0005/``),
each written complete under a temporary name and renamed into place, plus one small
pointer per tag (``latest.json``, ``best.json``) written atomically *after* its folder.
A reader follows the pointer, so it sees either the previous complete checkpoint or the
new complete one, never a half-written state. Older folders are removed after the
pointer moved.

A checkpoint is a ``tf.train.Checkpoint`` of the model, the optimizer (slots, iteration
count - hence the LR schedule position) and the epoch. The pointer also carries what
``evaluate.py`` needs to rebuild the model: its name, class count and input shape.
Only rank 0 writes; ranks that resume read rank 0's choice and receive its weights by
broadcast.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import tensorflow as tf

from bigearthnet import constants
from bigearthnet.errors import InputError
from bigearthnet.util import atomic_write_json

CKPT_DIR = "checkpoints"
TAGS = ("latest", "best")


class CheckpointError(InputError):
    """A checkpoint that cannot be found or does not fit the model."""


@dataclass(frozen=True)
class ElasticPosition:
    """Where an elastic run stopped inside an epoch: samples of the epoch's global order
    consumed, batches taken, and the losses so far (so a resumed run reports the whole
    epoch's mean)."""

    consumed: int = 0
    batch: int = 0
    loss_sum: float = 0.0
    loss_steps: int = 0


@dataclass(frozen=True)
class CheckpointRecord:
    """The pointer file of a checkpoint: what it holds besides the tensors, and what
    ``evaluate.py`` needs to rebuild the model. ``folder`` and ``tag`` are set by :func:`save`."""

    epoch: int  # epochs completed
    model: str
    num_classes: int
    step: int = 0  # steps of the next epoch done (a fixed-size run stopped mid-epoch)
    steps_per_epoch: int | None = None
    world_size: int | None = None
    input_shape: tuple[int, ...] = (
        constants.PATCH_SIZE,
        constants.PATCH_SIZE,
        len(constants.BANDS),
    )
    val_micro_f1: float | None = None
    val_macro_f1: float | None = None
    loss_sum: float | None = None  # a fixed-size run's losses of the ``step`` steps done
    loss_steps: int | None = None
    elastic: ElasticPosition | None = None  # an elastic run stopped mid-epoch
    folder: str = ""
    tag: str = ""

    def to_json(self) -> dict:
        body = dataclasses.asdict(self)
        body["input_shape"] = list(self.input_shape)
        return {k: v for k, v in body.items() if v is not None}

    @classmethod
    def from_json(cls, raw: dict) -> CheckpointRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        if raw.get("elastic"):
            values["elastic"] = ElasticPosition(**raw["elastic"])
        if raw.get("input_shape"):
            values["input_shape"] = tuple(int(v) for v in raw["input_shape"])
        return cls(**values)


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CKPT_DIR


def read_pointer(run_dir: str | Path, tag: str) -> CheckpointRecord | None:
    """The pointer record of ``tag`` ('latest' or 'best'), or None when there is none."""
    path = checkpoint_dir(run_dir) / f"{tag}.json"
    if not path.is_file():
        return None
    try:
        record = CheckpointRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as err:
        raise CheckpointError(f"{path}: unreadable checkpoint pointer ({err})") from None
    # A pointer is data: the folder it names must be a plain name inside checkpoints/.
    if Path(record.folder).name != record.folder or record.folder in ("", ".", ".."):
        raise CheckpointError(f"{path}: folder {record.folder!r} is not a plain name")
    if not (checkpoint_dir(run_dir) / record.folder).is_dir():
        raise CheckpointError(f"{path}: points to missing folder {record.folder}")
    return record


def save(
    run_dir: str | Path, tag: str, trackables: dict, record: CheckpointRecord
) -> CheckpointRecord:
    """Write ``trackables`` (model, optimizer, epoch...) as ``tag``; returns the pointer."""
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    folder = f"{tag}-e{record.epoch:04d}"
    if record.step:
        folder += f"-s{record.step:06d}"  # mid-epoch (a requeue): a distinct folder
    tmp = root / f".{folder}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tf.train.Checkpoint(**trackables).write(str(tmp / "ckpt"))
    final = root / folder
    if final.exists():  # the same epoch saved again (a rerun): replace it
        shutil.rmtree(final)
    tmp.rename(final)
    record = dataclasses.replace(record, tag=tag, folder=folder)
    atomic_write_json(root / f"{tag}.json", record.to_json())
    _prune(root, tag, keep=folder)
    return record


def restore(
    run_dir: str | Path, tag: str, trackables: dict, *, partial: bool = False
) -> CheckpointRecord:
    """Restore ``trackables`` from ``tag``; returns its pointer record."""
    record = read_pointer(run_dir, tag)
    if record is None:
        raise CheckpointError(f"{checkpoint_dir(run_dir)}: no '{tag}' checkpoint")
    restore_path(prefix(run_dir, record), trackables, partial=partial)
    return record


def prefix(run_dir: str | Path, record: CheckpointRecord) -> Path:
    """The ``tf.train.Checkpoint`` prefix of a pointer's folder."""
    return checkpoint_dir(run_dir) / record.folder / "ckpt"


def restore_path(prefix: str | Path, trackables: dict, *, partial: bool) -> None:
    """Restore ``trackables`` from a checkpoint prefix; ``partial``: the checkpoint may hold
    more (evaluation restores the model, not the optimizer)."""
    status = tf.train.Checkpoint(**trackables).read(str(prefix))
    try:
        if partial:
            status.expect_partial()  # e.g. evaluation restores the model, not the optimizer
        else:
            status.assert_existing_objects_matched()
    except AssertionError as err:
        raise CheckpointError(f"{prefix}: does not fit this model ({str(err)[:200]})") from None


def clear(run_dir: str | Path) -> None:
    """Remove all checkpoints of a run (``--no-resume`` starts from scratch)."""
    shutil.rmtree(checkpoint_dir(run_dir), ignore_errors=True)


def _prune(root: Path, tag: str, keep: str) -> None:
    for path in root.glob(f"{tag}-e*"):
        if path.is_dir() and path.name != keep:
            shutil.rmtree(path, ignore_errors=True)
    for path in root.glob(f".{tag}-e*.tmp"):
        shutil.rmtree(path, ignore_errors=True)
