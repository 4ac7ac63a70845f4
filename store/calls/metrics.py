"""Metrics: how an evaluation scores one row's new answer against the row (`metric(row, outputs)`).

An evaluation runs on the worker, so its metric is named, never shipped: `exact_match` (functai's
default) and `contains` are built in, and a module listed in THREADLINE_PROGRAMS adds its own with
`@threadline.metric`. A metric returns a number (a bool counts 1 or 0); 1 is best.
"""

from __future__ import annotations

import enum
import importlib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, overload

from core.errors import ErrorCode, ThreadlineError

MetricFunction = Callable[[Mapping[str, Any], Mapping[str, Any]], float | bool]


@dataclass(frozen=True, slots=True)
class Metric:
    """A named metric: `score(row, outputs)` is a finite number."""

    name: str
    fn: MetricFunction

    def score(self, row: Mapping[str, Any], outputs: Mapping[str, Any]) -> float:
        """The row's score.

        Raises:
            ThreadlineError: `invalid-request` when the metric cannot score the row or gives no number.
        """
        try:
            value = float(self.fn(row, outputs))
        except (TypeError, ValueError, KeyError) as err:
            message = f"metric {self.name} could not score the row ({type(err).__name__}): fix the metric or the row"
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, message) from None
        if not math.isfinite(value):
            raise ThreadlineError(ErrorCode.INVALID_REQUEST, f"metric {self.name} gave no finite number")
        return value


@overload
def metric(fn: MetricFunction, *, name: str | None = None) -> Metric: ...
@overload
def metric(fn: None = None, *, name: str | None = None) -> Callable[[MetricFunction], Metric]: ...
def metric(fn: MetricFunction | None = None, *, name: str | None = None) -> Metric | Callable[[MetricFunction], Metric]:
    """Make `fn(row, outputs) -> number` a metric a worker can run (`@threadline.metric` in a
    THREADLINE_PROGRAMS module); its name is the function's unless `name` is given."""
    if fn is None:
        return lambda f: metric(f, name=name)
    return Metric(name or fn.__name__, fn)


def _norm(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    if isinstance(value, enum.Enum):
        return _norm(value.value)
    return value


def exact_match(row: Mapping[str, Any], outputs: Mapping[str, Any]) -> float:
    """1 when every output the row has a column for equals the new answer's (text compared ignoring
    case and repeated spaces), else 0: functai's default metric."""
    keys = [k for k in outputs if k in row]
    if not keys:
        raise KeyError("the row has no column for any output")
    return float(all(_norm(row[k]) == _norm(outputs[k]) for k in keys))


def contains(row: Mapping[str, Any], outputs: Mapping[str, Any]) -> float:
    """1 when every text output the row has a column for holds the row's text (ignoring case and
    repeated spaces), else 0: for answers that may say more than the expected words."""
    keys = [k for k in outputs if k in row]
    if not keys:
        raise KeyError("the row has no column for any output")
    return float(all(str(_norm(row[k])) in str(_norm(outputs[k])) for k in keys))


BUILT_IN = {m.name: m for m in (Metric("exact_match", exact_match), Metric("contains", contains))}


def load_metrics(modules: Iterable[str]) -> dict[str, Metric]:
    """The built-in metrics plus every `Metric` defined at the top level of `modules`."""
    found = dict(BUILT_IN)
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            raise ThreadlineError(ErrorCode.PROGRAM_INVALID, f"cannot import program module {name!r}: {err}") from None
        found.update({m.name: m for m in vars(module).values() if isinstance(m, Metric)})
    return found


def find_metric(metrics: Mapping[str, Metric], name: str) -> Metric:
    """The metric named `name`.

    Raises:
        ThreadlineError: `metric-unknown` when this worker has none of that name.
    """
    found = metrics.get(name)
    if found is None:
        known = ", ".join(sorted(metrics))
        message = f"no metric named {name!r} is known here (known: {known}); add it with @threadline.metric"
        raise ThreadlineError(ErrorCode.METRIC_UNKNOWN, message)
    return found
