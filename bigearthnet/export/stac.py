"""``item.json``: the export as a STAC item with the Machine Learning Model extension (MLM
v1.5.2), built with ``pystac`` and the extension's ``stac-model`` package and validated
offline against the published schemas bundled in ``formats/stac_schemas/`` (see its README).

The item's footprint and time range are those of the training patches (from the shards'
corners and the acquisition dates in the patch names) when the training data is at hand,
else BigEarthNet's published coverage.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pystac
from stac_model.input import InputStructure, ModelInput
from stac_model.output import MLMClassification, ModelOutput, ModelResult
from stac_model.schema import MLModelExtension, MLModelProperties

from bigearthnet.core import constants
from bigearthnet.export.card import PixelFacts, reference_text
from bigearthnet.formats import exported
from bigearthnet.formats.archive_origin import UNKNOWN, ArchiveOrigin
from bigearthnet.formats.exported import ExportError, ExportInfo
from bigearthnet.formats.manifest import Manifest
from bigearthnet.formats.shards import describe_encoding, read_locations
from bigearthnet.formats.stac_validation import MLM_SCHEMA, validate_stac

# BigEarthNet's coverage (ten European countries) and acquisition period, for an export
# whose training data is gone.
BIGEARTHNET_BBOX = (-10.0, 36.9, 31.6, 70.1)
BIGEARTHNET_PERIOD = (dt.datetime(2017, 6, 1), dt.datetime(2018, 5, 31, 23, 59, 59))
ACQUIRED = re.compile(r"_(\d{8}T\d{6})_")
ARCHITECTURES = {"resnet50": "ResNet-50", "resnet18": "ResNet-18", "tiny": "small CNN (tests)"}
BAND_NAMES = {
    "B01": "coastal aerosol", "B02": "blue", "B03": "green", "B04": "red",
    "B05": "red edge 1", "B06": "red edge 2", "B07": "red edge 3", "B08": "near infrared",
    "B8A": "narrow near infrared", "B09": "water vapour", "B11": "short-wave infrared 1",
    "B12": "short-wave infrared 2",
}  # fmt: skip


@dataclass(frozen=True)
class Footprint:
    """Where and when the training patches were taken (lon/lat, UTC)."""

    bbox: tuple[float, float, float, float]
    start: dt.datetime
    end: dt.datetime
    measured: bool  # False: BigEarthNet's published coverage


def training_footprint(data_dir: Path, manifest: Manifest | None) -> Footprint:
    """The bounding box and time range of the train split's patches."""
    if manifest is None or not manifest.split_shards("train"):
        return Footprint(BIGEARTHNET_BBOX, *BIGEARTHNET_PERIOD, measured=False)
    from rasterio.warp import transform_bounds

    corners: dict[str, list[tuple[float, float]]] = defaultdict(list)
    stamps: list[str] = []
    for entry in manifest.split_shards("train"):
        where = read_locations(entry.path(data_dir))
        for crs, (x, y) in zip(where.crs, where.ulxy):
            corners[crs].append((float(x), float(y)))
        stamps += [m.group(1) for m in map(ACQUIRED.search, where.names) if m]
    boxes = []
    for crs, points in corners.items():
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        side = constants.PATCH_METRES
        boxes.append(
            transform_bounds(crs, "EPSG:4326", min(xs), min(ys) - side, max(xs) + side, max(ys))
        )
    bbox = (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )
    if not stamps:
        return Footprint(bbox, *BIGEARTHNET_PERIOD, measured=True)
    times = sorted(dt.datetime.strptime(s, "%Y%m%dT%H%M%S") for s in stamps)
    return Footprint(bbox, times[0], times[-1], measured=True)


def model_properties(info: ExportInfo, total_parameters: int) -> dict[str, Any]:
    """The item's ``mlm:`` fields, through stac-model's typed records."""
    channels = len(info.bands)
    s1 = any(band in constants.S1_BANDS for band in info.bands)
    model_input = ModelInput(
        name="Sentinel-1 GRD + Sentinel-2 L2A patches" if s1 else "Sentinel-2 L2A patches",
        bands=list(info.bands),
        input=InputStructure(
            shape=[-1, *info.input_shape[:2], channels],
            dim_order=["batch", "height", "width", "bands"],
            data_type="uint16",
        ),
        resize_type=None,
        pre_processing_function=None,
    )
    outputs = [
        ModelOutput(
            name="land-cover class probabilities",
            tasks={"classification"},
            result=ModelResult(
                shape=[-1, info.num_classes], dim_order=["batch", "class"], data_type="float32"
            ),
            classes=_classes(info.class_names),
            post_processing_function=None,
        )
    ]
    if info.pixel_class_names is not None:  # the dense head: a land-cover class per pixel
        outputs.append(
            ModelOutput(
                name="land-cover class probabilities per pixel",
                tasks={"semantic-segmentation"},
                result=ModelResult(
                    shape=[-1, *info.input_shape[:2], len(info.pixel_class_names)],
                    dim_order=["batch", "height", "width", "class"],
                    data_type="float32",
                ),
                classes=_classes(info.pixel_class_names),
                post_processing_function=None,
            )
        )
    properties = MLModelProperties(
        name=info.name,
        architecture=ARCHITECTURES.get(info.model, info.model),
        tasks=set().union(*(output.tasks for output in outputs)),
        framework="TensorFlow",
        framework_version=info.tensorflow,
        accelerator=None,
        accelerator_constrained=False,
        total_parameters=total_parameters,
        # From scratch, or the weights training started from (imported or another run's).
        pretrained=info.source.init_weights is not None,
        pretrained_source=info.source.init_weights,
        input=[model_input],
        output=outputs,
    )
    return properties.model_dump(by_alias=True, exclude_unset=False, exclude_defaults=False)


def _classes(names: tuple[str, ...]) -> list[MLMClassification]:
    colours = constants.class_hex_colours(len(names))
    return [
        MLMClassification(value=index, name=name, color_hint=colours[index])
        for index, name in enumerate(names)
    ]


def _bands(info: ExportInfo) -> list[dict[str, Any]]:
    """STAC 1.1 ``bands``: what the MLM input's band names refer to. Given on the model
    assets and the item alike: the STAC 1.1.0 item schema allows item bands only when an
    asset has bands, and MLM's band check reads the item's."""
    return [
        {
            "name": band,
            "description": _describe(band),
            "data_type": "uint16",
            "statistics": {"mean": mean, "stddev": std},
        }
        for band, mean, std in zip(info.bands, info.band_mean, info.band_std)
    ]


def _describe(band: str) -> str:
    if band in constants.S1_BANDS:
        return f"Sentinel-1 {band} backscatter, 10 m: {describe_encoding(band)}"
    return (
        f"Sentinel-2 {band} ({BAND_NAMES.get(band, band)}), "
        f"{constants.BAND_RESOLUTION_M.get(band, '?')} m"
    )


# The MLM extension's pattern of mlm:name (formats/stac_schemas/mlm-v1.5.2.json), also the id.
MODEL_NAME_PATTERN = r"[a-zA-Z][a-zA-Z0-9_.\-\s]+[a-zA-Z0-9]"


def build_item(
    info: ExportInfo,
    footprint: Footprint,
    *,
    total_parameters: int,
    origin: ArchiveOrigin | None = None,
    pixel: PixelFacts | None = None,
) -> pystac.Item:
    """The STAC item of an export (``origin``: of its training data, None: not known;
    ``pixel``: the dense head's figures in its evaluation, or why there are none)."""
    west, south, east, north = footprint.bbox
    geometry = {
        "type": "Polygon",
        "coordinates": [
            [[west, south], [east, south], [east, north], [west, north], [west, south]]
        ],
    }
    utc = dt.timezone.utc
    extent = "training patches" if footprint.measured else "dataset"
    bands = _bands(info)
    item = pystac.Item(
        id=info.name,
        geometry=geometry,
        bbox=list(footprint.bbox),
        datetime=None,
        start_datetime=footprint.start.replace(tzinfo=utc),
        end_datetime=footprint.end.replace(tzinfo=utc),
        properties={
            "description": f"{ARCHITECTURES.get(info.model, info.model)} multi-label land-cover "
            f"classifier of BigEarthNet Sentinel-2 patches, {info.num_classes} CORINE classes"
            f"{_dense_note(info)}; footprint and period of its {extent}." + _synthetic_note(origin),
            "bands": bands,
        },
    )
    _add_assets(item, info, bands)
    extension = MLModelExtension.ext(item, add_if_missing=True)
    extension.apply(model_properties(info, total_parameters))
    _add_unmodelled_fields(item.properties, info)
    if info.pixel_class_names is not None and pixel is not None:
        _add_pixel_metrics(item.properties["mlm:output"][1], pixel, origin)
    return item


def _add_pixel_metrics(output: dict[str, Any], pixel: PixelFacts, origin: ArchiveOrigin | None):
    """The dense head's figures on its output (``bigearthnet:pixel_metrics``: MLM has no
    field for metrics, and its output objects take others'), as the card shows them; or in
    its description, why there are none."""
    if not pixel.references:
        output["description"] += f" Not measured per pixel: {pixel.note}."
        return
    known = origin if origin is not None else ArchiveOrigin(UNKNOWN)
    output["bigearthnet:pixel_metrics"] = {
        "split": pixel.split,
        "references": [
            {
                "against": ref.against,
                "description": reference_text(ref.against, known, pixel.truth_maps),
                "pixels": ref.figures.count,
                "overall_accuracy": ref.figures.overall_accuracy,
                "miou": ref.figures.miou,
                "miou_classes": ref.figures.miou_classes,
                "classes": [
                    {
                        "value": row.index,
                        "name": row.name,
                        "pixels": row.support,
                        "predicted": row.predicted,
                        **row.ratios(),
                    }
                    for row in ref.rows
                ],  # fmt: skip
            }
            for ref in pixel.references
        ],
    }


def _dense_note(info: ExportInfo) -> str:
    if info.pixel_class_names is None:
        return ""
    return (
        f", with a dense head: the {len(info.pixel_class_names)} classes' probabilities per "
        "10 m pixel (semantic segmentation)"
    )


def _synthetic_note(origin: ArchiveOrigin | None) -> str:
    if origin is None or not origin.synthetic:
        return ""
    return (
        f" Trained on synthetic data ({origin.detail}), not on Sentinel-2 imagery: a "
        "demonstration of the pipeline, not for use on real imagery."
    )


def _add_unmodelled_fields(properties: dict[str, Any], info: ExportInfo) -> None:
    """MLM fields stac-model's records drop: descriptions and the explicit nulls the
    specification recommends where a value is known not to apply."""
    model_input, model_output = properties["mlm:input"][0], properties["mlm:output"][0]
    for output in properties["mlm:output"][1:]:  # the dense head's
        output["description"] = (
            "Semantic segmentation: the softmax probability of each class per pixel of the "
            "patch (10 m), from the dense head; the most probable class is the pixel's land cover."
        )
    model_input["description"] = (
        "Raw Sentinel-2 L2A values (surface reflectance x 10,000) as BigEarthNet stores them, "
        f"{info.resampling}-upsampled to 10 m, channels in the order of 'bands'. The model "
        "standardises each band itself (z-score with the training statistics given in the "
        "item's bands), so no value scaling applies before it."
    )
    model_input["value_scaling"] = None
    model_input["resize_type"] = None
    model_output["description"] = (
        "Multi-label: an independent sigmoid probability per class (a patch can hold several "
        f"classes); a class is present at probability >= {info.threshold}."
    )
    properties["mlm:accelerator"] = None  # runs on CPUs and GPUs alike


def _add_assets(item: pystac.Item, info: ExportInfo, bands: list[dict[str, Any]]) -> None:
    if "savedmodel" in info.formats:
        item.add_asset(
            "savedmodel",
            pystac.Asset(
                href=f"./{exported.SAVEDMODEL_DIR}",
                title="TensorFlow SavedModel (signature serving_default)",
                media_type="application/octet-stream; framework=tensorflow; profile=saved-model",
                roles=["mlm:model", "mlm:weights", "data"],
                extra_fields={"mlm:artifact_type": "tf.saved_model.save", "bands": bands},
            ),
        )
    if "onnx" in info.formats:
        item.add_asset(
            "onnx",
            pystac.Asset(
                href=f"./{exported.ONNX_FILE}",
                title=f"ONNX model (opset {info.onnx_opset}), the same signature",
                media_type="application/octet-stream; framework=onnx",
                roles=["mlm:model", "mlm:weights", "data"],
                extra_fields={
                    "mlm:artifact_type": "tf2onnx.convert.from_function",
                    "bands": bands,
                },
            ),
        )
    item.add_asset(
        "model_card",
        pystac.Asset(
            href=f"./{exported.CARD_FILE}",
            title="Model card",
            media_type="text/markdown",
            roles=["metadata", "documentation"],
        ),
    )
    item.add_asset(
        "export_record",
        pystac.Asset(
            href=f"./{exported.INFO_FILE}",
            title="Export record: bands, classes, normalisation, source run",
            media_type=pystac.MediaType.JSON,
            roles=["metadata"],
        ),
    )


def validate_item(body: dict[str, Any]) -> None:
    """ExportError unless ``body`` is a valid STAC item and a valid MLM item; no
    network: core schemas from pystac, the extension's from the bundled copies."""
    if MLM_SCHEMA not in body.get("stac_extensions", []):
        raise ExportError(f"the STAC item does not declare {MLM_SCHEMA}")
    try:
        validate_stac(body, "the STAC item", ExportError)
    except ExportError as err:
        detail = str(err).split(": ", 1)[-1]
        raise ExportError(
            f"the STAC item is not valid MLM v{exported.MLM_VERSION}: {detail}"
        ) from None
