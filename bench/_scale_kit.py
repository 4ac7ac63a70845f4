"""What the sections of bench/scale.py share: the table's row, the charts' data, sizes from the
environment, and a process's memory and CPU read from /proc (Linux)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

QUIET_S = 1.5
"""Seconds past `THREADLINE_ATTRIBUTES_EVERY_S` after a conversation's last turn: by then the timer that
writes its search attributes after a burst of turns has fired (it wakes the workflow, so a conversation
evicted or on a restarted worker is replayed then, off any turn's path)."""


def sizes(raw: str, default: Sequence[int]) -> tuple[int, ...]:
    """Comma-separated whole numbers (a `BENCH_SCALE_*` setting such as `1000,3000`), else `default`."""
    return tuple(int(n) for n in raw.split(",") if n.strip()) if raw.strip() else tuple(default)


@dataclass(slots=True)
class Row:
    """One line of the table; the measure names what the anchor is."""

    measure: str
    threadline: float | str
    anchor: float | str | None
    unit: str = ""
    digits: int = 1
    target: str = "-"
    met: bool | None = None
    higher: bool | None = False
    """True: higher is better; False: lower is; None: neither (a count, a check)."""

    @property
    def ratio(self) -> float | None:
        if not isinstance(self.threadline, float | int) or not isinstance(self.anchor, float | int) or not self.anchor:
            return None
        return self.threadline / self.anchor

    def cell(self, value: float | str | None) -> str:
        if value is None:
            return "-"
        return value if isinstance(value, str) else f"{value:,.{self.digits}f} {self.unit}".strip()

    def markdown(self) -> str:
        better = {True: " (higher is better)", False: " (lower is better)", None: ""}[self.higher]
        ratio = "-" if self.ratio is None else f"{self.ratio:.2f}"
        met = "-" if self.met is None else ("met" if self.met else "**NOT met**")
        cells = [f"{self.measure}{better}", self.cell(self.threadline), self.cell(self.anchor), ratio, self.target, met]
        return "| " + " | ".join(cells) + " |"


@dataclass(slots=True)
class Chart:
    """One curve (or a few sharing axes) to draw as `docs/charts/<name>.png`."""

    name: str
    title: str
    x_label: str
    y_label: str
    xs: list[float]
    series: dict[str, list[float]]
    log_x: bool = True
    log_y: bool = False
    limit: tuple[str, float] | None = None
    """A target drawn as a horizontal line: its label and value."""


@dataclass(slots=True)
class Section:
    """What a section measured: its rows and its charts."""

    rows: list[Row] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)


def status_kb(pid: int, name: str) -> int:
    """A `/proc/<pid>/status` figure in KB (`VmRSS`: resident now; `VmHWM`: its peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {name}")


def cpu_seconds(pid: int) -> float:
    """The user and system CPU time process `pid` used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bytes_read() -> int:
    """The bytes this process asked `read` and `pread` for so far (`rchar`, page cache or not)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no rchar")


CONCURRENCY = 50
"""Conversations started at once while idle ones are added."""


def expected(text: str, earlier: int) -> str:
    """What the offline model answers to `text` after being shown `earlier` turns."""
    return f"(offline) You said: {text.strip()[:200].rstrip('.')}. I was shown {earlier} earlier turn(s)."


async def add(make: Callable[[int], Awaitable[None]], first: int, upto: int) -> float:
    """Conversations `first` to `upto - 1`, `CONCURRENCY` at a time; the seconds it took."""
    gate = asyncio.Semaphore(CONCURRENCY)
    done = 0

    async def one(i: int) -> None:
        nonlocal done
        async with gate:
            await make(i)
        done += 1
        if done % 2000 == 0:
            print(f"    {first + done:,} conversations", flush=True)

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(first, upto)))
    return time.perf_counter() - start


def worker_env(cache: int) -> dict[str, str]:
    """A worker process's environment that caches `cache` conversations."""
    return {"THREADLINE_WORKFLOW_CACHE": str(cache)}
