"""STAC documents checked offline: the published extension schemas this project writes are
bundled in ``stac_schemas/`` (compute nodes often have no internet access; see its README),
the STAC core schemas come with pystac. The one home of that validation, for the model
export's item (MLM) and the region series' collection and items alike."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pystac
from pystac.validation import JsonSchemaSTACValidator, validate_dict

from bigearthnet.core.errors import InputError
from bigearthnet.formats.exported import MLM_VERSION

MLM_SCHEMA = f"https://stac-extensions.github.io/mlm/v{MLM_VERSION}/schema.json"
CLASSIFICATION_SCHEMA = "https://stac-extensions.github.io/classification/v1.1.0/schema.json"
PROJECTION_SCHEMA = "https://stac-extensions.github.io/projection/v2.0.0/schema.json"
# Published URL -> bundled copy; the MLM schema refers to classification, processing and
# raster (processing's file still names itself v1.0.0, so it answers to both).
BUNDLED_SCHEMAS = {
    MLM_SCHEMA: f"mlm-v{MLM_VERSION}.json",
    CLASSIFICATION_SCHEMA: "classification-v1.1.0.json",
    "https://stac-extensions.github.io/processing/v1.1.0/schema.json": "processing-v1.1.0.json",
    "https://stac-extensions.github.io/processing/v1.0.0/schema.json": "processing-v1.1.0.json",
    "https://stac-extensions.github.io/raster/v1.1.0/schema.json": "raster-v1.1.0.json",
    PROJECTION_SCHEMA: "projection-v2.0.0.json",
}


def bundled_schemas() -> dict[str, dict[str, Any]]:
    folder = resources.files("bigearthnet.formats") / "stac_schemas"
    return {url: json.loads((folder / name).read_text()) for url, name in BUNDLED_SCHEMAS.items()}


def validate_stac(body: dict[str, Any], what: str, error: type[InputError] = InputError) -> None:
    """``error`` unless ``body`` (an item or a collection) is valid STAC with every
    extension it declares; no network."""
    unknown = [url for url in body.get("stac_extensions", []) if url not in BUNDLED_SCHEMAS]
    if unknown:
        raise error(f"{what}: declares extensions with no bundled schema: {', '.join(unknown)}")
    validator = JsonSchemaSTACValidator()
    validator.schema_cache.update(bundled_schemas())
    try:
        validate_dict(body, validator=validator)
    except pystac.STACValidationError as err:
        detail = _leaf(err.source) if err.source is not None else str(err)
        raise error(f"{what} is not valid STAC: {detail}") from None


def _leaf(source: Any) -> str:
    """The innermost schema complaint, with where it is: a oneOf failure lists every branch,
    and the branch of another document type ("'Collection' was expected") says nothing."""
    errors = source if isinstance(source, list) else [source]
    leaves = []
    while errors:
        current = errors.pop()
        context = getattr(current, "context", None)
        if context:
            errors.extend(context)
        elif hasattr(current, "message"):
            leaves.append(current)
    useful = [e for e in leaves if "was expected" not in e.message] or leaves
    if not useful:
        return str(source)[:300]
    first = useful[0]
    where = ".".join(str(p) for p in first.absolute_path)
    return f"{where}: {first.message}"[:300]
