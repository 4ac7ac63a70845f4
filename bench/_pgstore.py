"""Section 4 of bench/store.py: the PostgreSQL store beside the folder store, in the same run.

The folder store (Threadline's `FolderStore`) is the anchor; ratio = postgres / folder. PostgreSQL
runs with its default durability (fsync at every commit), as the folder store fsyncs every append:
a server of the run's own from /usr/lib/postgresql/15/bin in a temporary folder, or the one named
by `THREADLINE_BENCH_POSTGRES` (a URL; the benchmark works in a schema of its own there).

Measured, interleaved and as medians like the rest of the file:
1. Conditional appends (`expect` given) in batches of 1 and of 10, a new conversation each repetition.
2. An incremental read: a warmed store object reading the 10 records another writer appended to the
   10,000-turn conversation.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from store.backends.folder import FolderStore
from store.backends.postgres import PostgresStore
from store.backends.transfer import copy_conversations
from store.records import Record
from tests.support.pg_kit import postgres_server

CONVERSATION = "bench-conversation"
NAMES = ("postgres", "folder")


@dataclass(slots=True)
class Pair:
    """One line of the table: a median for PostgreSQL and for the folder store."""

    measure: str
    postgres: float
    folder: float
    unit: str
    higher: bool
    digits: int = 1

    @property
    def ratio(self) -> float:
        return self.postgres / self.folder if self.folder else float("nan")

    def cell(self, value: float) -> str:
        return f"{value:,.{self.digits}f} {self.unit}".strip()

    def markdown(self) -> str:
        better = "higher is better" if self.higher else "lower is better"
        cells = [f"{self.measure} ({better})", self.cell(self.postgres), self.cell(self.folder), f"{self.ratio:.2f}"]
        return "| " + " | ".join(cells) + " |"


@contextmanager
def database() -> Iterator[tuple[str, str]]:
    """A URL and a schema of this run's own: on `THREADLINE_BENCH_POSTGRES`, else on a new durable server."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    given = os.environ.get("THREADLINE_BENCH_POSTGRES")
    if given:
        yield given, schema
        return
    with postgres_server(durable=True) as server:
        yield server.create_database("bench"), schema


def _interleaved(rep: int) -> Sequence[str]:
    return NAMES if rep % 2 == 0 else NAMES[::-1]


def _spread(pairs: list[tuple[float, float]]) -> str:
    ratios = sorted(p / f for p, f in pairs if f)
    return f"per-repetition ratios {ratios[0]:.2f} to {ratios[-1]:.2f}" if ratios else ""


def bench_appends(
    pg: PostgresStore, pool: Sequence[Record], batch: int, count: int, reps: int, timed: Callable[..., Any]
) -> Pair:
    """`count` conditional appends of `batch` records per store and repetition, each time a new conversation."""
    batches = [list(pool[i * batch : (i + 1) * batch]) for i in range(count)]
    seconds: dict[str, list[float]] = {name: [] for name in NAMES}
    for rep in range(reps):
        with tempfile.TemporaryDirectory(prefix="bench-folder-") as folder:
            stores: dict[str, Any] = {"postgres": pg, "folder": FolderStore(Path(folder))}
            conversation = f"appends-{batch}-{rep}"
            for name in _interleaved(rep):

                def run(store: Any = stores[name], conversation: str = conversation) -> int:
                    n = 0
                    for records in batches:
                        n = store.append(conversation, records, expect=n)
                    return n

                took, n = timed(run)
                if n != batch * count:
                    raise RuntimeError(f"benchmark check failed: {name} holds {n} records")
                seconds[name].append(took)
    rate = {name: count / statistics.median(s) for name, s in seconds.items()}
    label = "record" if batch == 1 else "records"
    pair = Pair(f"append {batch} {label}/batch, expect", rate["postgres"], rate["folder"], "appends/s", True, 0)
    spread = _spread([(count / p, count / f) for p, f in zip(seconds["postgres"], seconds["folder"], strict=True)])
    print(
        f"  batch of {batch:>2}: {count} appends x {reps} reps   postgres {pair.cell(pair.postgres)} "
        f"({batch * rate['postgres']:,.0f} records/s)   folder {pair.cell(pair.folder)} "
        f"({batch * rate['folder']:,.0f} records/s)   ratio {pair.ratio:.2f} ({spread})"
    )
    return pair


def bench_incremental(pg: PostgresStore, base: Sequence[Record], more: Sequence[Record], reps: int, new: int) -> Pair:
    """A warmed store object reads the `new` records another writer appended, per store and repetition."""
    with tempfile.TemporaryDirectory(prefix="bench-folder-") as tmp:
        folder, writer = FolderStore(tmp), FolderStore(tmp)
        writer.append(CONVERSATION, list(base))
        copy_conversations(folder, pg, CONVERSATION)
        held = len(base)
        stores: dict[str, Any] = {"postgres": pg, "folder": folder}
        for store in stores.values():
            store.read(CONVERSATION)  # warm: the folder store's cache, PostgreSQL's buffers
        seconds: dict[str, list[float]] = {name: [] for name in NAMES}
        for rep in range(reps):
            records = list(more[rep * new : (rep + 1) * new])
            writer.append(CONVERSATION, records, expect=held)
            pg.append(CONVERSATION, records, expect=held)
            for name in _interleaved(rep):
                start = time.perf_counter()
                got = stores[name].read(CONVERSATION, held)
                seconds[name].append(time.perf_counter() - start)
                if len(got) != new:
                    raise RuntimeError(f"benchmark check failed: {name} read {len(got)} records")
            held += new
    ms = {name: 1000 * statistics.median(s) for name, s in seconds.items()}
    pair = Pair(f"incremental read of {new} new records ({held:,} held)", ms["postgres"], ms["folder"], "ms", False, 3)
    spread = _spread(list(zip(seconds["postgres"], seconds["folder"], strict=True)))
    print(
        f"  incremental, {new} new records x {reps} reps   postgres {pair.cell(pair.postgres)}   "
        f"folder {pair.cell(pair.folder)}   ratio {pair.ratio:.2f} ({spread})"
    )
    return pair


def table(pairs: Sequence[Pair]) -> None:
    """Print the section's table, in the style of the file's main table."""
    print("\n| measure | postgres | folder | ratio |")
    print("|---|---:|---:|---:|")
    for pair in pairs:
        print(pair.markdown())
