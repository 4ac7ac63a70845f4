"""The dashboard drawn as Grafana lays it out: each panel at its `gridPos` on a 24-column grid of 30-pixel
rows, its title, its series as lines named by their legend format, its unit on the y axis, "No data"
where its queries answered nothing. Matplotlib draws it (the `charts` extra); the data is whatever
Prometheus answered."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure  # no pyplot: no global state, no display needed
from matplotlib.patches import FancyBboxPatch
from matplotlib.ticker import FuncFormatter, MaxNLocator, MultipleLocator

from tests.telemetry.prometheus import Panel

WIDTH_IN, ROW_IN, HEADER_IN, GAP_IN = 16.0, 0.3, 1.0, 0.08
"""The figure's width, a grid row's height, the header's height, the gap between panels (inches; 100 dpi)."""
PAGE, PANEL, TEXT, MUTED, GRID = "#111217", "#181b1f", "#ccccdc", "#8e8e9f", "#2c3235"
"""Grafana's dark theme."""
PALETTE = ("#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a", "#37872d")
"""Grafana's classic palette, in its order."""
LEGEND_COLUMNS = 3


@dataclass(frozen=True, slots=True)
class Line:
    """One series as a panel shows it: its legend and its (unix seconds, value) points."""

    name: str
    points: list[tuple[float, float]]


def _si(value: float, suffix: str, base: float = 1000.0) -> str:
    for prefix in ("", "K", "M", "G"):
        if abs(value) < base or prefix == "G":
            return f"{value:.3g}{' ' if suffix or prefix else ''}{prefix}{suffix}".strip()
        value /= base
    raise AssertionError("unreachable")


def _seconds(value: float) -> str:
    if value == 0:
        return "0 s"
    if abs(value) < 1:
        return f"{value * 1000:.3g} ms"
    return f"{value:.3g} s" if abs(value) < 60 else f"{value / 60:.3g} min"


UNITS: dict[str, Callable[[float], str]] = {
    "s": _seconds,
    "ops": lambda v: _si(v, "ops/s"),
    "Bps": lambda v: _si(v, "B/s"),
    "short": lambda v: _si(v, ""),
}
"""Grafana's units the dashboard uses, as its axes print them."""


def draw(
    shown: Sequence[tuple[Panel, list[Line]]], path: Path, *, span: tuple[float, float], title: str, caption: str
) -> None:
    """Draw every panel with its lines over `span` (unix seconds, as Grafana's time picker) into a PNG at `path`."""
    rows = max(p.grid[1] + p.grid[3] for p, _ in shown)
    height = HEADER_IN + rows * ROW_IN
    figure = Figure(figsize=(WIDTH_IN, height), dpi=100, facecolor=PAGE)
    figure.text(0.2 / WIDTH_IN, 1 - 0.35 / height, title, color=TEXT, fontsize=15, weight="bold", va="center")
    figure.text(0.2 / WIDTH_IN, 1 - 0.72 / height, caption, color=MUTED, fontsize=8.5, va="center")
    for panel, lines in shown:
        _panel(figure, panel, lines, height).set_xlim(*span)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, facecolor=PAGE)


def _panel(figure: Figure, panel: Panel, lines: list[Line], height: float) -> Axes:
    x, y, w, h = panel.grid
    left, right = x * WIDTH_IN / 24 + GAP_IN, (x + w) * WIDTH_IN / 24 - GAP_IN
    top, bottom = HEADER_IN + y * ROW_IN + GAP_IN, HEADER_IN + (y + h) * ROW_IN - GAP_IN
    box = FancyBboxPatch(
        (left / WIDTH_IN, 1 - bottom / height),
        (right - left) / WIDTH_IN,
        (bottom - top) / height,
        boxstyle="round,pad=0,rounding_size=0.002",
        transform=figure.transFigure,
        facecolor=PANEL,
        edgecolor=GRID,
        linewidth=0.6,
        zorder=-1,  # beneath the panel's axes
    )
    figure.add_artist(box)
    figure.text((left + 0.12) / WIDTH_IN, 1 - (top + 0.2) / height, panel.title, color=TEXT, fontsize=10, va="center")
    shown = [line for line in lines if any(not math.isnan(v) for _, v in line.points)]
    legend_in = 0.2 * math.ceil(len(shown) / LEGEND_COLUMNS) if shown else 0.0
    plot_top, plot_bottom = top + 0.42, bottom - 0.32 - legend_in
    axes = figure.add_axes(
        (
            (left + 0.85) / WIDTH_IN,
            1 - plot_bottom / height,
            (right - left - 1.0) / WIDTH_IN,
            (plot_bottom - plot_top) / height,
        )
    )
    _style(axes, panel.unit)
    if not shown:
        axes.text(0.5, 0.5, "No data", color=MUTED, fontsize=11, ha="center", va="center", transform=axes.transAxes)
        axes.set_yticks([])
        return axes
    for n, line in enumerate(shown):
        axes.plot(
            [t for t, _ in line.points],
            [v for _, v in line.points],
            color=PALETTE[n % len(PALETTE)],
            linewidth=1.3,
            label=line.name,
        )
    axes.set_ylim(bottom=0)
    axes.legend(
        loc="upper left",
        bbox_to_anchor=(0, -0.12 if plot_bottom - plot_top > 1.2 else -0.2),
        ncol=LEGEND_COLUMNS,
        frameon=False,
        fontsize=7.5,
        labelcolor=TEXT,
        handlelength=1.2,
    )
    return axes


def _style(axes: Axes, unit: str) -> None:
    axes.set_facecolor(PANEL)
    for side in ("top", "right", "left", "bottom"):
        axes.spines[side].set_visible(False)
    axes.grid(color=GRID, linewidth=0.6)
    axes.tick_params(colors=MUTED, labelsize=7.5, length=0)
    axes.xaxis.set_major_locator(MultipleLocator(60))  # unix seconds: a tick each whole minute
    axes.xaxis.set_major_formatter(FuncFormatter(lambda t, _: datetime.fromtimestamp(t, UTC).strftime("%H:%M")))
    axes.yaxis.set_major_locator(MaxNLocator(4))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda v, _: UNITS.get(unit, UNITS["short"])(v)))
