"""What every input form of a scene declares (:class:`SceneForm`), and the JSON files one
command reads (:class:`JsonFiles`).

A form is a class: which paths it claims (:meth:`SceneForm.claims`, a question about the
path alone, asked once per scene by :func:`bigearthnet.maps.inputs.identify`), and, for a
scene identified as that form, every answer the commands need: the scene opened
(:meth:`SceneForm.open`: bands on their native grids, SCL, metadata, nodata), its tile and
date, whether it is Level-1C, the files it is read from (the ``--out`` overlap check) and its
digest (its identity in a map's tags). Nothing outside the form asks the path again.
"""

from __future__ import annotations

import datetime as dt
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from bigearthnet.core import constants
from bigearthnet.core.util import first_line, stat_digest
from bigearthnet.formats.s2_layouts import named_tile_and_date
from bigearthnet.maps.inputs.bands import SceneError, SceneSource

LEVEL_1C = "_MSIL1C_"  # in a Level-1C product's name


class MissingScene(SceneError):
    """A scene path that is not there: a scene map exits 2; a region skips it, naming it."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(f"{path}: no such scene (file or folder)")


class JsonFiles:
    """The JSON files one command reads, each parsed once: the N items of a saved search
    share one parse of its file, and the scene identified keeps its document. A file
    changed is read again by the next command, which has its own."""

    def __init__(self) -> None:
        self._parsed: dict[Path, Any] = {}

    def read(self, file: Path) -> Any:
        """The parsed file (callers only read it); SceneError naming it when it is
        unreadable or no JSON."""
        key = file.resolve()
        if key not in self._parsed:
            try:
                self._parsed[key] = json.loads(file.read_text(encoding="utf-8"))
            except OSError as err:
                raise SceneError(f"{file}: unreadable ({err.strerror})") from None
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise SceneError(f"{file}: not JSON ({first_line(err)}): truncated?") from None
        return self._parsed[key]


class SceneForm(ABC):
    """A scene identified as one input form. A subclass per form (in
    :data:`bigearthnet.maps.inputs.FORM_CLASSES`) declares what it claims and how it reads;
    what it does not override holds for every form: tile and date from a product name in
    the path, Level-1C by that name, the scene's own path as its one file, and a digest of
    its files' sizes and mtimes."""

    name: ClassVar[str]  # as messages and SceneSource.form name it: "SAFE", "STAC item"
    # A catch-all form takes what no specific form claims (any folder: band GeoTIFFs; any
    # file: a band stack); two specific forms claiming one path is an error.
    catch_all: ClassVar[bool] = False
    takes_band_order: ClassVar[bool] = False  # --band-order names its bands

    def __init__(self, ref: str | Path, json_files: JsonFiles | None = None) -> None:
        self.ref = str(ref)  # as given: a path, or FILE#ID
        self.path = Path(self.ref)
        self.json_files = json_files if json_files is not None else JsonFiles()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.ref!r})"

    @classmethod
    @abstractmethod
    def claims(cls, ref: str | Path) -> bool:
        """Whether ``ref`` (an existing path, or FILE#ID) is a scene of this form, from
        the path alone (its name, the files it holds), without reading the scene."""

    def open(
        self,
        bands: tuple[str, ...] = constants.BANDS,
        *,
        mask_clouds: bool = False,
        band_order: Sequence[str] | None = None,
    ) -> SceneSource:
        """The scene open for reading; SceneError naming what is missing or unreadable."""
        if band_order and not self.takes_band_order:
            raise SceneError(f"{self.ref}: --band-order applies to a multi-band GeoTIFF")
        return self._open(bands, mask_clouds, band_order)

    @abstractmethod
    def _open(
        self, bands: tuple[str, ...], mask_clouds: bool, band_order: Sequence[str] | None
    ) -> SceneSource: ...

    def tile_and_date(self) -> tuple[str, dt.date] | None:
        """The MGRS tile and acquisition date (UTC) the scene states; None when it states
        none (here: a standard product name in its path)."""
        return named_tile_and_date(self.ref)

    def is_level_1c(self) -> bool:
        """A Level-1C product (top-of-atmosphere reflectance), as this form tells one
        (here: by its product name; band GeoTIFFs say nothing else and are taken as L2A)."""
        return LEVEL_1C in self.path.name

    def require_l2a(self) -> None:
        """SceneError for a Level-1C product: the models learned from L2A's surface
        reflectance."""
        if self.is_level_1c():
            raise SceneError(
                f"{self.ref}: a Level-1C product (top-of-atmosphere reflectance); maps take "
                "L2A (surface reflectance: the L2A product of the same scene, or Sen2Cor's "
                "output)"
            )

    def files(self) -> dict[str, Path]:
        """Every local file the scene is read from, named for a message (the ``--out``
        overlap check): here the scene's own path (a product folder, a stack)."""
        return {f"SCENE {self.ref}": self.path}

    def digest(self) -> str:
        """What the scene's files are, without reading them (sizes, mtimes): a scene map
        made from other files is remade."""
        try:
            return stat_digest(self.path)
        except OSError as err:
            raise SceneError(f"{self.ref}: unreadable ({err.strerror})") from None
