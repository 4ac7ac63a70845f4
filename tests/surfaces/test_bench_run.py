"""`make bench` (`python -m bench`): a benchmark that breaks costs its own figures, not the whole run's."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from bench.__main__ import report, run, summary


@pytest.fixture
def benchmarks() -> Iterator[list[str]]:
    """Two throwaway benchmark modules under `bench.`: one that breaks halfway, one that finishes."""
    broken = types.ModuleType("bench._test_broken")
    broken.__doc__ = "A benchmark that breaks."

    def breaks() -> list[object]:
        print("measured the first half")
        raise RuntimeError("the server went away")

    finished = types.ModuleType("bench._test_finished")
    finished.__doc__ = "A benchmark that finishes."

    def finishes() -> list[object]:
        print("| measure | value |\n|---|---|\n| turns | 3 |")
        return []

    broken.main, finished.main = breaks, finishes  # type: ignore[attr-defined]
    names = {"bench._test_broken": broken, "bench._test_finished": finished}
    sys.modules.update(names)
    yield ["_test_broken", "_test_finished"]
    for name in names:
        sys.modules.pop(name, None)


def test_a_broken_benchmark_is_reported_and_the_next_one_still_runs(benchmarks: list[str]) -> None:
    sections = run(benchmarks)

    assert [True, False] == [s.failed for s in sections]
    assert "RuntimeError: the server went away" in sections[0].output
    assert "measured the first half" in report(sections, 60.0)
    assert "| turns | 3 |" in report(sections, 60.0)
    assert "- _test_broken: it failed before it finished" in summary(sections, 60.0)
