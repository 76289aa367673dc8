"""The QGIS style of a map of categories: what QGIS reads back (value, colour, label), the
name QGIS looks for, and a file that is not such a style named in one line."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bigearthnet.core import constants
from bigearthnet.formats.class_map import class_categories
from bigearthnet.formats.qgis_style import StyleEntry, read_style, style_path, write_style


def test_a_style_reads_back_as_qgis_reads_it(tmp_path: Path) -> None:
    entries = [*class_categories(constants.CLASSES_19),
               StyleEntry(1203, (120, 0, 0), "Pastures & <wetlands> -> Forêts")]  # fmt: skip
    path = write_style(tmp_path / "MAP.tif", entries)
    assert path == tmp_path / "MAP.qml" == style_path(tmp_path / "MAP.tif")  # QGIS's name
    assert read_style(path) == entries
    assert path.read_text().startswith("<!DOCTYPE qgis")
    renderer = ET.parse(path).getroot().find("pipe/rasterrenderer")
    assert renderer is not None and renderer.attrib["type"] == "paletted"
    first = renderer.find("colorPalette/paletteEntry")
    assert first is not None and first.attrib == {
        "value": "0", "color": "#e6004d", "alpha": "255", "label": "Urban fabric"
    }  # fmt: skip


@pytest.mark.parametrize(
    "text",
    [
        "<qgis><pipe/></qgis>",
        "<qgis",
        '<qgis><pipe><rasterrenderer type="singlebandgray" band="1"/></pipe></qgis>',
    ],  # fmt: skip
)
def test_anything_else_is_named(tmp_path: Path, text: str) -> None:
    path = tmp_path / "other.qml"
    path.write_text(text)
    with pytest.raises(ValueError, match=str(path)):
        read_style(path)
