"""PNG previews of raster maps: the image in map coordinates (km), a legend and a scale bar.
One drawing routine for scene maps and change maps (the patch maps of :mod:`maps` keep
their own, whose pixels are scattered patches rather than a grid)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bigearthnet.core.constants import hex_colour
from bigearthnet.evaluation.plots import save_figure

MAX_LEGEND = 24  # a legend longer than this is cut (the CSV beside the map has them all)
FIGURE_INCHES = (10.0, 7.0)
# The longest side a map is drawn from. The figure's axes take at most 853 x 593 px of it
# (10 x 7 in at plots.png_bytes's 110 dpi), and matplotlib resamples any larger image down
# to them: a 1,728 px 10 m map drawn whole cost 1.3 s of the preview's 2.0, at 864 px 0.6 s.
DRAWN_PX = 1024
UNCHANGED = (225, 225, 225)  # light grey: no change, in change maps and their styles


@dataclass(frozen=True)
class LegendEntry:
    colour: tuple[int, ...]  # 0..255 red, green, blue
    label: str

    def hex(self) -> str:
        return f"#{hex_colour(self.colour)}"


def sampled_colours(colormap: str, count: int) -> list[tuple[int, int, int]]:
    """``count`` colours of a matplotlib colour map, evenly spaced from its start to its end
    (a qualitative one, ``tab20``, gives its colours in order)."""
    from matplotlib import colormaps

    cmap = colormaps[colormap]
    if cmap.N <= 20:  # qualitative: its own colours, in turn
        points = [i % cmap.N for i in range(count)]
    else:
        points = [round(i * (cmap.N - 1) / max(count - 1, 1)) for i in range(count)]
    return [tuple(int(round(255 * v)) for v in cmap(point)[:3]) for point in points]  # type: ignore[misc]


def scale_bar_length(width_m: float) -> float:
    """A round length (1, 2 or 5 x 10^k m) near a fifth of the map's width."""
    target = max(width_m / 5.0, 1e-9)
    power = 10 ** math.floor(math.log10(target))
    return max(step * power for step in (1, 2, 5) if step * power <= target)


def write_preview(
    path: Path, rgb: np.ndarray, *, transform, title: str, legend: list[LegendEntry]
) -> None:
    """Draw ``rgb`` ((rows, cols, 3) uint8) on the grid ``transform`` (metres) with a legend
    and a scale bar; written atomically. A map larger than :data:`DRAWN_PX` is drawn from
    every ``step``-th pixel (:func:`drawn_step`), over its whole extent."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    rows, cols = rgb.shape[:2]
    left, top = transform.c / 1000, transform.f / 1000
    right, bottom = left + cols * transform.a / 1000, top + rows * transform.e / 1000
    step = drawn_step(rows, cols)
    fig = Figure(figsize=FIGURE_INCHES)
    ax = fig.add_subplot()
    ax.imshow(rgb[::step, ::step], extent=(left, right, bottom, top), interpolation="nearest")
    ax.set(xlabel="easting (km)", ylabel="northing (km)", title=title)
    _scale_bar(ax, left=left, bottom=bottom, width_km=right - left, height_km=top - bottom)
    handles = [
        Patch(facecolor=e.hex(), edgecolor="grey", label=e.label) for e in legend[:MAX_LEGEND]
    ]
    if len(legend) > MAX_LEGEND:
        handles.append(
            Patch(facecolor="none", edgecolor="none", label=f"... {len(legend) - MAX_LEGEND} more")
        )
    if handles:
        ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=7)
    save_figure(fig, path, title=title)


def drawn_step(rows: int, cols: int) -> int:
    """Every how many pixels a ``rows`` x ``cols`` map is drawn (nearest): 1 up to
    :data:`DRAWN_PX` a side."""
    return max(1, math.ceil(max(rows, cols) / DRAWN_PX))


def _scale_bar(ax, *, left: float, bottom: float, width_km: float, height_km: float) -> None:
    length_km = scale_bar_length(width_km * 1000) / 1000
    x0, y0 = left + 0.05 * width_km, bottom + 0.05 * height_km
    ax.plot([x0, x0 + length_km], [y0, y0], color="black", linewidth=3, solid_capstyle="butt")
    label = f"{length_km:g} km" if length_km >= 1 else f"{length_km * 1000:g} m"
    ax.text(x0 + length_km / 2, y0 + 0.02 * height_km, label, ha="center", va="bottom")
