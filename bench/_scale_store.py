"""Section 4 of bench/scale.py: a conversation log of 1,000, 10,000 and 100,000 records, against
functai 1.2.0 doing the same (bench/store.py's engines and realistic `tutor` records).

At each size, per engine (the order alternating every repetition), on its own copy of the file:
1. open: a new store object and a new log over the whole file (what a process that never saw
   the conversation does once; the page cache is warm);
2. then `REPS` times, as a turn does: another writer appends `NEW` records; the warm store and log
   read them (incremental read, timed); the store appends one record with `expect` and fsync
   (timed); the log reads that record back (untimed).
Beside the times, the bytes the process read (`rchar`, /proc/self/io) for each incremental read
and append: what does not grow with the log shows no whole-file read on the hot path.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._scale_kit import Chart, Row, Section, bytes_read, sizes
from bench.store import CONVERSATION, ENGINES, Engine, check, conversation, interleaved, quiet_gc, timed, write_jsonl
from store.backends.folder import FolderStore
from store.records import Record

RECORDS = sizes(os.environ.get("BENCH_SCALE_RECORDS", ""), (1000, 10000, 100000))
NEW = 10
REPS = 21
FLAT = 1.5
"""The largest size's time over the smallest's: at most this is flat (sub-millisecond times are noisy)."""


@dataclass(slots=True)
class Figures:
    """One engine at one size: medians in ms, and bytes read per operation."""

    open_ms: list[float] = field(default_factory=list)
    read_ms: list[float] = field(default_factory=list)
    append_ms: list[float] = field(default_factory=list)
    read_bytes: list[int] = field(default_factory=list)
    append_bytes: list[int] = field(default_factory=list)

    def median(self, name: str) -> float:
        values: list[float] = getattr(self, name)
        return statistics.median(values)


def measured(fn: Callable[[], Any]) -> tuple[float, int, Any]:
    """Milliseconds `fn()` took, the bytes read meanwhile, and what it returned."""
    before = bytes_read()
    start = time.perf_counter()
    out = fn()
    took = 1000 * (time.perf_counter() - start)
    return took, bytes_read() - before, out


def opening(folders: dict[str, Path], n: int, figures: dict[str, Figures]) -> dict[str, tuple[Any, Any]]:
    """Open each engine's store and log from scratch, a few times; keep the last ones."""
    kept: dict[str, tuple[Any, Any]] = {}
    for rep in range(3 if n > 10_000 else 5):
        for engine in interleaved(rep):
            kept.pop(engine.name, None)

            def rebuild(engine: Engine = engine) -> tuple[Any, Any]:
                store = engine.open(folders[engine.name])
                return store, engine.rebuild(store)

            seconds, (store, log) = timed(rebuild)
            check(log.n == n, f"{engine.name} opened {log.n} records of {n}")
            figures[engine.name].open_ms.append(1000 * seconds)
            kept[engine.name] = (store, log)
    return kept


def hot_path(
    folders: dict[str, Path], kept: dict[str, tuple[Any, Any]], more: Sequence[Record], figures: dict[str, Figures]
) -> None:
    """`REPS` turns' worth: another writer's records read incrementally, then one conditional append."""
    writers = {name: FolderStore(folder) for name, folder in folders.items()}
    held = {name: log.n for name, (_store, log) in kept.items()}
    with quiet_gc():
        for rep in range(REPS):
            chunk, own = list(more[rep * (NEW + 1) : rep * (NEW + 1) + NEW]), more[rep * (NEW + 1) + NEW]
            for name, writer in writers.items():
                held[name] = writer.append(CONVERSATION, chunk, expect=held[name])
            for engine in interleaved(rep):
                store, log = kept[engine.name]
                f = figures[engine.name]

                def read_new(store: Any = store, log: Any = log) -> int:
                    records = store.read(CONVERSATION, log.n)
                    log.apply(records)
                    return len(records)

                ms, nbytes, got = measured(read_new)
                check(got == NEW and log.n == held[engine.name], f"{engine.name} read {got} new records")
                f.read_ms.append(ms)
                f.read_bytes.append(nbytes)

                def append(store: Any = store, log: Any = log, own: Record = own) -> int:
                    n: int = store.append(CONVERSATION, [own], expect=log.n)
                    return n

                ms, nbytes, total = measured(append)
                f.append_ms.append(ms)
                f.append_bytes.append(nbytes)
                log.apply(store.read(CONVERSATION, log.n))
                held[engine.name] = total
                check(log.n == total, f"{engine.name} read back its own record")


def measure(root: Path, n: int) -> dict[str, Figures]:
    records = conversation((n + (NEW + 1) * REPS) // 3 + 1)
    base, more = records[:n], records[n:]
    source = root / "source" / "conversations" / f"{CONVERSATION}.jsonl"
    write_jsonl(source, base)
    folders = {e.name: root / f"{e.name}-{n}" for e in ENGINES}
    for folder in folders.values():
        (folder / "conversations").mkdir(mode=0o700, parents=True)
        shutil.copyfile(source, folder / "conversations" / source.name)
    figures = {e.name: Figures() for e in ENGINES}
    kept = opening(folders, n, figures)
    hot_path(folders, kept, more, figures)
    del kept
    for folder in [*folders.values(), source.parent.parent]:
        shutil.rmtree(folder)
    cells = "; ".join(
        f"{name}: open {f.median('open_ms'):,.1f} ms, read {NEW} new {f.median('read_ms'):.3f} ms "
        f"({statistics.median(f.read_bytes):,.0f} B read), append {f.median('append_ms'):.2f} ms "
        f"({statistics.median(f.append_bytes):,.0f} B read)"
        for name, f in figures.items()
    )
    print(f"  {n:>7,} records ({source.name}): {cells}", flush=True)
    return figures


ENGINE_NAMES = ("threadline", "functai")
MEASURES = (
    ("open_ms", "open (new store + log), {what} (anchor: functai 1.2.0)", 1),
    ("read_ms", f"incremental read of {NEW} new records, {{what}}", 3),
    ("append_ms", "conditional append of 1 record (fsync), {what}", 2),
)


def rows_for(results: dict[int, dict[str, Figures]]) -> list[Row]:
    """Each size's medians, then how the hot path's times and bytes read grow from the smallest size."""
    rows = []
    for n, figures in results.items():
        for name, measure, digits in MEASURES:
            ours, theirs = (figures[e].median(name) for e in ENGINE_NAMES)
            rows.append(Row(measure.format(what=f"{n:,} records"), ours, theirs, "ms", digits))
    return rows + (growth_rows(results) if len(results) > 1 else [])


def growth_rows(results: dict[int, dict[str, Figures]]) -> list[Row]:
    low, high = min(results), max(results)
    rows = []
    for name, label in (("read_ms", "incremental read"), ("append_ms", "append")):
        ours, theirs = (results[high][e].median(name) / results[low][e].median(name) for e in ENGINE_NAMES)
        measure = f"{label}, {high:,} / {low:,} records (anchor: functai's own)"
        rows.append(Row(measure, ours, theirs, "", 2, f"<= {FLAT:.1f} (flat)", ours <= FLAT))
    for name, label in (("read_bytes", f"incremental read of {NEW}"), ("append_bytes", "append")):
        ours, theirs = (float(statistics.median(getattr(results[high][e], name))) for e in ENGINE_NAMES)
        rows.append(Row(f"bytes read by an {label}, {high:,} records", ours, theirs, "B", 0, higher=None))
    return rows


def charts(results: dict[int, dict[str, Figures]]) -> list[Chart]:
    xs = [float(n) for n in results]
    out = []
    for name, title, log_y in (
        ("open_ms", "Opening a conversation log (new store + log)", True),
        ("read_ms", f"Incremental read of {NEW} new records", False),
        ("append_ms", "Conditional append of one record (fsync)", False),
    ):
        series = {
            engine if engine == "threadline" else "functai 1.2.0": [results[n][engine].median(name) for n in results]
            for engine in ("threadline", "functai")
        }
        out.append(
            Chart(f"scale-store-{name.removesuffix('_ms')}", title, "records in the log", "ms", xs, series, log_y=log_y)
        )
    return out


async def run() -> Section:
    """Every size in `RECORDS`, both engines; the rows and the charts."""
    results: dict[int, dict[str, Figures]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-scale-store-") as tmp:
        for n in RECORDS:
            results[n] = measure(Path(tmp), n)
    return Section(rows_for(results), charts(results))
