"""Whether what a command is about to make fits this machine: the disk under its output and
the memory its work holds, checked before the work starts.

Each generator estimates its own needs in one function, from what sizes it (patches,
pixels, scenes) and its on-disk layout; :func:`check_room` compares the estimate with
``shutil.disk_usage`` of the output's file system and ``psutil``'s available memory. A
size typo (``--patches 4000000``, ``--blocks 100000``) is then one line naming the option
and the bytes, not an hour of swapping or a full disk.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core.errors import ConfigError

DISK_BLOCK = 4096  # bytes: a file takes whole blocks of its file system (ext4, xfs)


@dataclass(frozen=True)
class Needs:
    """What a command's output takes: ``disk`` and peak ``memory`` bytes; ``sized_by``
    names the options that decide them, as typed (``--patches 4000000``)."""

    disk: int
    memory: int
    sized_by: str


def on_disk(size: float) -> int:
    """Bytes a file of ``size`` bytes takes: whole blocks."""
    return math.ceil(size / DISK_BLOCK) * DISK_BLOCK


def check_room(out: Path, needs: Needs) -> None:
    """ConfigError naming ``needs.sized_by`` when ``out``'s file system has less free space
    than ``needs.disk`` (an earlier ``out`` it replaces is freed only at the end) or this
    machine less available memory than ``needs.memory``."""
    import psutil

    where = Path(out).resolve()
    while not where.exists():  # the file system the output will be on
        where = where.parent
    free = shutil.disk_usage(where).free
    if needs.disk > free:
        raise ConfigError(
            f"{needs.sized_by}: needs {_gigabytes(needs.disk)} on disk for {out}, and its file "
            f"system has {_gigabytes(free)} free"
        )
    available = psutil.virtual_memory().available
    if needs.memory > available:
        raise ConfigError(
            f"{needs.sized_by}: needs {_gigabytes(needs.memory)} of memory, and this machine "
            f"has {_gigabytes(available)} available"
        )


def _gigabytes(size: float) -> str:
    return f"{size / 1e9:,.1f} GB" if size < 1e14 else f"{size:.1e} bytes"
