"""Checkpoints that a kill at any moment cannot break.

``RUN/checkpoints/`` holds one folder per saved state (``latest-e0007/``, ``best-e0005/``),
each written complete under a temporary name and renamed into place (one of the same name
set aside first, removed last: :func:`~bigearthnet.core.swap.replace_folder`), plus one
small pointer per tag (``latest.json``, ``best.json``) written atomically *after* its
folder. A reader follows the pointer, so it sees either the previous complete checkpoint
or the new complete one, never a half-written state. Older folders are removed after the
pointer moved.

A checkpoint is a ``tf.train.Checkpoint`` of the model and the optimizer (slots, iteration
count - hence the LR schedule position). The pointer carries where training stood
(:class:`~bigearthnet.formats.position.Position`) and what ``evaluate.py`` needs to rebuild
the model: its name, class count, input shape and whether it has the dense head, and
(:class:`~bigearthnet.formats.model_inputs.ModelInputs`) the channels, normalisation,
resampling and classes it was trained with, so a run predicts the same after its training
data is gone.
Only rank 0 writes; ranks that resume read rank 0's choice and receive its weights by
broadcast.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError, RunFailed
from bigearthnet.core.swap import replace_folder, restore_aside
from bigearthnet.core.util import atomic_write_json, first_line, fsync_tree, sha256_file
from bigearthnet.formats import run_folder
from bigearthnet.formats.model_inputs import ModelInputs
from bigearthnet.formats.position import Position

CKPT_DIR = run_folder.CHECKPOINTS
TAGS = ("latest", "best")
RECORD = "record.json"  # inside each checkpoint folder: its pointer, for fallbacks
# What TensorFlow raises for a damaged checkpoint: a truncated data file IndexError ("Read
# less bytes than requested"), a corrupt index DataLossError (an OpError). TensorFlow is
# imported where tensors are written or read: a run page or a follower never loads it.


def _unreadable() -> tuple[type[Exception], ...]:
    import tensorflow as tf

    return (tf.errors.OpError, InputError, ValueError, IndexError, KeyError)


log = logging.getLogger("bigearthnet")


class CheckpointError(InputError):
    """A checkpoint that cannot be found or does not fit the model."""


class CheckpointWriteError(RunFailed):
    """A checkpoint could not be written (disk full, quota): training stops, the previous
    checkpoint stays the latest."""


ORDERS = ("partition", "global")  # how the epoch was cut: fixed-size ranks' parts, elastic order


@dataclass(frozen=True)
class CheckpointRecord:
    """The pointer file of a checkpoint: what it holds besides the tensors (model and
    optimizer), where training stood, and what ``evaluate.py`` needs to rebuild the model.
    ``folder`` and ``tag`` are set by :func:`save`."""

    model: str
    num_classes: int
    position: Position = Position()
    order: str = "partition"  # how the saved epoch was cut (ORDERS): a mid-epoch position
    # resumes only in the same kind of cut (and, "partition", the same steps and world)
    steps_per_epoch: int | None = None
    world_size: int | None = None
    input_shape: tuple[int, ...] = (
        constants.PATCH_SIZE,
        constants.PATCH_SIZE,
        len(constants.BANDS),
    )
    # The channels the model takes, in order (a configuration of constants.BAND_CONFIGS);
    # checkpoints written before band configurations existed were trained on the 12 S2 bands.
    bands: tuple[str, ...] = constants.BANDS
    val_micro_f1: float | None = None
    val_macro_f1: float | None = None
    val_micro_map: float | None = None
    val_macro_map: float | None = None
    data: str | None = None  # the --data folder trained on, and its shards' identity
    data_id: str | None = None  # (manifest.Manifest.data_id): a resume checks it
    # What inference needs besides the weights (channels, normalisation, resampling,
    # classes): a run predicts the same whether its shards still exist or not. None: a
    # pointer written before it was recorded (inference.trained_run decides what then).
    inputs: ModelInputs | None = None
    # Whether the model has the dense head (models.PIXEL_HEAD): rebuilt so to restore it.
    # False in pointers written before the head existed, as those models had none.
    dense_head: bool = False
    folder: str = ""
    tag: str = ""

    @property
    def epoch(self) -> int:
        """Epochs completed."""
        return self.position.epoch

    def to_json(self) -> dict:
        """The pointer file's body: flat, the position's fields (epoch, step, consumed,
        loss_sum, loss_steps) beside the record's."""
        body = dataclasses.asdict(self)
        body.update(body.pop("position"))
        body["input_shape"] = list(self.input_shape)
        body["bands"] = list(self.bands)
        body["inputs"] = self.inputs.to_json() if self.inputs is not None else None
        return {k: v for k, v in body.items() if v is not None}

    @classmethod
    def from_json(cls, raw: dict) -> CheckpointRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        values["position"] = Position.from_record(raw)
        if raw.get("elastic"):
            values["order"] = "global"
        if raw.get("input_shape"):
            values["input_shape"] = tuple(int(v) for v in raw["input_shape"])
        if raw.get("bands"):
            values["bands"] = tuple(str(v) for v in raw["bands"])
        if raw.get("inputs") is not None:
            values["inputs"] = ModelInputs.from_json(raw["inputs"])
        return cls(**values)


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CKPT_DIR


def has_latest(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` holds a 'latest' checkpoint (or its pointer) a run would resume."""
    folder = checkpoint_dir(run_dir)
    return (folder / "latest.json").is_file() or any(folder.glob("latest-e*"))


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
        aside = _aside(checkpoint_dir(run_dir), record.folder)  # a save killed mid-way
        left = f" (aside as {aside.name}: a training rerun puts it back)" if aside.is_dir() else ""
        raise CheckpointError(f"{path}: points to missing folder {record.folder}{left}")
    return record


def _aside(root: Path, folder: str) -> Path:
    """Where :func:`save` sets an earlier ``folder`` aside while replacing it."""
    return root / f".{folder}.replaced"


def recover(run_dir: str | Path) -> None:
    """Put back a folder that a save killed between its renames left aside (the pointer
    names it), else remove it; and a killed save's temporary folders. By the run folder's
    one writer (under its run lock): nothing there is a live writer's."""
    root = checkpoint_dir(run_dir)
    for tmp in root.glob(".*.tmp"):
        shutil.rmtree(tmp, ignore_errors=True)
    for aside in sorted(root.glob(".*.replaced")):
        folder = root / aside.name[1 : -len(".replaced")]
        if restore_aside(folder, aside):
            log.warning("%s: restored from %s: a save killed between its renames", folder,
                        aside.name)  # fmt: skip


def save(
    run_dir: str | Path, tag: str, trackables: dict, record: CheckpointRecord
) -> CheckpointRecord:
    """Write ``trackables`` (model, optimizer) as ``tag``; returns the pointer."""
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    recover(run_dir)
    folder = f"{tag}-e{record.epoch:04d}"
    if record.position.step:
        folder += f"-s{record.position.step:06d}"  # mid-epoch (a requeue): a distinct folder
    tmp = root / f".{folder}.tmp"
    record = dataclasses.replace(record, tag=tag, folder=folder)
    import tensorflow as tf

    try:
        tf.train.Checkpoint(**trackables).write(str(tmp / "ckpt"))
        # The folder's own copy of its pointer: a resume can fall back to it.
        atomic_write_json(tmp / RECORD, record.to_json())
        fsync_tree(tmp)  # every tensor on disk before the folder gets its final name
    except (tf.errors.OpError, OSError) as err:  # e.g. the disk is full
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointWriteError(
            f"{root}: cannot write checkpoint {folder} ({_reason(err)}); "
            "the previous checkpoint is kept"
        ) from None
    # The same epoch saved again (a rerun): the old folder aside until the new is in.
    replace_folder(tmp, root / folder, _aside(root, folder))
    atomic_write_json(root / f"{tag}.json", record.to_json())
    _prune(root, tag, keep=folder)
    return record


def _reason(err: Exception) -> str:
    """The OS's words in a TensorFlow I/O error ("... tempstate123; No space left on device
    [Op:SaveV2]" -> "No space left on device")."""
    import tensorflow as tf

    text = first_line(err)
    if isinstance(err, tf.errors.OpError):
        text = err.message.split("; ")[-1].split(" [Op:")[0].strip()
    return text


def restore(
    run_dir: str | Path, tag: str, trackables: dict, *, partial: bool = False
) -> CheckpointRecord:
    """Restore ``trackables`` from ``tag``; returns its pointer record."""
    record = read_pointer(run_dir, tag)
    if record is None:
        raise CheckpointError(f"{checkpoint_dir(run_dir)}: no '{tag}' checkpoint")
    restore_path(prefix(run_dir, record), trackables, partial=partial)
    return record


def restore_latest(
    run_dir: str | Path,
    trackables: dict,
    *,
    check: Callable[[CheckpointRecord], None] = lambda record: None,
) -> CheckpointRecord | None:
    """Restore the newest readable 'latest' checkpoint; None when there is none.

    The pointer's checkpoint first, then the older folders kept beside it, newest first:
    a checkpoint damaged after it was written (power loss, a truncated file) costs the
    epochs since the previous one, with a warning, never the run. ``check`` vets the record
    before restoring (a run folder of another model raises, it is not a damaged one).
    CheckpointError when checkpoints exist but none can be read.
    """
    recover(run_dir)
    candidates, problems = _latest_candidates(run_dir)
    for record in candidates:
        check(record)
        try:
            restore_path(prefix(run_dir, record), trackables, partial=False)
        except _unreadable() as err:
            problems.append(f"{record.folder}: {first_line(err)[:160]}")
            continue
        for problem in problems:
            log.warning("checkpoint unreadable, falling back to %s: %s", record.folder, problem)
        return record
    if problems:
        raise CheckpointError(
            f"{checkpoint_dir(run_dir)}: no readable checkpoint ({'; '.join(problems)}); "
            "--no-resume starts over"
        )
    return None


def _latest_candidates(run_dir: str | Path) -> tuple[list[CheckpointRecord], list[str]]:
    """'latest' records, the pointer's first; and why any could not be read."""
    records, problems = [], []
    try:
        pointed = read_pointer(run_dir, "latest")
    except CheckpointError as err:
        pointed, problems = None, [first_line(err)]
    if pointed is not None:
        records.append(pointed)
    for folder in sorted(checkpoint_dir(run_dir).glob("latest-e*"), reverse=True):
        if pointed is not None and folder.name == pointed.folder:
            continue
        try:
            records.append(read_folder_record(folder))
        except CheckpointError as err:
            problems.append(f"{folder.name}: {first_line(err)}")
    return records, problems


def read_folder_record(folder: Path) -> CheckpointRecord:
    """The copy of its pointer a checkpoint folder holds (``record.json``), naming the folder
    as it is called now; CheckpointError when it is missing or unreadable."""
    path = folder / RECORD
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return dataclasses.replace(CheckpointRecord.from_json(raw), folder=folder.name)
    except (OSError, ValueError, TypeError) as err:
        raise CheckpointError(f"{path}: unreadable checkpoint record ({first_line(err)})") from None


def prefix(run_dir: str | Path, record: CheckpointRecord) -> Path:
    """The ``tf.train.Checkpoint`` prefix of a pointer's folder."""
    return checkpoint_dir(run_dir) / record.folder / "ckpt"


def weights_files(prefix: str | Path) -> list[Path]:
    """The files of a checkpoint's weights, in the order a map's weights digest hashes them
    (the ``weights_sha256`` tag: :func:`bigearthnet.core.util.files_digest`)."""
    prefix = Path(prefix)
    return [Path(f"{prefix}.index"), *sorted(prefix.parent.glob(f"{prefix.name}.data-*"))]


def digest(prefix: str | Path) -> str:
    """The identity of a checkpoint's tensors: the sha256 of its index, which holds every
    tensor's checksum. A copy or a move keeps it; other weights change it (an evaluation
    and an export decide by it that they speak of the same checkpoint)."""
    path = Path(f"{prefix}.index")
    try:
        return sha256_file(path)[:16]
    except OSError as err:
        raise CheckpointError(f"{path}: unreadable checkpoint index ({err.strerror})") from None


def restore_path(prefix: str | Path, trackables: dict, *, partial: bool) -> None:
    """Restore ``trackables`` from a checkpoint prefix; ``partial``: the checkpoint may hold
    more (evaluation restores the model, not the optimizer)."""
    import tensorflow as tf

    try:
        status = tf.train.Checkpoint(**trackables).read(str(prefix))
        if partial:
            status.expect_partial()  # e.g. evaluation restores the model, not the optimizer
        else:
            status.assert_existing_objects_matched()
    except AssertionError as err:
        raise CheckpointError(f"{prefix}: does not fit this model ({str(err)[:200]})") from None
    except _unreadable() as err:  # a truncated data file, an empty or corrupt index
        if isinstance(err, CheckpointError):
            raise
        raise CheckpointError(
            f"{prefix}: unreadable checkpoint ({first_line(err)[:160]})"
        ) from None


def clear(run_dir: str | Path) -> None:
    """Remove all checkpoints of a run (``--no-resume`` starts from scratch)."""
    shutil.rmtree(checkpoint_dir(run_dir), ignore_errors=True)


def _prune(root: Path, tag: str, keep: str) -> None:
    """Remove ``tag``'s older folders but ``keep`` and, for 'latest', the one before it
    (the fallback if ``keep`` turns out damaged)."""
    older = sorted(
        (p for p in root.glob(f"{tag}-e*") if p.is_dir() and p.name != keep), reverse=True
    )
    spare = 1 if tag == "latest" else 0
    for path in older[spare:]:
        shutil.rmtree(path, ignore_errors=True)
