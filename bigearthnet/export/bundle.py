"""A trained run's checkpoint -> an export folder that needs nothing else:

``savedmodel/``  (serving signature: uint16 patches -> probabilities, and with the dense head
per-pixel probabilities), ``model.onnx`` (the same, checked with onnxruntime),
``model_card.md``, ``item.json`` (STAC + MLM) and ``export.json``
(:mod:`bigearthnet.formats.exported`). Everything is written into a hidden folder beside
``OUT`` and renamed into place at the end (:func:`bigearthnet.core.folders.publishing`): an
interrupted export leaves no folder that looks complete, and ``--overwrite`` replaces only an
export folder.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tensorflow as tf

from bigearthnet.core import distributed
from bigearthnet.core.errors import InputError, RunFailed
from bigearthnet.core.folders import publishing
from bigearthnet.core.util import atomic_write_text
from bigearthnet.evaluation.summary import (
    EvalSummary,
    pixel_files_recorded,
    read_metrics,
    read_pixel_figures,
)
from bigearthnet.export.card import PixelFacts, RunFacts, render_card
from bigearthnet.export.onnx_model import OnnxModel, OnnxUnavailable, export_onnx
from bigearthnet.export.options import FORMATS, OWNER, ExportOptions
from bigearthnet.export.serving import ServingModule, probe_batch, save_savedmodel, serve
from bigearthnet.export.stac import (
    build_item,
    training_footprint,
    validate_item,
)
from bigearthnet.formats import checkpoints, exported, run_folder
from bigearthnet.formats.exported import ExportInfo, ExportSource, write_export_info
from bigearthnet.formats.history import read_history
from bigearthnet.formats.manifest import Manifest
from bigearthnet.inference.trained_run import LoadedModel, load_model, training_data

log = distributed.log
# The reloaded SavedModel must reproduce the in-memory model (same graph, same weights).
SAVEDMODEL_TOLERANCE = 1e-5


@dataclass
class ExportSummary:
    """What an export wrote, for the command's closing lines."""

    folder: Path
    info: ExportInfo
    sizes: dict[str, int]  # bytes of each model file written
    seconds: float
    notes: list[str] = field(default_factory=list)  # what was left out, and why


def export_run(opts: ExportOptions) -> ExportSummary:
    """Export the run's checkpoint; InputError (nothing written) on bad input."""
    run_dir, out, eval_dir, stats_from = opts.run_dir, opts.out, opts.eval_dir, opts.stats_from
    started = time.perf_counter()
    opts.check_inputs()
    loaded = load_model(run_dir, opts.checkpoint, stats_from)
    trained_on = training_data(loaded.config, loaded.record)  # card facts, when still there
    evaluation, notes = _evaluation(run_dir, loaded, eval_dir)
    pixel = _pixel_facts(loaded, evaluation, notes)
    with publishing(out, OWNER, replace=opts.overwrite) as work:
        onnx, sizes = _write_models(work, loaded, opts.formats, notes)
        info = _export_info(loaded, trained_on, evaluation, opts.name, onnx, sizes)
        facts = _run_facts(run_dir, loaded, trained_on, evaluation, pixel)
        atomic_write_text(work / exported.CARD_FILE, render_card(info, facts))
        _write_item(work, info, loaded, trained_on, facts)
        write_export_info(work, info)  # last: its presence marks a complete export
    return ExportSummary(out, info, sizes, time.perf_counter() - started, notes)


def default_name(loaded: LoadedModel) -> str:
    """bigearthnet-MODEL-Cc-RUN-eEPOCH, the run folder's name reduced to the characters a
    model name may hold (a folder called "rün 1" or "run(1)" still exports)."""
    run_name = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(str(loaded.run_dir)).name).strip("-.")
    record = loaded.record
    return f"bigearthnet-{record.model}-{loaded.num_classes}c-{run_name or 'run'}-e{loaded.epoch}"


def _evaluation(
    run_dir: Path, loaded: LoadedModel, eval_dir: Path | None
) -> tuple[EvalSummary | None, list[str]]:
    """The run's test evaluation of this very checkpoint, if there is one."""
    folder = eval_dir if eval_dir is not None else run_folder.eval_dir(run_dir, "test")
    if not (folder / run_folder.METRICS).is_file():
        if eval_dir is not None:
            raise InputError(f"{folder}: no metrics.json (not an evaluate.py output folder)")
        return None, [f"no test metrics in the card: {folder} has no metrics.json"]
    summary = read_metrics(folder)
    if not _same_checkpoint(summary, loaded):
        note = (
            f"no test metrics in the card: {folder} evaluated {summary.checkpoint_path}, "
            f"not the exported {loaded.prefix}"
        )
        if eval_dir is not None:
            raise InputError(note.replace("no test metrics in the card: ", ""))
        return None, [note]
    if len(summary.per_class) != loaded.num_classes:
        raise InputError(
            f"{folder}: {len(summary.per_class)} classes, the model has {loaded.num_classes}"
        )
    return summary, []


def _pixel_facts(
    loaded: LoadedModel, evaluation: EvalSummary | None, notes: list[str]
) -> PixelFacts:
    """The dense head's figures in ``evaluation`` (read back whole and checked to be its
    own: InputError otherwise), or why there are none."""
    if not loaded.has_dense_head:
        return PixelFacts()
    if evaluation is None:
        note = "the run has no evaluation of this checkpoint (evaluate.py scores the dense head)"
    elif evaluation.pixel is None or not evaluation.pixel.against:
        note = (
            f"the {evaluation.split} evaluation of this checkpoint has no pixel figures: the "
            "shards it scored carry no reference maps, or it was made before evaluate.py "
            "scored the dense head; evaluate on shards with maps and export again"
        )
    elif not pixel_files_recorded(evaluation):
        note = (
            f"the {evaluation.split} evaluation of this checkpoint was made before its "
            "metrics.json recorded its pixel files, which cannot be told from another "
            "evaluation's; run evaluate.py again and export again"
        )
    else:
        references = read_pixel_figures(evaluation)
        return PixelFacts(evaluation.split, tuple(references), "",
                          evaluation.pixel.truth_maps)  # fmt: skip
    notes.append(f"no pixel metrics in the card: {note}")
    return PixelFacts(note=note)


def _same_checkpoint(summary: EvalSummary, loaded: LoadedModel) -> bool:
    """Whether the evaluation scored the loaded checkpoint: by the digest of its tensors
    (the same run named by another path, or copied, still matches), else (an evaluation
    written before digests) by the resolved path."""
    if summary.checkpoint_digest is not None:
        return summary.checkpoint_digest == checkpoints.digest(loaded.prefix)
    return Path(summary.checkpoint_path).resolve() == Path(loaded.prefix).resolve()


def _write_models(
    folder: Path, loaded: LoadedModel, formats: tuple[str, ...], notes: list[str]
) -> tuple[OnnxModel | None, dict[str, int]]:
    """The SavedModel and/or ONNX model; returns the ONNX model (None: not written) and the
    bytes of each model file written."""
    module = ServingModule(loaded)
    probe = probe_batch(loaded)
    expected = {exported.OUTPUT_NAME: loaded.predict(probe)}
    if loaded.has_dense_head:
        expected[exported.PIXEL_OUTPUT_NAME] = loaded.predict_pixels(probe)
    sizes: dict[str, int] = {}
    saved = folder / exported.SAVEDMODEL_DIR
    save_savedmodel(module, saved)
    reloaded = tf.saved_model.load(str(saved)).signatures[exported.SIGNATURE]
    reference = serve(reloaded, tf.constant(probe))
    if set(reference) != set(expected):
        raise RunFailed(f"the saved model gives {sorted(reference)}, not {sorted(expected)}")
    drift = max(float(np.abs(reference[name] - expected[name]).max()) for name in expected)
    if drift > SAVEDMODEL_TOLERANCE:
        raise RunFailed(f"the saved model differs from the checkpoint's by {drift:.2e}")
    if "savedmodel" in formats:
        sizes["savedmodel"] = sum(p.stat().st_size for p in saved.rglob("*") if p.is_file())
    onnx = None
    if "onnx" in formats:
        try:
            onnx = export_onnx(module, folder / exported.ONNX_FILE, probe, reference)
            sizes["onnx"] = onnx.path.stat().st_size
        except OnnxUnavailable as err:
            notes.append(f"no ONNX model: {err} (TensorFlow {tf.__version__})")
    if "savedmodel" not in formats:
        shutil.rmtree(saved)  # it was only the reference of the ONNX check
    if not sizes:
        raise InputError("nothing to export: ONNX was the only format asked for and failed")
    return onnx, sizes


def _export_info(
    loaded: LoadedModel,
    trained_on: Manifest | None,
    evaluation: EvalSummary | None,
    name: str | None,
    onnx: OnnxModel | None,
    sizes: dict[str, int],
) -> ExportInfo:
    default = default_name(loaded)
    return ExportInfo(
        name=name or default,
        model=loaded.record.model,
        class_names=tuple(loaded.class_names),
        bands=tuple(loaded.bands),
        input_shape=tuple(loaded.record.input_shape),  # type: ignore[arg-type]
        band_mean=loaded.inputs.mean,
        band_std=loaded.inputs.std,
        channel_scale=loaded.inputs.channel_scale,
        channel_offset=loaded.inputs.channel_offset,
        resampling=loaded.resampling,
        threshold=float(loaded.config.threshold),
        tuned_thresholds=evaluation.tuned_thresholds if evaluation is not None else None,
        source=ExportSource(
            run_dir=str(loaded.run_dir),
            checkpoint=str(loaded.prefix),
            epoch=loaded.epoch,
            data=str(loaded.record.data or loaded.config.data),
            data_id=loaded.record.data_id,
            init_weights=loaded.initial_weights,
        ),
        formats=tuple(f for f in FORMATS if f in sizes),
        tensorflow=tf.__version__,
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        onnx_opset=onnx.opset if onnx is not None else None,
        onnx_max_abs_diff=onnx.max_abs_diff if onnx is not None else None,
        pixel_class_names=tuple(loaded.pixel_class_names) if loaded.has_dense_head else None,
    )


def _run_facts(
    run_dir: Path,
    loaded: LoadedModel,
    trained_on: Manifest | None,
    evaluation: EvalSummary | None,
    pixel: PixelFacts,
) -> RunFacts:
    history = read_history(run_dir, through_epoch=loaded.epoch)
    last = history[-1] if history else None
    return RunFacts(
        config=loaded.config,
        world_size=last.world_size if last else (loaded.record.world_size or 1),
        global_batch=last.global_batch if last else None,
        epochs_trained=loaded.epoch,
        data=trained_on,
        evaluation=evaluation,
        pixel=pixel,
    )


def _write_item(
    folder: Path,
    info: ExportInfo,
    loaded: LoadedModel,
    trained_on: Manifest | None,
    facts: RunFacts,
) -> None:
    footprint = training_footprint(Path(loaded.config.data), trained_on)
    parameters = int(loaded.model.count_params())
    item = build_item(info, footprint, total_parameters=parameters, origin=facts.origin,
                      pixel=facts.pixel)  # fmt: skip
    body = item.to_dict(include_self_link=False)
    validate_item(body)
    atomic_write_text(folder / exported.STAC_FILE, json.dumps(body, indent=2) + "\n")
