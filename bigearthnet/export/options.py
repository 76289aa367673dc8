"""``bigearthnet-export``'s options, declared once and free of TensorFlow (``--help`` and
option errors answer at once): :class:`ExportOptions`, which
:func:`~bigearthnet.export.bundle.export_run` takes."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core.declare import check_fields, option, reuse
from bigearthnet.core.errors import ConfigError, InputError
from bigearthnet.core.folders import (
    Owner,
    Replacing,
    check_output,
    folder_path,
    require_outside_cwd,
)
from bigearthnet.core.util import overlapping
from bigearthnet.export.stac import MODEL_NAME_PATTERN
from bigearthnet.formats import exported
from bigearthnet.inference.run_checkpoint import RunCheckpoint, run_checkpoint

FORMATS = ("savedmodel", "onnx")
# An export folder: its mark, or (made before marks) export.json beside the model files.
OWNER = Owner(
    "bigearthnet-export", ".bigearthnet-export", option="--out", signature=exported.INFO_FILE,
    names=frozenset({exported.SAVEDMODEL_DIR, exported.ONNX_FILE, exported.CARD_FILE,
                     exported.STAC_FILE}),
)  # fmt: skip


def parse_formats(text: str) -> tuple[str, ...]:
    """``savedmodel,onnx`` -> the formats, in the order given; ConfigError on an unknown one."""
    names = tuple(dict.fromkeys(n.strip().lower() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in FORMATS]
    if unknown or not names:
        raise ConfigError(  # argparse names the flag
            f"unknown format {','.join(unknown) or repr(text)}; choose from {','.join(FORMATS)}"
        )
    return names


def model_name(flag: str, name: str) -> str:
    """``name`` if it fits the MLM name pattern (the STAC item's id too), else ConfigError."""
    if not re.fullmatch(MODEL_NAME_PATTERN, name):
        raise ConfigError(
            f"{flag} {name!r}: a model name starts with a letter, ends with a letter or digit "
            "and holds only letters, digits, '_', '.', '-' and spaces"
        )
    return name


@dataclass(frozen=True, kw_only=True)
class ExportOptions(RunCheckpoint):
    """Which checkpoint of which run is exported, as what, and where."""

    run_dir: Path = reuse(RunCheckpoint, "run_dir", default=dataclasses.MISSING, positional=True)
    out: Path = option(help="the export folder", metavar="DIR", parse=folder_path,
                       check=require_outside_cwd)  # fmt: skip
    formats: tuple[str, ...] = option(
        FORMATS, "model files to write, comma-separated: savedmodel, onnx (the SavedModel is "
        "what bigearthnet-map --model reads)", parse=parse_formats, flag="--format",
        metavar="LIST",
    )  # fmt: skip
    eval_dir: Path | None = option(
        None, "the evaluate.py output whose metrics go into the card; it must have evaluated "
        "the exported checkpoint (default: RUN/eval-test, when it did)", metavar="DIR",
    )  # fmt: skip
    name: str | None = option(
        None, "the model's name in the card and the STAC item (default: "
        "bigearthnet-MODEL-Cc-RUNNAME-eEPOCH)", check=model_name,
    )  # fmt: skip
    overwrite: bool = reuse(Replacing, "overwrite", deprecated=("--force",))

    def __post_init__(self) -> None:
        check_fields(self)
        unknown = [f for f in self.formats if f not in FORMATS]
        if unknown or not self.formats:
            raise ConfigError(f"--format {','.join(self.formats)}: choose from {','.join(FORMATS)}")

    def check_inputs(self) -> None:
        """InputError, before anything is written or TensorFlow loads, for an OUT that
        overlaps an input or cannot be written, or a run folder or checkpoint not there."""
        out = self.out
        # --overwrite replaces OUT wholesale: OUT must be no input, hold none, lie in none.
        inputs = {"the run": self.run_dir, "--eval-dir": self.eval_dir,
                  "--stats-from": self.stats_from}  # fmt: skip
        clash = overlapping(out, inputs, replaces=True)
        if clash is not None:
            raise InputError(
                f"{out}: the export folder overlaps {clash}; choose a folder outside it"
            )
        if not out.parent.is_dir():
            raise InputError(f"{out}: its parent folder does not exist")
        check_output(out, OWNER, replace=self.overwrite)
        run_checkpoint(self.run_dir, self.checkpoint)
