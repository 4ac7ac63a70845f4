"""The charts of bench/scale.py: one PNG per curve, drawn with matplotlib (the `charts` extra)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench._scale_kit import Chart

COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red")


def style(label: str, labels: list[str], points: int) -> dict[str, object]:
    """One colour per system (the label before any comma), solid for its first series and dashed
    for the others; markers only where there are few points."""
    systems = list(dict.fromkeys(name.split(",")[0] for name in labels))
    return {
        "color": COLOURS[systems.index(label.split(",")[0]) % len(COLOURS)],
        "linestyle": "-" if next(n for n in labels if n.split(",")[0] == label.split(",")[0]) == label else "--",
        "marker": "o" if points <= 30 else None,
        "markersize": 4,
        "linewidth": 1.5 if points <= 30 else 1.0,
    }


def draw(charts: Sequence[Chart], folder: Path) -> list[Path]:
    """Draw each chart as `<folder>/<name>.png`; none when matplotlib is not installed."""
    if not charts:
        return []
    try:
        import matplotlib
    except ImportError:
        print("  (no charts: matplotlib is not installed; pip install -e '.[charts]')")
        return []
    matplotlib.use("Agg")
    folder.mkdir(parents=True, exist_ok=True)
    return [plot(chart, folder / f"{chart.name}.png") for chart in charts]


def plot(chart: Chart, path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    labels = list(chart.series)
    for label, ys in chart.series.items():
        axes.plot(chart.xs[: len(ys)], ys, label=label, **style(label, labels, len(ys)))  # type: ignore[arg-type]
    if chart.limit is not None:
        axes.axhline(chart.limit[1], color="grey", linestyle=":", label=chart.limit[0])
    axes.set_xscale("log" if chart.log_x else "linear")
    if len(chart.xs) <= 30:
        axes.set_xticks(chart.xs, [f"{x:,.0f}" for x in chart.xs])
        axes.minorticks_off()
    axes.set_yscale("log" if chart.log_y else "linear")
    if not chart.log_y:
        axes.set_ylim(bottom=0)
    axes.set(title=chart.title, xlabel=chart.x_label, ylabel=chart.y_label)
    axes.title.set_fontsize(10)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)
    return path
