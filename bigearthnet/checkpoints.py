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

import json
import shutil
from pathlib import Path

import tensorflow as tf

from bigearthnet.util import atomic_write_json

CKPT_DIR = "checkpoints"
TAGS = ("latest", "best")


class CheckpointError(ValueError):
    """A checkpoint that cannot be found or does not fit the model."""


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CKPT_DIR


def read_pointer(run_dir: str | Path, tag: str) -> dict | None:
    """The pointer record of ``tag`` ('latest' or 'best'), or None when there is none."""
    path = checkpoint_dir(run_dir) / f"{tag}.json"
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    if not (checkpoint_dir(run_dir) / record["folder"]).is_dir():
        raise CheckpointError(f"{path}: points to missing folder {record['folder']}")
    return record


def save(run_dir: str | Path, tag: str, trackables: dict, meta: dict) -> Path:
    """Write ``trackables`` (model, optimizer, epoch...) as ``tag``; returns the folder."""
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    folder = f"{tag}-e{int(meta['epoch']):04d}"
    if meta.get("step"):
        folder += f"-s{int(meta['step']):06d}"  # mid-epoch (a requeue): a distinct folder
    tmp = root / f".{folder}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tf.train.Checkpoint(**trackables).write(str(tmp / "ckpt"))
    final = root / folder
    if final.exists():  # the same epoch saved again (a rerun): replace it
        shutil.rmtree(final)
    tmp.rename(final)
    atomic_write_json(root / f"{tag}.json", {**meta, "tag": tag, "folder": folder})
    _prune(root, tag, keep=folder)
    return final


def restore(run_dir: str | Path, tag: str, trackables: dict, partial: bool = False) -> dict:
    """Restore ``trackables`` from ``tag``; returns its pointer record."""
    record = read_pointer(run_dir, tag)
    if record is None:
        raise CheckpointError(f"{checkpoint_dir(run_dir)}: no '{tag}' checkpoint")
    return restore_path(
        checkpoint_dir(run_dir) / record["folder"] / "ckpt", trackables, partial, record
    )


def restore_path(prefix: str | Path, trackables: dict, partial: bool, record: dict) -> dict:
    status = tf.train.Checkpoint(**trackables).read(str(prefix))
    try:
        if partial:
            status.expect_partial()  # e.g. evaluation restores the model, not the optimizer
        else:
            status.assert_existing_objects_matched()
    except AssertionError as err:
        raise CheckpointError(f"{prefix}: does not fit this model ({str(err)[:200]})") from None
    return record


def clear(run_dir: str | Path) -> None:
    """Remove all checkpoints of a run (``--no-resume`` starts from scratch)."""
    shutil.rmtree(checkpoint_dir(run_dir), ignore_errors=True)


def _prune(root: Path, tag: str, keep: str) -> None:
    for path in root.glob(f"{tag}-e*"):
        if path.is_dir() and path.name != keep:
            shutil.rmtree(path, ignore_errors=True)
    for path in root.glob(f".{tag}-e*.tmp"):
        shutil.rmtree(path, ignore_errors=True)
