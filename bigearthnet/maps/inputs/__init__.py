"""A scene, whatever form it was downloaded in: :func:`identify` decides its form once, and
the :class:`~.form.SceneForm` it returns carries every answer the commands need (the scene
opened, tile and date, Level-1C, its files, its digest).

The forms, a class each (:data:`FORM_CLASSES`): SAFE product folders, band GeoTIFF folders
and band stacks (:mod:`.files`), EOPF Zarr products (:mod:`.zarr_product`), STAC items with
COG assets (:mod:`.stac_item`). Each opens to a :class:`~.bands.SceneSource`: the bands on
their native grids, SCL, and what the metadata say of the values, from which
:mod:`bigearthnet.maps.radiometry` decides the offset.

To add an input form: a :class:`~.form.SceneForm` subclass in a module of its own (``name``,
``claims``, ``_open``, and what it states beyond a product name: ``tile_and_date``,
``is_level_1c``, ``files``, ``digest``), its entry in :data:`FORM_CLASSES`, and its test
writer in :data:`bigearthnet.synthetic.scene_forms.FORM_WRITERS`.
"""

from __future__ import annotations

from pathlib import Path

from bigearthnet.maps.inputs.bands import SceneError, SceneSource
from bigearthnet.maps.inputs.files import BandGeoTiffs, BandStack, SafeProduct
from bigearthnet.maps.inputs.form import JsonFiles, MissingScene, SceneForm
from bigearthnet.maps.inputs.refs import split_ref
from bigearthnet.maps.inputs.stac_item import StacItem, items_in
from bigearthnet.maps.inputs.zarr_product import ZarrProduct

FORM_CLASSES: tuple[type[SceneForm], ...] = (
    SafeProduct,
    ZarrProduct,
    StacItem,
    BandGeoTiffs,  # catch-all: any other folder
    BandStack,  # catch-all: any other file
)
FORMS = tuple(form.name for form in FORM_CLASSES)


def identify(scene: str | Path, *, json_files: JsonFiles | None = None) -> SceneForm:
    """``scene`` (a path, or FILE#ID) as the one form that claims it: the specific forms
    are asked first, and a catch-all form takes what none of them claims. MissingScene for
    a path that is not there; SceneError naming the path and the forms tried when none
    claims it, or when two do. ``json_files``: the JSON files read by the command so far
    (scenes identified together parse a shared file once)."""
    local, _ = split_ref(scene)
    if not local.exists():
        raise MissingScene(local)
    for catch_all in (False, True):
        claimed = [f for f in FORM_CLASSES if f.catch_all is catch_all and f.claims(scene)]
        if len(claimed) == 1:
            return claimed[0](scene, json_files)
        if claimed:
            raise SceneError(
                f"{scene}: claimed by {' and '.join(f.name for f in claimed)} alike; "
                "give the product itself"
            )
    raise SceneError(f"{scene}: no input form claims it (tried {', '.join(FORMS)})")


__all__ = ["FORMS", "FORM_CLASSES", "JsonFiles", "MissingScene", "SceneError", "SceneForm",
           "SceneSource", "identify", "items_in"]  # fmt: skip
