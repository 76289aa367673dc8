"""What each publisher's ResNet weights take and give: the channels of the first convolution
by their count, the normalisation the weights were trained with (physical units:
reflectance x 10^4, dB), how the source's data was resampled, and the head's class order.

* ``reben``: the BigEarthNet v2.0 release (ConfigILM, timm ``resnet50``). Channels in
  reBEN v0.2.0's order, which is this project's ``s1``, ``s2-10`` and ``all``; the head's 19
  classes sorted alphabetically (ConfigILM's ``NEW_LABELS``); the v2 statistics of ConfigILM's
  ``120_bilinear`` table.
* ``ssl4eo``: SSL4EO-S12 (torchgeo's ``ResNet50_Weights.SENTINEL2_ALL_*``/``SENTINEL1_ALL_*``):
  13 Sentinel-2 L1C bands B01..B12 with B10, divided by 10,000; or VV, VH standardised in dB.
  No classifier head.
* ``timm``/``torchvision``: 3 channels are ImageNet RGB (B04, B03, B02 here, ImageNet's
  mean and std with reflectance 1.0 as 255); a channel count of one of this project's band
  configurations is that configuration in this project's order, normalised with the
  published BigEarthNet statistics; a head of 19 or 43 classes is in the official order.
"""

from __future__ import annotations

from dataclasses import dataclass

from bigearthnet.core import constants
from bigearthnet.core.errors import InputError

SOURCES: tuple[str, ...] = ("reben", "ssl4eo", "timm", "torchvision")
TORCH_BN_EPSILON = 1e-5  # timm's and torchvision's BatchNorm2d default

RGB_BANDS: tuple[str, ...] = ("B04", "B03", "B02")

# ConfigILM BENv2_utils means/stds["120_bilinear"] (the statistics of reBEN's training data).
REBEN_MEAN: dict[str, float] = {
    "B01": 360.64679, "B02": 438.37207, "B03": 614.05566, "B04": 588.40961,
    "B05": 942.74768, "B06": 1769.84863, "B07": 2049.47583, "B08": 2193.29199,
    "B8A": 2235.48682, "B09": 2241.10596, "B11": 1568.21155, "B12": 997.71509,
    "VV": -12.64386, "VH": -19.35256,
}  # fmt: skip
REBEN_STD: dict[str, float] = {
    "B01": 563.17340, "B02": 607.02686, "B03": 603.29681, "B04": 684.56885,
    "B05": 727.57843, "B06": 1087.42883, "B07": 1261.43030, "B08": 1369.37170,
    "B8A": 1342.49048, "B09": 1294.35547, "B11": 1063.91980, "B12": 806.88464,
    "VV": 5.13349, "VH": 5.59051,
}  # fmt: skip
SSL4EO_S1_MEAN = {"VV": -12.59, "VH": -20.26}  # torchgeo's SSL4EO-S12 S1 transforms (dB)
SSL4EO_S1_STD = {"VV": 5.26, "VH": 5.91}
IMAGENET_MEAN = dict(zip(RGB_BANDS, (0.485, 0.456, 0.406)))
IMAGENET_STD = dict(zip(RGB_BANDS, (0.229, 0.224, 0.225)))


@dataclass(frozen=True)
class SourceFacts:
    """What weights of one source with a given stem take."""

    channels: tuple[str, ...]  # the stem's input channels, in order
    mean: dict[str, float]  # per channel, physical units
    std: dict[str, float]
    resampling: str
    normalisation: str  # in words, for the record and the card
    head_order: tuple[str, ...] | None  # class names of the head's rows; None: official order


def source_facts(source: str, in_channels: int, file: str) -> SourceFacts:
    """The facts of ``source`` weights whose first convolution takes ``in_channels``."""
    if source not in SOURCES:
        raise InputError(f"{file}: unknown source {source!r}; expected one of {', '.join(SOURCES)}")
    if source == "reben":
        options = {len(c): c for c in (constants.S1_BANDS, constants.S2_10_BANDS,
                                       constants.BAND_CONFIGS["all"])}  # fmt: skip
        channels = _channels_of(options, in_channels, file, source)
        return SourceFacts(channels, REBEN_MEAN, REBEN_STD, "bilinear",
                           "reBEN v2 statistics (ConfigILM 120_bilinear)",
                           tuple(sorted(constants.CLASSES_19)))  # fmt: skip
    if source == "ssl4eo":
        channels = _channels_of(
            {13: constants.L1C_BANDS, 2: constants.S1_BANDS}, in_channels, file, source
        )
        if channels == constants.S1_BANDS:
            return SourceFacts(channels, SSL4EO_S1_MEAN, SSL4EO_S1_STD, "bilinear",
                               "SSL4EO-S12 S1 statistics in dB", None)  # fmt: skip
        return SourceFacts(channels, dict.fromkeys(channels, 0.0),
                           dict.fromkeys(channels, 10000.0), "bilinear",
                           "SSL4EO-S12: reflectance / 10,000", None)  # fmt: skip
    options = {3: RGB_BANDS}
    for config in constants.BAND_CONFIGS.values():  # 12 channels: s2 before all
        options.setdefault(len(config), config)
    channels = _channels_of(options, in_channels, file, source)
    if channels == RGB_BANDS:
        return SourceFacts(channels, {b: 10000 * v for b, v in IMAGENET_MEAN.items()},
                           {b: 10000 * v for b, v in IMAGENET_STD.items()}, "bilinear",
                           "ImageNet mean/std, reflectance 1.0 as 255", None)  # fmt: skip
    mean, std = published_stats(channels)
    return SourceFacts(channels, mean, std, "bilinear",
                       "published BigEarthNet statistics", None)  # fmt: skip


def source_of_keys(prefix: str, in_channels: int) -> str | None:
    """The source whose checkpoints alone are laid out this way (the key prefix in front of
    the ResNet, the stem's channels), or None when the layout names none: ConfigILM wraps
    reBEN's encoder as ``model.vision_encoder.``; SSL4EO-S12's MoCo checkpoints keep the
    query encoder ``encoder_q`` of a 13-band (L1C) or 2-band (S1) stem."""
    if prefix.startswith("model.vision_encoder."):
        return "reben"
    if "encoder_q" in prefix.split(".") and in_channels in (len(constants.L1C_BANDS), 2):
        return "ssl4eo"
    return None


def published_stats(bands: tuple[str, ...]) -> tuple[dict[str, float], dict[str, float]]:
    """The project's published per-band statistics in physical units (S1 in dB): what a
    channel that the source does not have is normalised with."""
    mean = {**constants.FALLBACK_BAND_MEAN, **constants.FALLBACK_S1_DB_MEAN}
    std = {**constants.FALLBACK_BAND_STD, **constants.FALLBACK_S1_DB_STD}
    return {b: mean[b] for b in bands}, {b: std[b] for b in bands}


def _channels_of(
    options: dict[int, tuple[str, ...]], count: int, file: str, source: str
) -> tuple[str, ...]:
    if count not in options:
        known = ", ".join(str(n) for n in sorted(options))
        raise InputError(
            f"{file}: the first convolution takes {count} channels; {source} weights take {known}"
        )
    return options[count]
