"""``model_card.md``: what the exported model is, how it was trained and how well it does,
rendered from the export record, the run's configuration and its evaluation (Jinja2
template ``templates/model_card.md.j2``): with the dense head, the pixel figures of that
evaluation, against what reference, or why there are none. A card travels without its
machine: paths show as :func:`bigearthnet.core.display.shown_path` shows them (the run by
its name, its files relative to it), numbers as the pages show them; and its intended use
follows where the training data came from (a model of synthetic data is not offered for
imagery)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jinja2

from bigearthnet.core import constants, display
from bigearthnet.core.config import TrainConfig
from bigearthnet.evaluation.report import format_score
from bigearthnet.evaluation.summary import EvalSummary, PixelReference
from bigearthnet.formats.archive_origin import REAL, UNKNOWN, ArchiveOrigin
from bigearthnet.formats.exported import MLM_VERSION, ExportInfo
from bigearthnet.formats.manifest import Manifest
from bigearthnet.formats.pixel_eval import TRUTH
from bigearthnet.formats.shards import describe_encoding


@dataclass(frozen=True)
class BandRow:
    name: str
    resolution: int | str
    mean: float
    std: float
    encoding: str  # what the uint16 value of this channel means


@dataclass(frozen=True)
class ClassRow:
    index: int
    name: str
    colour: str  # #rrggbb
    tuned: float | None
    f1: float | None
    ap: float | None
    support: int | None


@dataclass(frozen=True)
class PixelFacts:
    """What the card and the STAC item say of the dense head's figures: those of the
    exported checkpoint's evaluation (:func:`~bigearthnet.evaluation.summary.
    read_pixel_figures`), or why there are none."""

    split: str = ""
    references: tuple[PixelReference, ...] = ()
    note: str = ""  # why there are none ("" when there are, or the model has no dense head)
    truth_maps: str = ""  # the truth file scored against, as the evaluation names it


def reference_text(against: str, origin: ArchiveOrigin, truth_maps: str = "") -> str:
    """What the dense head was scored against, in words (the card's and the item's)."""
    if against == TRUTH:
        return "the synthetic archive's true class per 10 m pixel" + (
            f" ({Path(truth_maps).name})" if truth_maps else ""
        )
    if origin.synthetic:
        return "the synthetic archive's CORINE-like reference maps (Reference_Maps/, as reBEN's)"
    if origin.kind == REAL:
        return "reBEN's reference maps: CORINE Land Cover 2018 polygons at 10 m"
    return "the archive's reference maps (Reference_Maps/, CORINE Land Cover)"


@dataclass(frozen=True)
class RunFacts:
    """What the card says of the run besides the export record."""

    config: TrainConfig
    world_size: int
    global_batch: int | None
    epochs_trained: int | None
    data: Manifest | None  # the training data's manifest, when still there
    evaluation: EvalSummary | None  # of the exported checkpoint, when evaluated
    pixel: PixelFacts = PixelFacts()  # the dense head's figures in that evaluation

    @property
    def origin(self) -> ArchiveOrigin:
        """Where the training data came from; unknown when its manifest is gone."""
        return self.data.archive_origin if self.data is not None else ArchiveOrigin(UNKNOWN)


def class_rows(info: ExportInfo, evaluation: EvalSummary | None) -> list[ClassRow]:
    colours = constants.class_hex_colours(info.num_classes)
    rows = []
    for index, name in enumerate(info.class_names):
        scores = evaluation.per_class[index] if evaluation is not None else None
        rows.append(
            ClassRow(
                index=index,
                name=name,
                colour=f"#{colours[index]}",
                tuned=info.tuned_thresholds[index] if info.tuned_thresholds else None,
                f1=scores.f1 if scores else None,
                ap=scores.ap if scores else None,
                support=scores.support if scores else None,
            )
        )
    return rows


def band_rows(info: ExportInfo) -> list[BandRow]:
    return [
        BandRow(name, constants.BAND_RESOLUTION_M.get(name, 10), mean, std, describe_encoding(name))
        for name, mean, std in zip(info.bands, info.band_mean, info.band_std)
    ]


def render_card(info: ExportInfo, facts: RunFacts) -> str:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("bigearthnet.export", "templates"),
        undefined=jinja2.StrictUndefined,  # a misspelt field fails the export, not the card
        keep_trailing_newline=True,
        autoescape=False,  # Markdown, not HTML
    )
    template = environment.get_template("model_card.md.j2")
    # Rendered at export: a relative path of the record is relative to this command's folder.
    run_dir = Path(info.source.run_dir).absolute()
    return template.render(
        info=info,
        origin=facts.origin,
        run=display.shown_path(run_dir, run_dir),  # its name
        in_run=lambda path: display.shown_path(Path(path).absolute(), run_dir),
        in_text=lambda text: display.shown_text(text, run_dir),
        show=display,
        bands=band_rows(info),
        band_config=constants.band_config_name(tuple(info.bands)) or ",".join(info.bands),
        classes=class_rows(info, facts.evaluation),
        evaluation=facts.evaluation,
        pixel=facts.pixel,
        reference_text=lambda against: reference_text(
            against, facts.origin, facts.pixel.truth_maps
        ),
        config=facts.config,
        world_size=facts.world_size,
        global_batch=facts.global_batch,
        epochs_trained=facts.epochs_trained,
        data=facts.data,
        number=format_score,
        mlm_version=MLM_VERSION,
    )
