"""The closing table every benchmark with targets prints."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

import structlog

R = TypeVar("R", bound="TableRow")


class TableRow(Protocol):
    """A row that can print itself and may have a target."""

    measure: str
    met: bool | None

    def markdown(self) -> str:
        """The row as a markdown table line."""
        ...


def print_table(rows: Sequence[TableRow], title: str) -> None:
    """Print `title`, the markdown table, and which targets were met."""
    print(f"\n{title}\n")
    print("| measure | threadline | anchor | ratio | target | met |")
    print("|---|---:|---:|---:|---|---|")
    for row in rows:
        print(row.markdown())
    missed = [r.measure for r in rows if r.met is False]
    met = sum(r.met is True for r in rows)
    print(f"\nTargets: {met} met, {len(missed)} not met{': ' if missed else ''}{'; '.join(missed)}")


def run_benchmark(header: Callable[[], None], run: Callable[[], Coroutine[Any, Any, list[R]]], note: str) -> list[R]:
    """Quiet the logs, print the header, run, then print the table titled with the machine and time."""

    started_at = time.perf_counter()
    quiet_logs()
    header()
    rows = asyncio.run(run())
    elapsed = time.perf_counter() - started_at
    print_table(rows, f"Results ({os.cpu_count()} CPUs, {elapsed:.1f} s; {note})")
    return rows


def exit_now() -> None:
    """Leave without the interpreter teardown that Temporal's core threads can trip (sdk-python#300)."""
    sys.stdout.flush()
    os._exit(0)


def quiet_logs() -> None:
    """Keep the activities' info lines (one per turn and step) off the output."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
