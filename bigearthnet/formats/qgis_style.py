"""A QGIS layer style (``.qml``) for a categorical raster, the one writer and reader: the
paletted ("unique values") renderer of band 1, each value's colour and label.

QGIS loads ``<folder>/<name>.qml`` as the default style of ``<folder>/<name>.tif`` (its
complete base name: ``MAP.qml`` for ``MAP.tif``), so a class map opened there shows its
classes in their colours and names in the legend without the ``.aux.xml`` sidecar. Values
the style does not list, nodata among them, are drawn transparent. The document is written
for QGIS 3.28 (LTR): QGIS upgrades a style of an older version, and reads
``<qgis><pipe><rasterrenderer type="paletted" band="1"><colorPalette><paletteEntry value=
color= alpha= label=/>`` unchanged since 3.0.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core.constants import hex_colour
from bigearthnet.core.util import atomic_write_text

SUFFIX = ".qml"
VERSION = "3.28.0-Firenze"  # the QGIS version the style is written for
DOCTYPE = "<!DOCTYPE qgis PUBLIC 'http://mrcc.com/qgis.dtd' 'SYSTEM'>"


@dataclass(frozen=True)
class StyleEntry:
    """One value of the raster: its colour (0..255 red, green, blue) and its label."""

    value: int
    colour: tuple[int, int, int]
    label: str

    @property
    def hex(self) -> str:
        return f"#{hex_colour(self.colour)}"


def style_path(raster: Path | str) -> Path:
    """Where QGIS looks for the default style of ``raster``."""
    return Path(raster).with_suffix(SUFFIX)


def write_style(raster: Path | str, entries: Sequence[StyleEntry]) -> Path:
    """Write the style of ``raster`` (atomically, beside it); returns its path."""
    root = ET.Element("qgis", version=VERSION, styleCategories="Symbology")
    pipe = ET.SubElement(root, "pipe")
    renderer = ET.SubElement(pipe, "rasterrenderer", type="paletted", band="1", opacity="1",
                             alphaBand="-1", nodataColor="")  # fmt: skip
    ET.SubElement(renderer, "rasterTransparency")
    palette = ET.SubElement(renderer, "colorPalette")
    for entry in entries:
        ET.SubElement(palette, "paletteEntry", value=str(entry.value), color=entry.hex,
                      alpha="255", label=entry.label)  # fmt: skip
    ET.SubElement(root, "blendMode").text = "0"
    ET.indent(root)
    path = style_path(raster)
    atomic_write_text(path, f"{DOCTYPE}\n{ET.tostring(root, encoding='unicode')}\n")
    return path


def read_style(path: Path | str) -> list[StyleEntry]:
    """The entries of a style written by :func:`write_style` (or by QGIS: a paletted renderer
    of band 1); ValueError naming ``path`` for anything else."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as err:
        raise ValueError(f"{path}: not a QGIS style ({err})") from None
    renderer = root.find("pipe/rasterrenderer[@type='paletted']")
    if root.tag != "qgis" or renderer is None or renderer.get("band") != "1":
        raise ValueError(f"{path}: not a QGIS style of band 1 in unique values (paletted)")
    entries = []
    for element in renderer.iterfind("colorPalette/paletteEntry"):
        colour = element.get("color", "")
        try:
            rgb = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
            entries.append(StyleEntry(int(element.get("value", "")), rgb,  # type: ignore[arg-type]
                                      element.get("label", "")))  # fmt: skip
        except ValueError:
            raise ValueError(f"{path}: a palette entry of value {element.get('value')!r} and "
                             f"colour {colour!r}") from None  # fmt: skip
    return entries
