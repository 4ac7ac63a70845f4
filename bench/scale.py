"""Scale benchmark: how Threadline's cost grows with conversations at once, idle conversations,
turns in one conversation and records in one log, each beside an anchor measured in the same run.

    python -m bench.scale [load] [idle] [long] [store] [cold]     (no section named: all five)

1. load (bench/_scale_load.py): throughput, p50/p95 turn latency and CPU per turn at 10, 100 and
   1,000 conversations at once, against the bare Temporal conversation (bench/_bare.py).
2. idle (bench/_scale_idle.py): a worker process's resident memory per cached idle conversation
   at 1,000 and 10,000 of them, against the bare conversation's worker; then a worker whose cache
   is smaller than the conversations it serves: evicted conversations' next turns, checked, and
   timed against cached ones.
3. long (bench/_scale_long.py): a 1,000-turn conversation through a fake OpenAI server, with and
   without a context rule: request size and latency at turns 10, 100 and 1,000, and the first turn
   after a worker restart against a warm turn.
4. store (bench/_scale_store.py): a conversation log of 1,000, 10,000 and 100,000 records: opening
   it, an incremental read of new records and an append, against functai 1.2.0's store and log.
5. cold (bench/_scale_cold.py): the first turn on a new worker and the turn of an evicted
   conversation at turn 10, 100 and 1,000, against a warm turn of the same conversation.

Each section prints its details, then one table holds every row; each curve is drawn as a PNG in
docs/charts/ (matplotlib). `BENCH_SCALE_CONVERSATIONS`, `BENCH_SCALE_IDLE`, `BENCH_SCALE_TURNS` and
`BENCH_SCALE_RECORDS`, `BENCH_SCALE_COLD` (comma-separated sizes) make a shorter run. Absolute figures depend on the
machine (2 shared cores here); the ratios are what to read.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import platform
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from bench._report import exit_now, print_table
from bench._scale_kit import Row, Section

CHARTS = Path(__file__).resolve().parent.parent / "docs" / "charts"
SECTIONS = ("load", "idle", "long", "store", "cold")


def runner(name: str) -> Callable[[], Coroutine[Any, Any, Section]]:
    """The section's `run` coroutine function (its module imported only when the section runs)."""
    run: Callable[[], Coroutine[Any, Any, Section]] = importlib.import_module(f"bench._scale_{name}").run
    return run


def header(names: list[str]) -> None:
    import temporalio

    print("Scale benchmark: how cost grows with conversations, idle conversations, turns and records")
    print(
        f"  sections {', '.join(names)}; temporalio {temporalio.__version__}, python {platform.python_version()} "
        f"on {platform.system()} {platform.machine()}, os.cpu_count() = {os.cpu_count()}"
    )


def main(names: list[str] | None = None) -> list[Row]:
    """Run the named sections (all by default), print the table, draw the charts; return the rows."""
    from bench._report import quiet_logs
    from bench._scale_charts import draw

    names = names or list(SECTIONS)
    started_at = time.perf_counter()
    quiet_logs()
    header(names)
    rows: list[Row] = []
    for i, name in enumerate(names, 1):
        print(f"\n{i}. {name}", flush=True)
        section_start = time.perf_counter()
        section = asyncio.run(runner(name)())
        print(f"  ({name}: {time.perf_counter() - section_start:.0f} s)", flush=True)
        rows += section.rows
        for path in draw(section.charts, CHARTS):
            print(f"  chart: {path.relative_to(CHARTS.parent.parent)}")
    elapsed = time.perf_counter() - started_at
    print_table(rows, f"Results ({os.cpu_count()} CPUs, {elapsed:.0f} s; ratio = threadline / anchor)")
    return rows


if __name__ == "__main__":
    unknown = [name for name in sys.argv[1:] if name not in SECTIONS]
    if unknown:
        sys.exit(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    main(sys.argv[1:])
    exit_now()
