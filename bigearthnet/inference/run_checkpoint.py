"""Which checkpoint of a run folder a command reads, found without TensorFlow: the run's
``config.yaml``, the checkpoint ``best``, ``latest`` or a path names, and its pointer record
(model, classes, inputs). Evaluation, maps and exports check these before TensorFlow starts
(a mistyped folder or checkpoint answers at once), and :func:`~bigearthnet.inference.
trained_run.load_model` reads the same to rebuild the model. :class:`RunCheckpoint` is
the options that name it, shared by those commands."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core import constants
from bigearthnet.core.config import TrainConfig, load_run_config
from bigearthnet.core.declare import option
from bigearthnet.formats import checkpoints
from bigearthnet.formats.checkpoints import CheckpointError, CheckpointRecord

__all__ = ["RunCheckpoint", "check_label_set", "resolve_checkpoint", "run_checkpoint"]


@dataclass(frozen=True, kw_only=True)
class RunCheckpoint:
    """A checkpoint of a run folder: the options of every command that reads one
    (evaluate.py, bigearthnet-export, bigearthnet-map), declared once; a command inherits
    them (``opts.run_dir``) and says where the run folder is required."""

    run_dir: Path | None = option(None, "run folder made by train.py", metavar="RUN")
    checkpoint: str = option(
        "best", "the run's checkpoint: best, latest, or PATH of a checkpoint folder / ckpt "
        "prefix", metavar="best|latest|PATH",
    )  # fmt: skip
    stats_from: Path | None = option(
        None, "only for a checkpoint written before runs recorded their normalisation, whose "
        "training data is gone: normalise with the train split of these shards (made the "
        "same way); a newer checkpoint carries its own and ignores this", metavar="SHARDS",
    )  # fmt: skip


def run_checkpoint(
    run_dir: str | Path, checkpoint: str = "best"
) -> tuple[TrainConfig, Path, CheckpointRecord]:
    """The run's options, the checkpoint's prefix and its record; ConfigError or
    CheckpointError naming the folder, file or checkpoint otherwise."""
    config = load_run_config(run_dir)
    prefix, record = resolve_checkpoint(Path(run_dir), checkpoint, config)
    check_label_set(record, config)
    return config, prefix, record


def resolve_checkpoint(
    run_dir: Path, spec: str, config: TrainConfig
) -> tuple[Path, CheckpointRecord]:
    """Checkpoint prefix and pointer record of ``spec``: 'best', 'latest' or a path."""
    if spec in checkpoints.TAGS:
        record = checkpoints.read_pointer(run_dir, spec)
        if record is None:
            raise CheckpointError(
                f"{checkpoints.checkpoint_dir(run_dir)}: no '{spec}' checkpoint "
                "(has training finished an epoch?)"
            )
        return checkpoints.prefix(run_dir, record), record
    path = Path(spec)
    prefix = path / "ckpt" if path.is_dir() else path
    if not Path(f"{prefix}.index").is_file():
        raise CheckpointError(
            f"{spec}: not a checkpoint (no {prefix.name}.index); use best, latest, "
            "a checkpoint folder or its ckpt prefix"
        )
    return prefix, _record_of_folder(prefix.parent, config)


def _record_of_folder(folder: Path, config: TrainConfig) -> CheckpointRecord:
    """The pointer naming ``folder`` if there is one, else what the run's config says."""
    if folder.parent.name == checkpoints.CKPT_DIR:
        for tag in checkpoints.TAGS:
            try:
                record = checkpoints.read_pointer(folder.parent.parent, tag)
            except CheckpointError:
                continue
            if record is not None and record.folder == folder.name:
                return record
    # A copied or renamed checkpoint folder: its own copy of the pointer, else (a folder
    # from before those copies) the run's configuration says what was trained.
    try:
        return checkpoints.read_folder_record(folder)
    except CheckpointError:
        return CheckpointRecord(model=config.model, num_classes=config.labels, folder=folder.name)


def check_label_set(record: CheckpointRecord, config: TrainConfig) -> None:
    """CheckpointError unless the checkpoint's class count is the run's label set."""
    classes, wanted = record.num_classes, config.labels
    if classes not in constants.CLASS_SETS:
        raise CheckpointError(f"checkpoint {record.folder} has {classes} classes, not 19 or 43")
    if classes != wanted:
        raise CheckpointError(
            f"checkpoint {record.folder} has {classes} classes but the run's label set is {wanted}"
        )
