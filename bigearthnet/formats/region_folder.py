"""The folder of a region series (``bigearthnet-map region --out DIR``), in one place: its
layout, who owns it, where a scene's map goes, and how a rebuild replaces the products.

::

    DIR/.bigearthnet-region     the mark of a folder this command made (written first)
    DIR/scenes/                 one map per scene (a cache: reused when made alike)
    DIR/periods/ consistent/ stac/ changes.tif first_change.tif areas.csv transitions.csv
    DIR/consistency.json        written last: its presence says the products are complete
    DIR/region.html             the page

The products are built in a hidden staging folder and swapped in once complete, so a
rebuild with other options leaves no product of the earlier one beside the new ones, and
``consistency.json`` is only taken away once its replacement is ready.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
from pathlib import Path

from bigearthnet.core.errors import InputError
from bigearthnet.core.util import atomic_write_json

MARK = ".bigearthnet-region"
MARK_TEXT = '{"made_by": "bigearthnet-map region", "layout": 1}\n'
SCENES = "scenes"
PERIODS = "periods"
CONSISTENT = "consistent"
STAC = "stac"
CONSISTENCY = "consistency.json"
PAGE = "region.html"
# Everything a products build writes, consistency.json aside (it is written last).
PRODUCTS = (
    PERIODS,
    CONSISTENT,
    STAC,
    "changes.tif",
    "first_change.tif",
    "areas.csv",
    "transitions.csv",
)
STAGING_PREFIX = ".products-"


class RegionFolderError(InputError):
    """``--out`` is not a region folder this command may write."""


def claim(out: Path) -> None:
    """Make ``out`` a region folder, or check that it is one: absent, empty, or marked by an
    earlier run of this command. Anything else (a file, an unrelated folder) is refused,
    naming it, before anything is written: a region run replaces its products wholesale.
    Safe when ranks or Slurm array tasks claim one folder at once: a new folder appears
    with its mark inside (a rename), an empty one gets the mark by exclusive creation."""
    if out.exists() and not out.is_dir():
        raise RegionFolderError(f"{out}: --out is a file, not a folder for the region series")
    if not out.exists():
        made = out.parent / f".{out.name}.claim-{os.getpid()}-{os.urandom(4).hex()}"
        made.mkdir(parents=True)
        (made / MARK).write_text(MARK_TEXT)
        try:
            made.rename(out)
        except OSError:  # another task made it first
            shutil.rmtree(made, ignore_errors=True)
    if (out / MARK).is_file():
        return
    found = sorted(p.name for p in out.iterdir())
    if found:
        shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
        raise RegionFolderError(
            f"{out}: --out holds other files ({shown}) and is no region folder of "
            "bigearthnet-map region: choose an empty or a new folder"
        )
    try:
        with open(out / MARK, "x", encoding="utf-8") as mark:
            mark.write(MARK_TEXT)
    except FileExistsError:
        pass


def scene_map_path(out: Path, scene: str | Path, tile: str, date: dt.date) -> Path:
    """Where the map of ``scene`` goes: named by tile and date, and by its resolved path, so
    that two scenes whose folders share a name never share a map."""
    digest = hashlib.sha256(str(Path(scene).resolve()).encode()).hexdigest()[:10]
    return out / SCENES / f"{tile}_{date:%Y%m%d}_{digest}.tif"


def staging(out: Path) -> Path:
    """A fresh hidden folder in ``out`` to build the products in (earlier ones removed: a
    killed build leaves one behind)."""
    for stale in out.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)
    folder = out / f"{STAGING_PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
    folder.mkdir()
    return folder


def publish(out: Path, staged: Path, record: dict) -> None:
    """Swap the complete products of ``staged`` in for the earlier ones, then write
    ``consistency.json``: taken away only now, and back once every product is in place."""
    (out / CONSISTENCY).unlink(missing_ok=True)
    for name in PRODUCTS:
        old, new = out / name, staged / name
        if old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink(missing_ok=True)
        if new.exists():
            new.rename(old)
    shutil.rmtree(staged, ignore_errors=True)
    atomic_write_json(out / CONSISTENCY, record)


def is_complete(out: Path) -> bool:
    return (out / CONSISTENCY).is_file()
