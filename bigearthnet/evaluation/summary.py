"""An evaluation's ``metrics.json`` as a typed record: :class:`EvalSummary`, written by
:func:`write_metrics` (its one writer, called last by :func:`bigearthnet.evaluation.report.
write_outputs`: its presence marks a complete evaluation folder) and read by
:func:`read_metrics` (its one reader: exports, run pages, the model card); with the dense
head's figures read back whole, per class too, by :func:`read_pixel_figures`."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bigearthnet.core.errors import InputError
from bigearthnet.core.util import atomic_write_json
from bigearthnet.formats import run_folder
from bigearthnet.formats.pixel_eval import (
    PIXEL_PER_CLASS,
    REFERENCE,
    TRUTH,
    PixelClassRow,
    read_pixel_classes,
)

THRESHOLDS_FILE = "thresholds.json"  # per-class thresholds tuned on val, when asked for
# metrics.json's key prefix of each reference the dense head is scored against
PIXEL_PREFIX = {REFERENCE: "pixel", TRUTH: "pixel_truth"}


@dataclass(frozen=True)
class ClassScores:
    """One class's row of metrics.json."""

    name: str
    support: int
    precision: float
    recall: float
    f1: float
    ap: float | None  # None: no positive in the split
    index: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"class": self.name, "index": self.index, "support": self.support,
                "precision": self.precision, "recall": self.recall, "f1": self.f1,
                "ap": self.ap}  # fmt: skip


@dataclass(frozen=True)
class PixelFigures:
    """The dense head's headline figures against one reference (from its confusion
    matrix of pixel counts summed over ranks)."""

    count: int  # labelled pixels scored: every labelled pixel of the split
    overall_accuracy: float | None  # None: no labelled pixel
    miou: float | None
    miou_classes: int  # the classes with reference pixels, which mIoU is the mean over


@dataclass(frozen=True)
class PixelSummary:
    """The dense head's figures of an evaluation (None for a model without it): against the
    shards' reference maps and a synthetic archive's truth where they are, and how far the
    two heads agree. In metrics.json at the top level: ``pixel_overall_accuracy``,
    ``pixel_miou``, ``pixel_count``, ``pixel_miou_classes`` (``pixel_truth_...`` against the
    truth, with ``pixel_truth_maps``), ``head_agreement_micro_f1``, ``head_agreement_exact``
    and ``pixel_classes_micro_f1``."""

    agreement_micro_f1: float
    agreement_exact: float
    classes_micro_f1: float
    against: dict[str, PixelFigures] = dataclasses.field(default_factory=dict)
    truth_maps: str = ""  # the truth file scored against ("" without)
    # The pixel files written beside metrics.json -> their digests (pixel_eval.file_digests);
    # empty in evaluations written before they were recorded.
    files: dict[str, str] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "head_agreement_micro_f1": self.agreement_micro_f1,
            "head_agreement_exact": self.agreement_exact,
            "pixel_classes_micro_f1": self.classes_micro_f1,
            "pixel_files": self.files,
        }
        for against, figures in self.against.items():
            prefix = PIXEL_PREFIX[against]
            body.update({f"{prefix}_{k}": v for k, v in dataclasses.asdict(figures).items()})
        if TRUTH in self.against:
            body["pixel_truth_maps"] = self.truth_maps
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> PixelSummary | None:
        if "head_agreement_micro_f1" not in body:
            return None
        keys = [f.name for f in dataclasses.fields(PixelFigures)]
        return cls(
            body["head_agreement_micro_f1"],
            body["head_agreement_exact"],
            body["pixel_classes_micro_f1"],
            {against: PixelFigures(**{k: body[f"{prefix}_{k}"] for k in keys})
             for against, prefix in PIXEL_PREFIX.items() if f"{prefix}_count" in body},
            str(body.get("pixel_truth_maps", "")),
            {str(k): str(v) for k, v in (body.get("pixel_files") or {}).items()},
        )  # fmt: skip


@dataclass(frozen=True)
class EvalSummary:
    """What an evaluation says of a checkpoint on a split: the headline metrics (from
    :func:`bigearthnet.evaluation.metrics.full_report`), per class, and where they come
    from."""

    split: str
    epoch: int | None
    checkpoint_path: str
    checkpoint_digest: str | None  # formats.checkpoints.digest (None: older evaluations)
    count: int
    micro_f1: float
    macro_f1: float
    micro_map: float | None
    macro_map: float | None
    micro_precision: float
    micro_recall: float
    macro_precision: float
    macro_recall: float
    macro_classes: int | None  # classes the macro averages ran over (None: older files)
    threshold: float | None  # None: per-class thresholds (``tuned_thresholds``)
    tuned_thresholds: tuple[float, ...] | None
    per_class: tuple[ClassScores, ...]
    samples_f1: float | None = None
    weighted_f1: float | None = None
    constant_micro_f1: float | None = None  # the best constant answer (None: older files)
    checkpoint: str = ""  # as asked: best, latest or a path
    model: str = ""
    bands: tuple[str, ...] = ()
    data: str = ""
    world_size: int | None = None
    pixel: PixelSummary | None = None  # the dense head's (None: a model without it)
    folder: Path | None = None  # where it was read from (not written)

    @property
    def classes(self) -> list[str]:
        return [row.name for row in self.per_class]

    def to_json(self) -> dict[str, Any]:
        body = {k: v for k, v in dataclasses.asdict(self).items() if k not in _NOT_WRITTEN}
        body["threshold"] = (
            list(self.tuned_thresholds) if self.tuned_thresholds is not None else self.threshold
        )
        body["thresholds_tuned_on"] = "val" if self.tuned_thresholds is not None else None
        body["bands"] = list(self.bands)
        body["classes"] = self.classes
        body["per_class"] = [row.to_json() for row in self.per_class]
        return body | (self.pixel.to_json() if self.pixel is not None else {})


_NOT_WRITTEN = ("folder", "tuned_thresholds", "per_class", "pixel")


@dataclass(frozen=True)
class PixelReference:
    """The dense head's figures against one reference, read back whole: the headline of
    ``metrics.json`` and the rows of ``pixel_per_class.csv``."""

    against: str  # pixel_eval.REFERENCE or TRUTH
    figures: PixelFigures
    rows: tuple[PixelClassRow, ...]


def pixel_files_recorded(summary: EvalSummary) -> bool:
    """Whether the evaluation's metrics.json vouches for its per-class pixel file (its
    digest; evaluations written before digests do not): only then is it read."""
    return summary.pixel is not None and PIXEL_PER_CLASS in summary.pixel.files


def read_pixel_figures(summary: EvalSummary) -> list[PixelReference]:
    """The dense head's figures of the evaluation ``summary`` was read from (empty: it has
    none), each reference's per-class rows read from its folder's ``pixel_per_class.csv``,
    checked to be the file its metrics.json recorded (:func:`pixel_files_recorded`):
    InputError naming the file otherwise (cut short, or another evaluation's)."""
    if summary.pixel is None or not summary.pixel.against:
        return []
    if summary.folder is None or not pixel_files_recorded(summary):
        raise ValueError("read_pixel_figures: an evaluation folder's, whose files are recorded")
    rows = read_pixel_classes(summary.folder, summary.pixel.files[PIXEL_PER_CLASS])
    return [
        PixelReference(against, figures, tuple(row for row in rows if row.against == against))
        for against, figures in summary.pixel.against.items()
    ]


def summary_of(report: dict[str, Any], **source: Any) -> EvalSummary:
    """The record of a :func:`~bigearthnet.evaluation.metrics.full_report` dict and its
    ``source`` (split, checkpoint, checkpoint_path, checkpoint_digest, epoch, model, bands,
    data, world_size; pixel: the dense head's figures)."""
    threshold = report["threshold"]
    tuned = tuple(float(t) for t in threshold) if isinstance(threshold, list) else None
    return _summary(report, tuned, **source)


def write_metrics(out_dir: Path, summary: EvalSummary) -> None:
    atomic_write_json(out_dir / run_folder.METRICS, summary.to_json())


def read_metrics(eval_dir: Path) -> EvalSummary:
    """``metrics.json`` (and ``thresholds.json`` if tuned) of an evaluation folder;
    InputError naming the file when it cannot be read."""
    path = eval_dir / run_folder.METRICS
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        tuned = None
        if (eval_dir / THRESHOLDS_FILE).is_file():
            raw = json.loads((eval_dir / THRESHOLDS_FILE).read_text(encoding="utf-8"))
            tuned = tuple(float(t) for t in raw["thresholds"])
        return dataclasses.replace(_summary(body, tuned), folder=eval_dir)
    except OSError as err:
        raise InputError(f"{path}: unreadable: {err.strerror or err}") from None
    except (ValueError, KeyError, TypeError) as err:
        raise InputError(f"{path}: not an evaluation's metrics ({err!r})") from None


def _summary(body: dict[str, Any], tuned: tuple[float, ...] | None, **source: Any) -> EvalSummary:
    body = {**body, **source}
    threshold = body["threshold"]
    return EvalSummary(
        split=body["split"],
        epoch=body.get("epoch"),
        checkpoint_path=body["checkpoint_path"],
        checkpoint_digest=body.get("checkpoint_digest"),
        count=int(body["count"]),
        **{key: body[key] for key in _HEADLINE},
        macro_classes=body.get("macro_classes"),
        threshold=float(threshold) if isinstance(threshold, (int, float)) else None,
        tuned_thresholds=tuned,
        per_class=tuple(
            ClassScores(
                row["class"],
                row["support"],
                row["precision"],
                row["recall"],
                row["f1"],
                row["ap"],
                row.get("index", i),
            )  # fmt: skip
            for i, row in enumerate(body["per_class"])
        ),
        samples_f1=body.get("samples_f1"),
        weighted_f1=body.get("weighted_f1"),
        constant_micro_f1=body.get("constant_micro_f1"),
        checkpoint=str(body.get("checkpoint", "")),
        model=str(body.get("model", "")),
        bands=tuple(body.get("bands") or ()),
        data=str(body.get("data", "")),
        world_size=body.get("world_size"),
        pixel=body.get("pixel") or PixelSummary.from_json(body),
    )


_HEADLINE = (
    "micro_f1", "macro_f1", "micro_map", "macro_map",
    "micro_precision", "micro_recall", "macro_precision", "macro_recall",
)  # fmt: skip
