"""``bigearthnet-weights import``: a published ResNet state dict -> an imported weights
folder (:mod:`bigearthnet.formats.weights_record`) the registry's models load.

Reading, layout, channels, normalisation, head: each step refuses what does not fit in one
line naming the file, and every adaptation is kept in the record and printed. The folder is
written beside ``out`` and renamed into place when complete
(:func:`bigearthnet.core.folders.publishing`); ``--overwrite`` replaces only a folder this
command made.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bigearthnet.core import constants
from bigearthnet.core.declare import check_fields, option, reuse
from bigearthnet.core.errors import InputError
from bigearthnet.core.folders import (
    Owner,
    Replacing,
    check_output,
    folder_path,
    publishing,
    require_outside_cwd,
)
from bigearthnet.core.util import first_line, overlapping, sha256_file
from bigearthnet.formats import weights_record
from bigearthnet.formats.weights_record import WeightsRecord
from bigearthnet.models import PATCH_HEAD
from bigearthnet.weights import convert
from bigearthnet.weights.sources import (
    SOURCES,
    SourceFacts,
    published_stats,
    source_facts,
    source_of_keys,
)
from bigearthnet.weights.state_dict import StateDict, read_state_dict


@dataclass(frozen=True)
class WeightsOptions:
    """What ``bigearthnet-weights import`` and ``run`` take: declared once, the commands'
    options are generated from it (``run`` has no ``--head``: a run needs one)."""

    src: Path = option(
        help="the state dict: .safetensors (no PyTorch needed) or .pth/.pt/.ckpt (needs "
        "PyTorch); a wrapper's key prefix (model.vision_encoder., module.) is taken off",
        positional=True,
        metavar="SRC",
    )
    out: Path = option(help="the folder to write", metavar="DIR", parse=folder_path,
                       check=require_outside_cwd)  # fmt: skip
    source: str = option(
        "timm", "who published it: sets the channels, normalisation and head order", choices=SOURCES
    )
    bands: str | None = option(
        None,
        "the band configuration to serve (default: the source's own); channels the source "
        "lacks get the mean filter, channels it has more are dropped",
        choices=tuple(sorted(constants.BAND_CONFIGS)),
    )
    head: bool = option(
        True,
        "keep a classifier head; --no-head imports the backbone alone (needed for a head of "
        "another class count than 19 or 43, e.g. ImageNet's 1000)",
    )
    overwrite: bool = reuse(Replacing, "overwrite", deprecated=("--force",))

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class Converted:
    """A state dict turned into Keras layer weights, with its record."""

    record: WeightsRecord
    layout: convert.Layout
    layers: dict[str, list[np.ndarray]]  # Keras layer name -> weights, the head included


def convert_file(opts: WeightsOptions) -> Converted:
    """Read ``opts.src`` and convert it for ``opts.bands`` (default: the source's own
    channels where they are one); without ``opts.head`` a classifier is dropped."""
    src, source = opts.src, opts.source
    file = str(src)
    state = read_state_dict(src)
    layout = convert.layout_of(state.tensors, file)
    named = source_of_keys(state.prefix, layout.in_channels)
    if named is not None and named != source:
        raise InputError(
            f"{file}: laid out as {named} weights (keys under {state.prefix!r}, "
            f"{layout.in_channels} channels), not {source}'s: import it with --source {named}"
        )
    facts = source_facts(source, layout.in_channels, file)
    target = _target_bands(facts, opts.bands, file)
    stem, notes = convert.adapt_stem(state.tensors["conv1.weight"], facts.channels, target)
    notes = _prefix_notes(state) + notes
    layers = convert.keras_weights(state.tensors, layout, stem, file)
    classes = _head_classes(layout, facts, opts.head, file, notes)
    if classes:
        layers[PATCH_HEAD] = convert.head_rows(state.tensors, facts.head_order, classes)
        if facts.head_order is not None and facts.head_order != classes:
            notes.append(
                "reordered the head's rows from the source's class order to the official one"
            )
    mean, std, norm_notes = _normalisation(facts, target)
    record = WeightsRecord(
        source=source,
        file=file,
        sha256=sha256_file(src),
        model=layout.model,
        stem_width=layout.stem_width,
        widths=layout.widths,
        bands=target,
        mean=mean,
        std=std,
        resampling=facts.resampling,
        classes=classes,
        adaptations=tuple(notes + norm_notes),
        normalisation=facts.normalisation,
    )
    return Converted(record, layout, layers)


# An imported weights folder: its mark, or (made before marks) weights.json and weights.h5.
OWNER = Owner(
    "bigearthnet-weights import", ".bigearthnet-weights", option="--out",
    signature=weights_record.RECORD_FILE, names=frozenset({weights_record.WEIGHTS_FILE}),
)  # fmt: skip


def import_weights(opts: WeightsOptions) -> WeightsRecord:
    """Convert ``opts.src`` and write the weights folder ``opts.out``; returns its record."""
    check_out(opts.src, opts.out, opts.overwrite, OWNER)
    converted = convert_file(opts)
    with publishing(Path(opts.out), OWNER, replace=opts.overwrite) as folder:
        keras_model(converted).save_weights(str(folder / weights_record.WEIGHTS_FILE))
        weights_record.write(folder, converted.record)
    return converted.record


def check_out(src: str | Path, out: str | Path, overwrite: bool, owner: Owner) -> None:
    """InputError when writing ``out`` could overwrite ``src`` or a folder ``owner`` did not
    make, or replace one of its own without ``overwrite``."""
    clash = overlapping(out, {"SRC": src}, replaces=overwrite)
    if clash:
        raise InputError(f"--out {out} would overwrite {clash}")
    check_output(Path(out), owner, replace=overwrite)


def keras_model(converted: Converted):  # -> tf.keras.Model (TensorFlow imported here only)
    """The converted network as a Keras model with its weights set (no head without one)."""
    record, layout = converted.record, converted.layout
    model = _float32_resnet(record, layout.blocks, layout.bottleneck, layout.stem_width,
                            layout.widths)  # fmt: skip
    for name, weights in converted.layers.items():
        layer = model.get_layer(name)
        expected = [tuple(w.shape) for w in layer.get_weights()]
        if expected != [w.shape for w in weights]:
            raise InputError(
                f"{record.file}: {name} has shapes {[w.shape for w in weights]}, "
                f"the model's are {expected}"
            )
        layer.set_weights(weights)
    return model


def _float32_resnet(record: WeightsRecord, blocks: tuple[int, ...], bottleneck: bool,
                    stem_width: int, widths: tuple[int, ...]):  # fmt: skip
    """The ResNet ``record`` describes (its bands, classes, head) of this layout, built in
    float32 whatever mixed-precision policy the process has set."""
    from bigearthnet.models.precision import precision_policy
    from bigearthnet.models.resnet import build_resnet

    with precision_policy("float32"):
        return build_resnet(
            blocks,
            bottleneck,
            input_shape=(constants.PATCH_SIZE, constants.PATCH_SIZE, len(record.bands)),
            num_classes=max(record.num_classes, 1),
            name=record.model,
            stem_width=stem_width,
            widths=widths,
            head=record.has_head,
        )


def load_folder(folder: str | Path, record: WeightsRecord | None = None):  # -> tf.keras.Model
    """An imported weights folder as the network its record (``record``: already read)
    describes, every layer loaded: InputError naming ``weights.h5`` when it is damaged or
    holds another network."""
    record = record or weights_record.read(folder)
    blocks, bottleneck = convert.blocks_of(record.model, folder)
    model = _float32_resnet(record, blocks, bottleneck, record.stem_width, record.widths)
    path = Path(folder) / weights_record.WEIGHTS_FILE
    try:
        model.load_weights(str(path))  # by topology: every layer, every shape, or an error
    except (OSError, ValueError) as err:
        raise InputError(
            f"{path}: unreadable, or not the {record.model} its {weights_record.RECORD_FILE} "
            f"describes ({first_line(err)})"
        ) from None
    return model


def check_registry_fit(record: WeightsRecord, where: str | Path) -> None:
    """InputError unless the weights fit the registry's model of their name (a narrow
    network of the same layout imports, but only its own builder takes it)."""
    from bigearthnet.models.resnet import STAGE_WIDTHS, STEM_WIDTH

    if (record.stem_width, record.widths) != (STEM_WIDTH, STAGE_WIDTHS):
        raise InputError(
            f"{where}: a {record.model} of stem {record.stem_width} and widths "
            f"{list(record.widths)}; the registry's {record.model} has {STEM_WIDTH} and "
            f"{list(STAGE_WIDTHS)}"
        )


def _target_bands(facts: SourceFacts, bands: str | None, file: str) -> tuple[str, ...]:
    if bands is None:
        if constants.band_config_name(facts.channels) is not None:
            return facts.channels
        return constants.BAND_CONFIGS[constants.DEFAULT_BAND_CONFIG]
    if bands not in constants.BAND_CONFIGS:
        raise InputError(f"--bands {bands!r}: expected one of {', '.join(constants.BAND_CONFIGS)}")
    target = constants.BAND_CONFIGS[bands]
    if not set(target) & set(facts.channels):
        raise InputError(
            f"{file}: weights of {','.join(facts.channels)} cannot serve --bands {bands} "
            f"({','.join(target)}): no channel in common"
        )
    return target


def _head_classes(
    layout: convert.Layout, facts: SourceFacts, head: bool, file: str, notes: list[str]
) -> tuple[str, ...]:
    outputs = layout.head_outputs
    if layout.other_head:
        notes.append(
            f"dropped the head {', '.join(layout.other_head)}: layers the registry's models, "
            "which end in one linear layer, do not have"
        )
    if outputs is None or not head:
        if outputs is not None:
            notes.append(f"dropped the head of {outputs} outputs (--no-head)")
        return ()
    if outputs not in constants.CLASS_SETS:
        raise InputError(
            f"{file}: a head of {outputs} classes, not 19 or 43; `bigearthnet-weights import "
            "--no-head` imports the backbone alone, to fine-tune with train.py --init-weights"
        )
    if facts.head_order is not None and len(facts.head_order) != outputs:
        raise InputError(
            f"{file}: a head of {outputs} classes; the source's has {len(facts.head_order)}"
        )
    return constants.CLASS_SETS[outputs]


def _normalisation(
    facts: SourceFacts, target: tuple[str, ...]
) -> tuple[tuple[float, ...], tuple[float, ...], list[str]]:
    missing = tuple(b for b in target if b not in facts.mean)
    mean, std = dict(facts.mean), dict(facts.std)
    notes = []
    if missing:
        fill_mean, fill_std = published_stats(missing)
        mean.update(fill_mean)
        std.update(fill_std)
        notes.append(f"normalised {', '.join(missing)} with the published BigEarthNet statistics")
    return tuple(mean[b] for b in target), tuple(std[b] for b in target), notes


def _prefix_notes(state: StateDict) -> list[str]:
    notes = []
    if state.prefix:
        notes.append(f"took the key prefix {state.prefix!r} off")
    if state.dropped:
        notes.append(f"ignored {len(state.dropped)} tensors outside it (e.g. {state.dropped[0]})")
    return notes
