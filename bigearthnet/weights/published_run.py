"""``bigearthnet-weights run``: a published classifier (weights with a head) as a trained-run
folder, so ``evaluate.py``, every map command and ``bigearthnet-export`` use it unchanged.

The folder holds what a training run leaves for them: ``config.yaml`` (model, label set, the
source file as ``init_weights``), one checkpoint whose pointer (``best.json``, epoch 0)
records the model's inputs - channels, the source's normalisation in the shards' codes,
resampling, classes - and ``weights.json``, the import's record (source, file digest,
adaptations). It is written beside ``out`` and renamed into place when complete;
``--overwrite`` replaces only a run folder this command made.
"""

from __future__ import annotations

from pathlib import Path

from bigearthnet.core.config import RUN_CONFIG, TrainConfig, save_yaml
from bigearthnet.core.errors import InputError
from bigearthnet.core.folders import Owner, publishing
from bigearthnet.formats import checkpoints, run_folder, weights_record
from bigearthnet.formats.checkpoints import CheckpointRecord
from bigearthnet.formats.shards import image_shape
from bigearthnet.formats.weights_record import WeightsRecord
from bigearthnet.weights.importer import (
    WeightsOptions,
    check_out,
    check_registry_fit,
    convert_file,
    keras_model,
)

# A run folder of this command: its mark, or (made before marks) weights.json beside the
# config and the checkpoint; --overwrite never replaces a run train.py made.
OWNER = Owner(
    "bigearthnet-weights run", ".bigearthnet-weights-run", option="--out",
    signature=weights_record.RECORD_FILE, names=frozenset({RUN_CONFIG, run_folder.CHECKPOINTS}),
)  # fmt: skip


def make_run(opts: WeightsOptions) -> WeightsRecord:
    """Write the run folder ``opts.out`` for the classifier in ``opts.src``; returns the
    import record."""
    src = opts.src
    check_out(src, opts.out, opts.overwrite, OWNER)
    converted = convert_file(opts)
    record = converted.record
    if not record.has_head:
        other = converted.layout.other_head
        what = f"a head of {', '.join(other)} (not one linear layer)" if other else "no head"
        raise InputError(
            f"{src}: has {what}; a run needs a linear classifier head (use import and "
            "train.py --init-weights to train one)"
        )
    check_registry_fit(record, src)
    final = Path(opts.out)
    with publishing(final, OWNER, replace=opts.overwrite) as folder:
        _write_run(folder, final, keras_model(converted), record)
    return record


def _write_run(folder: Path, final: Path, model, record: WeightsRecord) -> None:
    inputs = record.model_inputs()
    config = TrainConfig(
        data=record.file,
        run_dir=str(final),
        model=record.model,
        labels=inputs.num_classes,
        init_weights=record.file,
        epochs=1,
        pixel_loss_weight=0.0,  # a published classifier has no dense head
    )
    save_yaml(config, folder / RUN_CONFIG)
    pointer = CheckpointRecord(
        model=record.model,
        num_classes=inputs.num_classes,
        input_shape=image_shape(len(record.bands)),
        bands=record.bands,
        inputs=inputs,
    )
    checkpoints.save(folder, "best", {"model": model}, pointer)
    weights_record.write(folder, record)
