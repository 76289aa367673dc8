"""How a 10 m scene map tiles its scene: large square windows through the dense head, run
fully convolutionally, each window's border margin discarded so the kept cores tile the
scene without seams. Free of TensorFlow.

* **The lattice.** Window origins sit on multiples of :data:`LATTICE` (96) 10 m px of the
  scene's own grid, whatever the window and the area mapped: 32, the deepest feature
  stride of every registry encoder (ResNet stage 4), so each pixel lands at the same place
  of every feature map in any window, and 6, so the 60 m bands' pixels are read whole.
  Window sizes are multiples of it too, so the dense head's resizes are exact factors of
  2 and a window's far edge is a lattice point. A pixel's prediction then depends on its
  context only, not on the tiling: a ``--bbox`` map equals the whole scene's map where
  they overlap.
* **The margin.** Each window's border is discarded: there the receptive field runs out of
  the window (zero padding, the upsampling's clamped edge). Its width is the model's:
  :func:`margin_for`, the dense head's context declared in the registry
  (:data:`bigearthnet.models.DENSE_CONTEXT`: how far one pixel's logits reach, measured
  from the gradient) rounded up to 48 px, so the cores stay on the lattice: the tiny CNN
  48 px (context 24), the ResNets 288 px (context 278 for ResNet-50, 282 for ResNet-18).
  With 48 px for ResNet-50, 20 % of the pixels 48-64 px from a cut took another class
  (docs/maps.md, seams).
* **The scene's edges.** A window that reaches an edge of the scene keeps its pixels up
  to that edge: they see all the scene has, and every window that computes them sees the
  same past it. At the near edge a window starts at the edge (px 0, a lattice point;
  the model pads as at a patch's edge). At the far edge every window ends at
  :func:`far_edge`, the scene's extent rounded up to the lattice: 0 and no data from the
  scene's last px to there (at most 90 px; none where the extent is on the lattice, as
  the 1,728 px of P12 and every multiple of 96), then the model's padding. A window that
  would end past it is moved back to end there: its origin (the far edge less the side,
  both multiples of 96) stays on the lattice. A scene no larger than the window is one
  window of the far edges' size (a 1,728 px scene: one 1,728 px window), and so is a
  ``--bbox`` area whose margins around it fit (:meth:`Tiling.one_window`). Before
  2026-11-28 the windows kept only their cores at the far edge, reading 0 a margin past
  it: the 1,728 px scene took 2 x 2 windows of 1,728 px (4.0x its pixels).
* **Invariance.** A pixel's prediction then depends on its context and the scene's edges
  only, never on the tiling, beyond float rounding: one stored probability step
  (tests/maps/test_scene_pixels.py: shifted tilings of the tiny CNN, with windows ending
  at a far edge on and off the lattice, and a cut ResNet-50 window against one with the
  scene around it).
* **The window.** ``--window`` is the largest window; by default the largest multiple of
  the lattice that fits the memory (below), up to :data:`MAX_WINDOW` (4,032 px: a 10,980
  px tile in 4 x 4 windows of 3,264 px, each pixel computed 1.41x; the next step, 3 x 3,
  would take 17 GB a rank for ResNet-50), so a big node maps with fewer, larger windows.
  Before the memory is known (a region's first check, ``--help``) it is
  :func:`default_window`: 960 px for the tiny CNN, 1,728 for the ResNets (core 1,152 px,
  2/3 of it). A scene takes as many windows along an axis as that window needs (from its
  near edge to its far edge), each of the least lattice multiple that still covers it in
  as many (:meth:`Tiling.side`), so the windows overlap no more than they must, and a
  scene that fits is one window of its own size. A 10,980 px tile at 1,728 px: 10
  windows of 1,632 px a side for the ResNets, each pixel computed 2.21x (2.48x at a fixed
  1,728 px with the old far edge); at 2,976 px (ResNet-50 with 17.9 GB free): 5 of 2,688
  px, 1.50x. A window below the model's :func:`least_window` (the ResNets: 672 px) is
  refused naming it.
* **Memory.** A window takes the bytes per px its model declares
  (:data:`bigearthnet.models.WINDOW_BYTES_PER_PX`: ~1.7-1.9x the peak RSS measured,
  ResNet-50 1,000 B, 3.0 GB at 1,728 px), checked against half the free memory shared by the
  node's ranks (:func:`window_allowance`) before the scene is read: a window that does
  not fit is refused, naming the largest that does. Until 2026-11-28 the bound was every
  layer's output summed (ResNet-50 ~843 floats a px, 10.1 GB at 1,728 px): 6-9x what
  ResNet-50 takes, and below what the tiny CNN takes (its 19 probabilities a px at full
  size, softmaxed and copied, are not layers' outputs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bigearthnet import models
from bigearthnet.core.errors import ConfigError, InputError, require_positive_int

LATTICE = 96  # window origins: multiples of the encoders' stride 32 and the 60 m grid's 6
MARGIN_STEP = LATTICE // 2  # margins are multiples of it: the cores stay on the lattice
MARGIN = MARGIN_STEP  # the least margin: the tiny CNN's (its context: 24 px)
DEFAULT_WINDOW = 960  # the least default: 9.6 km, cores of 864 px at MARGIN (1.23x)
CORE_SHARE = 2 / 3  # a default window's core: each pixel computed <= 1 / (2/3)^2 = 2.25x
MIN_WINDOW = 2 * MARGIN + LATTICE  # the least window of any model (its own: least_window)
MAX_WINDOW = 4032  # the largest default: a tile in 4 x 4 windows (1.41x); 3 x 3: 17 GB a rank


def margin_for(model: str) -> int:
    """The px discarded at each window border for the registry model ``model``: its dense
    head's context (:data:`bigearthnet.models.DENSE_CONTEXT`) rounded up to
    :data:`MARGIN_STEP`."""
    return max(MARGIN, math.ceil(models.DENSE_CONTEXT[model] / MARGIN_STEP) * MARGIN_STEP)


def least_window(margin: int) -> int:
    """The smallest window with a core left after ``margin`` at each border."""
    return 2 * margin + LATTICE


def default_window(margin: int) -> int:
    """The window ``--window`` defaults to at ``margin``: :data:`DEFAULT_WINDOW`, or the
    least multiple of :data:`LATTICE` whose core is :data:`CORE_SHARE` of it (the
    ResNets, margin 288: 1,728 px, each pixel 2.25x on a large scene)."""
    core_share_window = math.ceil(2 * margin / (1 - CORE_SHARE) / LATTICE) * LATTICE
    return max(DEFAULT_WINDOW, core_share_window)


def require_window(flag: str, value: int) -> int:
    """A window size: a positive multiple of :data:`LATTICE`, with a core left after the
    least margin; else ConfigError naming ``flag`` (the model's own margin:
    :func:`require_window_for`)."""
    require_positive_int(flag, value)
    if value % LATTICE or value < MIN_WINDOW:
        raise ConfigError(
            f"{flag} {value}: a multiple of {LATTICE} px from {MIN_WINDOW} (each window "
            f"loses at least {MARGIN} px at its borders; origins on the {LATTICE} px lattice)"
        )
    return value


def require_window_for(window: int, model: str) -> int:
    """``window`` if it leaves a core after ``model``'s margin; else InputError naming
    ``--window``, the model and its least window."""
    margin = margin_for(model)
    if window < least_window(margin):
        raise InputError(
            f"--window {window}: too small for {model}, whose dense head sees "
            f"{models.DENSE_CONTEXT[model]} px around each pixel, so each window loses "
            f"{margin} px at its borders; take --window {least_window(margin)} or more "
            f"(default {default_window(margin)})"
        )
    return window


@dataclass(frozen=True)
class Tiling:
    """Windows of ``window`` px whose cores (the window less ``margin`` at each border) tile
    the scene; ``phase`` (a multiple of :data:`LATTICE`) shifts every window, so a test can
    compare two tilings."""

    window: int = DEFAULT_WINDOW
    phase: int = 0
    margin: int = MARGIN

    def __post_init__(self) -> None:
        require_window("--window", self.window)
        if self.phase % LATTICE:
            raise ValueError(f"phase {self.phase}: not a multiple of {LATTICE}")
        if self.margin % MARGIN_STEP or self.window < least_window(self.margin):
            raise ValueError(f"margin {self.margin}: not a multiple of {MARGIN_STEP} leaving "
                             f"a core in {self.window} px")  # fmt: skip

    @property
    def core(self) -> int:
        return self.window - 2 * self.margin

    def side(self, start: int, size: int, extent: int) -> int:
        """The windows' size along an axis, for the area of ``size`` px from ``start`` of a
        scene of ``extent`` px: one window's where the area with its context fits in the
        window (:meth:`one_window`), else the least multiple of :data:`LATTICE` up to the
        window that tiles the scene in as few windows as the window does."""
        one = self.one_window(start, size, extent)
        if one is not None:
            return one[1] - one[0]
        edge = far_edge(extent)
        count = 1 + math.ceil((edge - self.window) / self.core)  # the window's, from 0
        # count windows of side s, from 0 to the far edge, keep it all: (count - 1)
        # cores of (s - 2 margin) and the last window's s reach the edge
        least = math.ceil((edge + 2 * self.margin * (count - 1)) / count / LATTICE) * LATTICE
        return max(least, least_window(self.margin))

    def one_window(self, start: int, size: int, extent: int) -> tuple[int, int] | None:
        """[begin, end) in scene px of the one window that maps the area of ``size`` px
        from ``start``, if it fits in the window: from the margin before the area (or the
        scene's edge) to the margin after it (or :func:`far_edge`), on the lattice."""
        begin = 0 if start <= self.margin else (start - self.margin) // LATTICE * LATTICE
        end = min(far_edge(extent), math.ceil((start + size + self.margin) / LATTICE) * LATTICE)
        return (begin, end) if end - begin <= self.window else None

    def windows(self, start: int, size: int, extent: int) -> list[tuple[int, int, int]]:
        """(origin, begin, end) of each window along an axis of a scene of ``extent`` px,
        in coordinates of the area of ``size`` px from its px ``start``: the window's origin
        (negative: it reads context before the area) and the part [begin, end) of the area
        it keeps. The kept parts tile [0, size); every window is :meth:`side` px.

        An area that fits in one window with its context is one window
        (:meth:`one_window`). Otherwise a window keeps its core, and past it up to the
        scene's edge where it reaches one: a window that would start before the scene
        starts at its edge (origin 0), one that would end past :func:`far_edge` ends there
        (its origin, the edge less the side, is on the lattice too), so every window that
        computes a pixel near an edge sees the same there: the model's own padding at the
        near edge, 0 up to the far edge and the model's padding past it. Windows go in the
        order of the lattice, from the phase; one whose kept part the ones before it
        already hold is not run."""
        one = self.one_window(start, size, extent)
        if one is not None:
            return [(one[0] - start, 0, size)]
        margin, side = self.margin, self.side(start, size, extent)
        edge = far_edge(extent)
        core = side - 2 * margin  # of these windows (self.core: of the window's)
        first = math.floor((start - self.phase - margin) / core) - 1
        last = math.ceil((start + size - self.phase) / core)
        found, kept_to = [], start
        for origin in sorted({min(max(self.phase + k * core, 0), edge - side)
                              for k in range(first, last + 1)}):  # fmt: skip
            begin = 0 if origin == 0 else origin + margin
            end = extent if origin + side == edge else origin + side - margin
            begin, end = max(begin, kept_to), min(end, start + size)
            if end > begin:
                found.append((origin - start, begin - start, end - start))
                kept_to = end
        return found


def far_edge(extent: int) -> int:
    """Where every window that reaches the far edge of a scene of ``extent`` px ends: the
    extent rounded up to the lattice (what lies past the scene reads as 0 and no data)."""
    return math.ceil(extent / LATTICE) * LATTICE


def window_allowance(available: int, ranks: int = 1) -> float:
    """The bytes one rank's window may take: half the ``available`` memory, shared by the
    ``ranks`` of the node."""
    return available / 2 / ranks


def largest_window(model: str, allowance: float) -> int:
    """The largest multiple of :data:`LATTICE` whose square window through ``model``
    (:data:`bigearthnet.models.WINDOW_BYTES_PER_PX`) takes at most ``allowance`` bytes."""
    return math.isqrt(int(allowance / models.WINDOW_BYTES_PER_PX[model])) // LATTICE * LATTICE


def memory_window(model: str, allowance: float) -> int:
    """The window ``--window`` defaults to when the memory is known: the largest that
    takes at most ``allowance`` bytes (:func:`largest_window`), up to :data:`MAX_WINDOW`;
    InputError when not even ``model``'s least window fits."""
    fits = min(largest_window(model, allowance), MAX_WINDOW)
    least = least_window(margin_for(model))
    if fits < least:
        raise InputError(
            f"--window: not even the least window of {model}, {least} px, fits in the "
            f"{allowance / 1e9:.2f} GB a rank may take (half the memory available; "
            f"{models.WINDOW_BYTES_PER_PX[model]} bytes a px): free memory, or run fewer "
            f"ranks on the node"
        )
    return fits


def check_window_memory(window: int, model: str, allowance: float) -> None:
    """InputError naming ``--window`` when a square ``window`` through ``model`` takes more
    than ``allowance`` bytes (:func:`window_allowance`); the message gives the largest
    window that fits, if one from ``model``'s least window does."""
    need = models.WINDOW_BYTES_PER_PX[model] * window * window
    if need <= allowance:
        return
    fits = largest_window(model, allowance)
    least = least_window(margin_for(model))
    advice = f"take --window {fits} or less" if fits >= least else "no window fits"
    raise InputError(
        f"--window {window}: a window through {model} needs about {need / 1e9:.1f} GB "
        f"({models.WINDOW_BYTES_PER_PX[model]} bytes a px, measured), more than the "
        f"{allowance / 1e9:.1f} GB a rank may take (half the memory available); {advice}"
    )
