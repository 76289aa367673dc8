"""How a 10 m scene map tiles its scene: large square windows through the dense head, run
fully convolutionally, each window's border margin discarded so the kept cores tile the
scene without seams. Free of TensorFlow.

* **The lattice.** Window origins sit on multiples of :data:`LATTICE` (96) 10 m px of the
  scene's own grid, whatever the window and the area mapped: 32, the deepest feature
  stride of every registry encoder (ResNet stage 4), so each pixel lands at the same place
  of every feature map in any window, and 6, so the 60 m bands' pixels are read whole.
  A pixel's prediction then depends on its context only, not on the tiling: a ``--bbox``
  map equals the whole scene's map where they overlap.
* **The margin.** :data:`MARGIN` (48 px, 480 m) of each window's border is discarded: there
  the receptive field runs out of the window (zero padding, the upsampling's clamped
  edge). A kept pixel has at least 480 m of the scene around it, or the scene's edge: a
  window that would start before the scene starts at its edge, where the model pads as it
  was trained to (0 past the scene's far edge).
  The tiny model's receptive field is 35 px wide, so its maps do not depend on the tiling
  beyond float rounding (tests/maps/test_scene_pixels.py). ResNet-50's is ~480 px wide,
  and 48 px is not enough for it: on a briefly trained ResNet-50, 20 % of the pixels
  48-64 px from a window's cut take another class than with the scene around them, 1.6 %
  at 160-192 px, 0.1 % at 192-240 px (docs/maps.md, seams; a strict xfail in that test
  file). A margin per model is still to come.
* **Memory.** A window's activations: its layers' outputs, summed (an upper bound of what
  TensorFlow holds at once), checked against the free memory before the first window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bigearthnet.core.errors import ConfigError, InputError, require_positive_int

LATTICE = 96  # window origins: multiples of the encoders' stride 32 and the 60 m grid's 6
MARGIN = 48  # px discarded at each window border (LATTICE / 2: cores stay on the lattice)
DEFAULT_WINDOW = 960  # 9.6 km: cores of 864 px, 1.23x the pixels computed; ResNet-50 ~3 GB
MIN_WINDOW = 2 * MARGIN + LATTICE
FLOAT_BYTES = 4


def require_window(flag: str, value: int) -> int:
    """A window size: a positive multiple of :data:`LATTICE`, with a core left after the
    margins; else ConfigError naming ``flag``."""
    require_positive_int(flag, value)
    if value % LATTICE or value < MIN_WINDOW:
        raise ConfigError(
            f"{flag} {value}: a multiple of {LATTICE} px from {MIN_WINDOW} (each window "
            f"loses {MARGIN} px at its borders; origins on the {LATTICE} px lattice)"
        )
    return value


@dataclass(frozen=True)
class Tiling:
    """Windows of ``window`` px whose cores (the window less ``MARGIN`` at each border) tile
    the scene; ``phase`` (a multiple of :data:`LATTICE`) shifts every window, so a test can
    compare two tilings."""

    window: int = DEFAULT_WINDOW
    phase: int = 0

    def __post_init__(self) -> None:
        require_window("--window", self.window)
        if self.phase % LATTICE:
            raise ValueError(f"phase {self.phase}: not a multiple of {LATTICE}")

    @property
    def core(self) -> int:
        return self.window - 2 * MARGIN

    def windows(self, start: int, size: int) -> list[tuple[int, int, int]]:
        """(origin, begin, end) of each window along an axis, in coordinates of an area of
        ``size`` px from the scene's px ``start``: the window's origin (negative: it reads
        context before the area) and the part [begin, end) of the area it keeps, its core
        clipped to the area. The cores cover [0, size). A window that would start before
        the scene starts at its edge (a lattice point) and keeps its pixels from there: at
        the scene's edge there is no context to wait for, and every tiling sees the same
        edge (the model's own padding)."""
        first = math.floor((start - self.phase - MARGIN) / self.core)
        last = math.floor((start + size - 1 - self.phase - MARGIN) / self.core)
        if self.phase + (first + 1) * self.core <= 0:  # the next window, moved to the edge
            first += 1
        found = []
        for k in range(first, last + 1):
            origin = self.phase + k * self.core  # scene px
            core_begin = 0 if origin <= 0 else origin + MARGIN
            core_end = origin + self.window - MARGIN
            begin, end = max(core_begin - start, 0), min(core_end - start, size)
            if end > begin:
                found.append((max(origin, 0) - start, begin, end))
        return found


def check_window_memory(window: int, floats_per_px: float, available: int, model: str) -> None:
    """InputError naming ``--window`` when a window of ``model`` (``floats_per_px``: its
    layers' outputs per input px) needs more than half the ``available`` bytes; the message
    gives the largest window that fits."""
    need = floats_per_px * FLOAT_BYTES * window * window
    if need <= available / 2:
        return
    fits = math.isqrt(int(available / 2 / (floats_per_px * FLOAT_BYTES))) // LATTICE * LATTICE
    advice = f"take --window {fits} or less" if fits >= MIN_WINDOW else "no window fits"
    raise InputError(
        f"--window {window}: a window through {model} needs about {need / 1e9:.1f} GB (its "
        f"layers' outputs), more than half the {available / 1e9:.1f} GB of memory available; "
        f"{advice}"
    )
