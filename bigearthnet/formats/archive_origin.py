"""``ARCHIVE/SYNTHETIC.json``: the mark of an archive ``bigearthnet-synth`` wrote, so that
nothing trained on it passes for a model of Sentinel-2 imagery.

:func:`write_synthetic_mark` is its one writer (the generator, inside the archive it builds)
and :func:`read_origin` its one reader (preprocessing, which carries the origin into the
shards' ``manifest.json``: :attr:`bigearthnet.formats.manifest.Manifest.origin`; the run page
and the model card read it there). A real BigEarthNet archive has no such file: an archive
without it is ``real``. Manifests written before origins were recorded read as ``unknown``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core.errors import InputError
from bigearthnet.core.util import atomic_write_json, first_line

MARK = "SYNTHETIC.json"
SYNTHETIC, REAL, UNKNOWN = "synthetic", "real", "unknown"
ORIGINS = (SYNTHETIC, REAL, UNKNOWN)
MADE_BY = "bigearthnet-synth"


@dataclass(frozen=True)
class ArchiveOrigin:
    """Where an archive came from: ``kind`` one of :data:`ORIGINS`, and in words how it was
    made ("" for a real one)."""

    kind: str
    detail: str = ""

    @property
    def synthetic(self) -> bool:
        return self.kind == SYNTHETIC


def write_synthetic_mark(
    root: Path, *, layout: str, difficulty: str, seed: int, patches: int
) -> None:
    """Mark ``root`` as a synthetic archive made with these settings."""
    body = {"made_by": MADE_BY, "origin": SYNTHETIC, "layout": layout,
            "difficulty": difficulty, "seed": seed, "patches": patches}  # fmt: skip
    atomic_write_json(Path(root) / MARK, body)


def read_origin(root: Path) -> ArchiveOrigin:
    """The origin of the archive at ``root``: synthetic (with its settings) where the mark
    is, real where it is not; InputError naming the mark when it cannot be read (a mark cut
    short still says the archive is synthetic, but not how it was made)."""
    path = Path(root) / MARK
    if not path.is_file():
        return ArchiveOrigin(REAL)
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        detail = (
            f"{body['made_by']}: {body['patches']:,} {body['difficulty']} {body['layout']} "
            f"patches, seed {body['seed']}"
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InputError(
            f"{path}: unreadable mark of a synthetic archive ({first_line(err)}); "
            "generate the archive again"
        ) from None
    return ArchiveOrigin(SYNTHETIC, detail)
