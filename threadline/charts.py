"""Charts a person would rather look at than read: the distribution of an evaluation's scores.

matplotlib is optional (`pip install 'threadline[charts]'`): only drawing a chart needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from core.errors import ErrorCode, ThreadlineError


def score_chart(scores: Sequence[float], path: Path, *, title: str, mean: float | None) -> Path:
    """Write a PNG histogram of `scores` (a failed row counts 0) to `path`, the mean marked; return `path`.

    Raises:
        ThreadlineError: `invalid-request` when matplotlib is not installed.
    """
    try:
        from matplotlib.figure import Figure  # no pyplot: no global state, no display needed
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        message = "charts need matplotlib: pip install 'threadline[charts]'"
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, message) from None
    figure = Figure(figsize=(6.4, 4.0), dpi=100, layout="constrained")
    axes = figure.subplots()
    unit = all(0.0 <= s <= 1.0 for s in scores)
    axes.hist(list(scores), bins=10, range=(0.0, 1.0) if unit else None, color="#4878a8", edgecolor="white")
    if mean is not None:
        axes.axvline(mean, color="#c44e52", linestyle="--", label=f"mean {mean:.2f}")
        axes.legend(loc="upper left")
    axes.set_title(f"{title}: {len(scores)} rows")
    axes.set_xlabel("score")
    axes.set_ylabel("rows")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))  # rows are counted in whole rows
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path
