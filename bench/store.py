"""Record-log benchmark: Threadline's FolderStore and Log against functai 1.2.0's, side by side.

    python -m bench.store

Both engines run in the same process, interleaved (the order alternates every repetition), on
realistic records (a `tutor` conversation as functai writes it), and every figure is a median over
repetitions. Absolute times depend on the machine; the ratio Threadline/functai is what to read.

Measured:
1. Conditional appends (`expect` given, fsync, as both engines append when sending) in batches of 1
   and of 10 records, each repetition in a fresh temporary folder.
2. Rebuilding a 10,000-turn conversation's state: (a) from scratch, a new store object and a new
   log; (b) incrementally, the warmed store and log reading the 10 records another writer appended.
   The incremental case also counts the records each engine parses (json and orjson calls).
3. Memory (tracemalloc) of a store and a log holding the whole 10,000-turn conversation.
4. The PostgreSQL store beside the folder store (bench/_pgstore.py): conditional appends of 1 and
   10 records, and an incremental read of 10 new records of the 10,000-turn conversation, with
   ratio = postgres / folder.

The garbage collector is paused while a measurement runs (as `timeit` does) and run before it.
"""

from __future__ import annotations

import gc
import importlib.metadata
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
from functai import conversations as functai_conversations
from functai import stores as functai_stores

from bench import _pgstore
from store.backends.base import encode
from store.backends.folder import FolderStore
from store.backends.postgres import PostgresStore
from store.log.state import Log
from store.programs.program import TUTOR
from store.records import Record, ended_record, iso, lease_record, turn_record, uuid7

CONVERSATION = "bench-conversation"
APPEND_REPS = 7
APPENDS_PER_REP = {1: 300, 10: 150}
"""Appends per repetition for each batch size (300 and 1,500 records)."""
TURNS = 10_000
SCRATCH_REPS = 5
INCREMENTAL_REPS = 21
NEW_RECORDS = 10
START = 1_790_000_000.0  # 2026-09-21: a fixed clock, so every run writes the same sizes

# ------------------------------------------------------------------ the two engines


@dataclass(frozen=True, slots=True)
class Engine:
    """One implementation of the record log: how to open its store and rebuild a log from it."""

    name: str
    open: Callable[[Path], Any]
    """A new store object on a folder (functai 1.2.0 and Threadline use the same layout)."""
    rebuild: Callable[[Any], Any]
    """The log of the whole conversation read through a store: `apply(records)`, `n`, `turns`, `head`."""


def _threadline_log(store: FolderStore) -> Log:
    return Log(store.read(CONVERSATION))


def _functai_log(store: Any) -> Any:
    log = functai_conversations._Log()  # the reader functai's Conversation uses
    log.apply(store.read(CONVERSATION))
    return log


THREADLINE = Engine("threadline", FolderStore, _threadline_log)
FUNCTAI = Engine("functai", functai_stores.FolderStore, _functai_log)
ENGINES = (THREADLINE, FUNCTAI)


def interleaved(rep: int) -> Sequence[Engine]:
    """Both engines, the first one alternating with each repetition."""
    return ENGINES if rep % 2 == 0 else ENGINES[::-1]


# ------------------------------------------------------------------ realistic records


def _question(i: int) -> str:
    return (
        f"Question {i}: I am revising fractions for Thursday's exam. Could you explain once more why "
        f"{i % 9 + 1}/{i % 7 + 2} + 1/{i % 5 + 3} needs a common denominator, and show me the steps? Merci !"
    )


def _answer(i: int) -> str:
    a, b, c = i % 9 + 1, i % 7 + 2, i % 5 + 3
    return (
        f"Let's add {a}/{b} and 1/{c} step by step.\n\n"
        f"1. The bottoms differ ({b} and {c}), so the pieces are different sizes: we cannot add the tops yet.\n"
        f"2. Find a common denominator: {b} \u00d7 {c} = {b * c} works (a smaller common multiple also would).\n"
        f"3. Rewrite each fraction: {a}/{b} = {a * c}/{b * c} and 1/{c} = {b}/{b * c}.\n"
        f"4. Now add the tops: {a * c} + {b} = {a * c + b}, so the sum is {a * c + b}/{b * c}.\n\n"
        "Check whether it simplifies, and try the next one yourself — you are getting there!"
    )


def conversation(turns: int) -> list[Record]:
    """A `tutor` conversation as functai 1.2.0 writes it: `program`, then `turn`, `lease`, `ended` per turn.

    The `ended` records carry the lmcc functai writes (with the model's message and a request hash)
    and the compressed `saw` of a turn that continues its parent.
    """
    records: list[Record] = [TUTOR.record(at=iso(START))]
    version, signature = TUTOR.version, TUTOR.signature  # each access hashes the fields again
    parent: str | None = None
    for i in range(turns):
        now = START + 7.0 * i
        tid = uuid7()
        inputs = {"message": _question(i)}
        outputs = {"result": _answer(i)}
        message = {
            "parts": [{"text": f"<result>\n{outputs['result']}\n</result>", "type": "text"}],
            "role": "assistant",
        }
        step = {"kind": "model", "message": message, "outputs": outputs, "request": f"sha256:{i:064x}"}
        lmcc = {"inputs": inputs, "outputs": outputs, "signature": signature, "steps": [step]}
        saw: list[Record] = [] if parent is None else [{"saw_of": parent}, {"call": parent, "steps": True}]
        usage = {"input_tokens": 380 + 40 * min(i, 20), "output_tokens": 160 + i % 40}
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        records.append(
            turn_record(
                tid,
                parent=parent,
                program=version,
                inputs=inputs,
                request_id=f"req-{i:08d}",
                settings={"lm": "openai:gpt-4o-mini"},
                at=iso(now),
            )
        )
        records.append(lease_record(tid, attempt=1, now=now, owner="bench-host:4242:a1b2c3"))
        records.append(
            ended_record(
                tid,
                attempt=1,
                state="done",
                saw=saw,
                seconds=2.345678,
                usage=usage,
                outputs=outputs,
                value=outputs["result"],
                lmcc=lmcc,
                model="gpt-4o-mini-2024-07-18",
                at=iso(now + 2.4),
            )
        )
        parent = tid
    return records


def write_jsonl(path: Path, records: Sequence[Record]) -> None:
    """Write `records` numbered from 1, as one file, in the bytes both engines write."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_bytes(b"".join(encode(r, seq) for seq, r in enumerate(records, 1)))


# ------------------------------------------------------------------ measuring


def check(condition: bool, message: str) -> None:
    """Stop the run when an engine did not do what was measured (kept under `python -O`)."""
    if not condition:
        raise RuntimeError(f"benchmark check failed: {message}")


@contextmanager
def quiet_gc() -> Iterator[None]:
    """Collect, then keep the collector off while a measurement runs."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds `fn()` took (collector paused), and what it returned."""
    with quiet_gc():
        start = time.perf_counter()
        out = fn()
        return time.perf_counter() - start, out


@dataclass(slots=True)
class Row:
    """One line of the result table: a median per engine; `higher` says which way is better."""

    measure: str
    threadline: float
    functai: float
    unit: str
    higher: bool
    digits: int = 1

    @property
    def ratio(self) -> float:
        return self.threadline / self.functai if self.functai else float("nan")

    def cell(self, value: float) -> str:
        return f"{value:,.{self.digits}f} {self.unit}".strip()

    def markdown(self) -> str:
        better = "higher is better" if self.higher else "lower is better"
        cells = [f"{self.measure} ({better})", self.cell(self.threadline), self.cell(self.functai), f"{self.ratio:.2f}"]
        return "| " + " | ".join(cells) + " |"


def _spread(pairs: list[tuple[float, float]]) -> str:
    """The range of the per-repetition ratios Threadline/functai: how noisy the machine was."""
    ratios = sorted(t / f for t, f in pairs if f)
    return f"per-repetition ratios {ratios[0]:.2f} to {ratios[-1]:.2f}" if ratios else ""


# ------------------------------------------------------------------ 1. appends


def bench_appends(pool: Sequence[Record], batch: int, count: int) -> list[Row]:
    """`count` conditional appends of `batch` records per engine and repetition, in fresh folders."""
    batches = [list(pool[i * batch : (i + 1) * batch]) for i in range(count)]
    check(all(len(b) == batch for b in batches), "the record pool is too small")
    seconds: dict[str, list[float]] = {e.name: [] for e in ENGINES}
    pairs: list[tuple[float, float]] = []
    for rep in range(APPEND_REPS):
        took: dict[str, float] = {}
        for engine in interleaved(rep):
            with tempfile.TemporaryDirectory(prefix=f"bench-{engine.name}-") as folder:
                store = engine.open(Path(folder))

                def run(store: Any = store) -> int:
                    n = 0
                    for records in batches:
                        n = store.append(CONVERSATION, records, expect=n)
                    return n

                took[engine.name], n = timed(run)
                check(n == batch * count, f"{engine.name} holds {n} records")
        for name, s in took.items():
            seconds[name].append(s)
        pairs.append((count / took["threadline"], count / took["functai"]))
    rate = {name: count / statistics.median(s) for name, s in seconds.items()}
    label = "record" if batch == 1 else "records"
    rows = [
        Row(f"append {batch} {label}/batch, fsync, expect", rate["threadline"], rate["functai"], "appends/s", True, 0)
    ]
    if batch > 1:
        rows.append(
            Row(
                f"records appended in batches of {batch}",
                batch * rate["threadline"],
                batch * rate["functai"],
                "records/s",
                True,
                0,
            )
        )
    print(
        f"  batch of {batch:>2}: {count} appends x {APPEND_REPS} reps   "
        f"threadline {rate['threadline']:,.0f} appends/s ({batch * rate['threadline']:,.0f} records/s)   "
        f"functai {rate['functai']:,.0f} appends/s ({batch * rate['functai']:,.0f} records/s)   "
        f"ratio {rows[0].ratio:.2f} ({_spread(pairs)})   target >= 1.00: {'met' if rows[0].ratio >= 1.0 else 'NOT met'}"
    )
    return rows


# ------------------------------------------------------------------ 2. rebuilding a long conversation


@dataclass(slots=True)
class Warm:
    """An engine's store and log after a rebuild, and a writer (another process's store) on its folder."""

    store: Any
    log: Any
    writer: FolderStore
    held: int


def bench_scratch(folders: dict[str, Path], total: int) -> tuple[Row, dict[str, Warm]]:
    """(a) A new store object and a new log over the whole file, per engine and repetition."""
    seconds: dict[str, list[float]] = {e.name: [] for e in ENGINES}
    pairs: list[tuple[float, float]] = []
    kept: dict[str, tuple[Any, Any]] = {}
    for rep in range(SCRATCH_REPS):
        took: dict[str, float] = {}
        for engine in interleaved(rep):
            kept.pop(engine.name, None)  # let the previous repetition's objects go first

            def rebuild(engine: Engine = engine) -> tuple[Any, Any]:
                store = engine.open(folders[engine.name])
                return store, engine.rebuild(store)

            took[engine.name], (store, log) = timed(rebuild)
            check((log.n, len(log.turns)) == (total, TURNS), f"{engine.name} read {log.n} records")
            kept[engine.name] = (store, log)
        for name, s in took.items():
            seconds[name].append(s)
        pairs.append((took["threadline"], took["functai"]))
    ms = {name: 1000 * statistics.median(s) for name, s in seconds.items()}
    row = Row(f"rebuild {TURNS:,}-turn conversation from scratch", ms["threadline"], ms["functai"], "ms", False)
    print(
        f"  (a) from scratch, {total:,} records x {SCRATCH_REPS} reps   threadline {row.cell(row.threadline)}   "
        f"functai {row.cell(row.functai)}   ratio {row.ratio:.2f} ({_spread(pairs)})"
    )
    warm = {name: Warm(store, log, FolderStore(folders[name]), total) for name, (store, log) in kept.items()}
    return row, warm


def bench_incremental(warm: dict[str, Warm], more: Sequence[Record]) -> list[Row]:
    """(b) The warmed store and log read what another writer appended: `NEW_RECORDS` records each time."""
    chunks = iter([list(more[i : i + NEW_RECORDS]) for i in range(0, len(more), NEW_RECORDS)])

    def append_more() -> None:
        records = next(chunks)
        for w in warm.values():
            w.held = w.writer.append(CONVERSATION, records, expect=w.held)

    def read_new(w: Warm) -> int:
        records = w.store.read(CONVERSATION, w.log.n)
        w.log.apply(records)
        return len(records)

    seconds: dict[str, list[float]] = {e.name: [] for e in ENGINES}
    pairs: list[tuple[float, float]] = []
    # One collection for the whole loop: with two 10,000-turn logs alive, a full one takes longer than
    # everything it would precede, and a read of 10 records leaves next to no garbage.
    with quiet_gc():
        for rep in range(INCREMENTAL_REPS):
            append_more()
            took: dict[str, float] = {}
            for engine in interleaved(rep):
                w = warm[engine.name]
                start = time.perf_counter()
                got = read_new(w)
                took[engine.name] = time.perf_counter() - start
                check((got, w.log.n) == (NEW_RECORDS, w.held), f"{engine.name} read {got} records")
            for name, s in took.items():
                seconds[name].append(s)
            pairs.append((took["threadline"], took["functai"]))
    ms = {name: 1000 * statistics.median(s) for name, s in seconds.items()}
    time_row = Row(f"incremental read of {NEW_RECORDS} new records", ms["threadline"], ms["functai"], "ms", False, 3)

    # Once more, untimed, counting the records each engine parses to bring its log up to date.
    append_more()
    parsed: dict[str, int] = {}
    for engine in ENGINES:
        # functai parses with json; Threadline with orjson (json for what orjson reads otherwise).
        with (
            mock.patch("json.loads", wraps=json.loads) as loads,
            mock.patch("orjson.loads", wraps=orjson.loads) as fast,
        ):
            read_new(warm[engine.name])
        parsed[engine.name] = loads.call_count + fast.call_count
    held = warm["threadline"].held
    count_row = Row(
        f"records parsed by an incremental read ({held:,} held)",
        parsed["threadline"],
        parsed["functai"],
        "",
        False,
        0,
    )
    linear = all(p == NEW_RECORDS for p in parsed.values())
    print(
        f"  (b) incremental, {NEW_RECORDS} new records x {INCREMENTAL_REPS} reps   "
        f"threadline {time_row.cell(time_row.threadline)}   functai {time_row.cell(time_row.functai)}   "
        f"ratio {time_row.ratio:.2f} ({_spread(pairs)})"
    )
    print(
        f"      records parsed (json and orjson calls) for {NEW_RECORDS} new of {held:,}: "
        f"threadline {parsed['threadline']}, functai {parsed['functai']}   "
        f"target O(new records): {'met' if parsed['threadline'] == NEW_RECORDS else 'NOT met'}"
        f"{'' if linear else ' (functai parses more)'}"
    )
    return [time_row, count_row]


# ------------------------------------------------------------------ 3. memory


def bench_memory(folders: dict[str, Path]) -> list[Row]:
    """Peak and retained traced memory of a new store and log over the whole conversation."""
    peak: dict[str, float] = {}
    held: dict[str, float] = {}
    for engine in ENGINES:
        gc.collect()
        tracemalloc.start()
        try:
            store = engine.open(folders[engine.name])
            log = engine.rebuild(store)
            gc.collect()
            current, top = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        check(len(log.turns) >= TURNS, f"{engine.name} lost turns")
        del store, log
        peak[engine.name], held[engine.name] = top / 2**20, current / 2**20
    rows = [
        Row(f"peak memory, rebuilding {TURNS:,} turns", peak["threadline"], peak["functai"], "MiB", False),
        Row("memory held by store + log afterwards", held["threadline"], held["functai"], "MiB", False),
    ]
    for row in rows:
        print(
            f"  {row.measure}: threadline {row.cell(row.threadline)}   "
            f"functai {row.cell(row.functai)}   ratio {row.ratio:.2f}"
        )
    return rows


# ------------------------------------------------------------------ the run


def header() -> None:
    functai_version = importlib.metadata.version("functai")
    print("Record-log benchmark (format 1, FolderStore)")
    print("  threadline: store.backends.folder.FolderStore + store.log.state.Log")
    print(f"  functai {functai_version}: functai.stores.FolderStore + functai.conversations._Log")
    print(
        f"  python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"os.cpu_count() = {os.cpu_count()}, temp folder {tempfile.gettempdir()}"
    )
    print("  ratio = threadline / functai; medians over interleaved repetitions; collector paused while timing")


def main() -> list[Row]:
    """Run every measurement, print the details and the table; return the table's rows."""
    started = time.perf_counter()
    header()
    rows: list[Row] = []

    print("\n1. Conditional appends with fsync (fresh folder each repetition)")
    pool = conversation(max(b * n for b, n in APPENDS_PER_REP.items()) // 3 + 1)[1:]
    sizes = [len(encode(r, 1)) for r in pool[:300]]
    print(f"  records of {min(sizes)} to {max(sizes)} bytes, {statistics.mean(sizes):.0f} on average")
    for batch, count in APPENDS_PER_REP.items():
        rows += bench_appends(pool, batch, count)

    print(f"\n2. Rebuilding the state of a {TURNS:,}-turn conversation")
    records = conversation(TURNS + (INCREMENTAL_REPS + 1) * NEW_RECORDS // 3 + 1)
    base, more = records[: 1 + 3 * TURNS], records[1 + 3 * TURNS :]
    with tempfile.TemporaryDirectory(prefix="bench-rebuild-") as tmp:
        source = Path(tmp) / "source" / "conversations" / f"{CONVERSATION}.jsonl"
        write_jsonl(source, base)
        folders = {e.name: Path(tmp) / e.name for e in ENGINES}
        for folder in folders.values():
            (folder / "conversations").mkdir(mode=0o700, parents=True)
            shutil.copyfile(source, folder / "conversations" / source.name)
        print(f"  one file: {len(base):,} records, {source.stat().st_size / 2**20:.1f} MiB (a copy per engine)")
        for engine in ENGINES:  # warm the page cache, and check both engines read the same log
            log = engine.rebuild(engine.open(folders[engine.name]))
            check((log.n, len(log.turns), log.head) == (len(base), TURNS, base[-1]["turn"]), engine.name)
        row, warm = bench_scratch(folders, len(base))
        rows.append(row)
        rows += bench_incremental(warm, more)
        del warm
        print("\n3. Memory (tracemalloc)")
        rows += bench_memory(folders)

    pairs = bench_postgres(pool, base, more)

    elapsed = time.perf_counter() - started
    print(f"\nResults ({os.cpu_count()} CPUs, {elapsed:.1f} s; ratio = threadline / functai)\n")
    print("| measure | threadline | functai | ratio |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print(row.markdown())
    appends_ok = all(r.ratio >= 1.0 for r in rows if r.unit == "appends/s")
    parsed = next(r for r in rows if r.measure.startswith("records parsed"))
    print(
        f"\nTargets: appends at least as fast as functai's (ratio >= 1.00 in appends/s): "
        f"{'met' if appends_ok else 'NOT met'}; incremental reads O(new records) "
        f"({parsed.threadline:.0f} parsed for {NEW_RECORDS} new): "
        f"{'met' if parsed.threadline == NEW_RECORDS else 'NOT met'}"
    )
    print("\nThe PostgreSQL store beside the folder store (ratio = postgres / folder)")
    _pgstore.table(pairs)
    return rows


def bench_postgres(pool: Sequence[Record], base: Sequence[Record], more: Sequence[Record]) -> list[_pgstore.Pair]:
    """4. PostgresStore against FolderStore: appends, and an incremental read of the long conversation."""
    print("\n4. The PostgreSQL store beside the folder store (PostgreSQL 15, fsync at every commit)")
    with _pgstore.database() as (url, schema), PostgresStore(url, schema=schema) as pg:
        pairs = [
            _pgstore.bench_appends(pg, pool, batch, count, APPEND_REPS, timed)
            for batch, count in APPENDS_PER_REP.items()
        ]
        pairs.append(_pgstore.bench_incremental(pg, base, more, INCREMENTAL_REPS, NEW_RECORDS))
    return pairs


if __name__ == "__main__":
    main()
    sys.exit(0)
