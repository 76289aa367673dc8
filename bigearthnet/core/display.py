"""Numbers and paths as the shared outputs show them: the run page, the region page and the
model card. One home, so the three never disagree on how a learning rate, an area or a wall
time reads, and none of them carries a path of the machine that built it.

- a value spread over decades (a learning rate) keeps three significant figures;
- an area keeps the decimals that show one cell of its map to 1 % (0.36 km² cells: 2);
- a duration is in seconds, minutes or hours, whichever reads as a small number;
- a count agrees with its noun ("1 warm-up epoch", "15 epochs");
- a path is shown relative to the folder being shared, or by its base name; one an output
  follows (a map's run) is kept relative to that output, ``..`` included.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Iterable
from pathlib import Path

# an absolute path inside a sentence: from a "/" that starts a word to before a space,
# quote, bracket or separator, a sentence's closing dot left out
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~-])/[^\s'\"`,;:()\[\]<>]*[^\s'\"`,;:()\[\]<>.]")
AREA_TOLERANCE = 0.01  # an area's decimals show one cell to 1 %
MAX_AREA_DECIMALS = 6


def significant(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures: 0.0004952 -> 0.000495, 0.01 -> 0.01,
    2.5e-06 -> 2.5e-6 (no padded exponent)."""
    if not math.isfinite(value):
        return str(value)
    text = f"{value:.{digits}g}"
    mantissa, marker, exponent = text.partition("e")
    return f"{mantissa}e{int(exponent)}" if marker else mantissa


def rounded(value: float) -> str:
    """A measured quantity to three significant figures, never in exponent form: 35.1,
    450, 3,403 (an estimate's digits beyond the third are noise)."""
    return f"{value:,.0f}" if abs(value) >= 100 else significant(value, 3)


def count(number: float, noun: str, plural: str | None = None) -> str:
    """``number`` and its noun in agreement: "1 warm-up epoch", "2 ranks", "0 scenes",
    "0.5 warm-up epochs" (a whole float shows as a whole number)."""
    word = noun if number == 1 else (plural or f"{noun}s")
    shown = f"{number:,.0f}" if float(number).is_integer() else f"{number:,g}"
    return f"{shown} {word}"


def duration(seconds: float) -> str:
    """A wall time people read at once: "42 s", "3.5 min", "18 min", "2.4 h"."""
    if seconds < 90:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    minutes = seconds / 60
    if minutes < 90:
        return f"{minutes:.1f} min" if minutes < 10 else f"{minutes:.0f} min"
    return f"{minutes / 60:.1f} h"


def area_decimals(cell_km2: float) -> int:
    """The fewest decimals that show the area of one cell (``cell_km2``) to 1 %: cells of
    600 m (0.36 km²) -> 2, of 10 m (0.0001 km²) -> 4, of 10 km -> 0. Every area of a map is
    a whole number of its cells, so more decimals add digits, not information."""
    if not (cell_km2 > 0 and math.isfinite(cell_km2)):
        raise ValueError(f"cell area {cell_km2!r} km² is not a positive number")
    for decimals in range(MAX_AREA_DECIMALS + 1):
        if abs(round(cell_km2, decimals) - cell_km2) <= AREA_TOLERANCE * cell_km2:
            return decimals
    return MAX_AREA_DECIMALS


def km2(value: float, decimals: int) -> str:
    """An area with thousands separators and ``decimals`` (from :func:`area_decimals`)."""
    return f"{value:,.{decimals}f}"


def shown_path(path: str | os.PathLike, base: str | os.PathLike) -> str:
    """``path`` as a shared page or card may show it: relative to ``base`` (the folder being
    shared) when inside it, else (``base`` itself too) only its base name. A relative path
    is shown as given."""
    text = os.fspath(path)
    if not text or not os.path.isabs(text):
        return text
    resolved, root = Path(text).resolve(), Path(base).resolve()
    if resolved != root and resolved.is_relative_to(root):
        return resolved.relative_to(root).as_posix()
    return resolved.name or text


def linked_path(path: str | os.PathLike, base: str | os.PathLike) -> str:
    """``path`` as a shared output keeps it to find it again (a map's run, a series'
    scenes): relative to ``base`` (the folder of the file that keeps it, where it will lie),
    ``..`` included, so the two can move together; only its base name where the two share
    no folder below the root (a relative path would spell the absolute one out). A relative
    ``path`` is read from the working folder, as a command was given it; a URL is kept."""
    text = os.fspath(path)
    if not text or "://" in text:
        return text
    resolved, root = Path(text).resolve(), Path(base).resolve()
    shared = Path(os.path.commonpath([resolved, root]))
    if shared == Path(shared.anchor):
        return resolved.name or text
    return Path(os.path.relpath(resolved, root)).as_posix()


def shown_command(argv: Iterable[str], base: str | os.PathLike) -> str:
    """A command line with every absolute path in it (``/a/b`` or ``--opt=/a/b``) shown as
    :func:`shown_path` shows it, quoted as a shell takes it."""
    words = []
    for word in argv:
        flag, equals, value = word.partition("=")
        if equals and flag.startswith("-"):
            words.append(f"{flag}={shown_path(value, base)}")
        else:
            words.append(shown_path(word, base))
    return shlex.join(words)


def shown_value(value: object, base: str | os.PathLike) -> object:
    """A configuration value for display: absolute paths as :func:`shown_path` shows them,
    anything else unchanged."""
    return shown_path(value, base) if isinstance(value, str) else value


def shown_text(text: str, base: str | os.PathLike) -> str:
    """A message (an error, a reason) with every absolute path in it shown as
    :func:`shown_path` shows it."""
    return _ABSOLUTE_PATH.sub(lambda match: shown_path(match.group(0), base), text)


def linked_text(text: str, base: str | os.PathLike) -> str:
    """A message an output keeps (a skipped scene's reason) with every absolute path in it
    kept as :func:`linked_path` keeps it."""
    return _ABSOLUTE_PATH.sub(lambda match: linked_path(match.group(0), base), text)
