"""Section 1 of bench/scale.py: throughput, turn latency and CPU per turn as conversations at once grow.

At each size in `SIZES` that many conversations each take `TURNS_EACH` turns one after another,
all at once, per system: Threadline (`await chat(...)`, the offline model) and the bare Temporal
conversation of bench/_bare.py, both with in-process workers on one dev server, each caching twice
the largest burst. The systems alternate which goes first; a size is repeated `reps(size)` times.
Latency is each turn's, as its conversation's caller sees it (under load it is mostly queueing:
Little's law). CPU per turn is this process's (client and both workers) and the dev server's,
read from /proc around each burst, the server's trailing work included (as bench/turns.py does).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import WorkflowHandle

from bench._scale_kit import Chart, Row, Section, sizes
from bench.turns import Bench, check, children_cpu, pct, question, settle, started
from threadline.client import Conversation
from threadline.delivery import Queued

SIZES = sizes(os.environ.get("BENCH_SCALE_CONVERSATIONS", ""), (10, 100, 1000))
TURNS_EACH = 3
FLAT = 1.2
"""CPU per turn at the largest size over the smallest: at most this is flat."""
SYSTEMS = ("threadline", "anchor")


def reps(size: int) -> int:
    """Repetitions of a size: about 600 turns per system, 1 to 5 bursts."""
    return max(1, min(5, 600 // (size * TURNS_EACH)))


@dataclass(slots=True)
class Load:
    """One system at one size: every burst's rate and CPU, and every turn's latency."""

    rates: list[float] = field(default_factory=list)
    ours_ms: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    again: int = 0
    """Activity attempts after the first (the server timed one out and ran it again), over every burst."""
    queued: int = 0
    """Sends answered `Queued` (kept, no worker took them within the client's patience), over every burst."""

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def cpu_ms(self) -> float:
        return statistics.median(self.ours_ms) + statistics.median(self.server_ms)


def patient(chat: Conversation, load: Load) -> Callable[[str], Awaitable[Any]]:
    """`chat(...)` as a caller told `Queued` goes on: the send is kept, so it asks for its outcome (as
    the error says) until a worker has taken it; each `Queued` is counted in `load`."""

    async def send(text: str) -> Any:
        try:
            return await chat(text)
        except Queued as kept:
            load.queued += 1
            request_id = kept.request_id
        while True:
            try:
                return (await chat.outcome(request_id)).result
            except Queued:
                load.queued += 1

    return send


async def burst(predicts: list[Callable[[str], Awaitable[Any]]], load: Load) -> str:
    """Every conversation's turns at once; the rate, CPU and latencies go to `load`."""

    async def one(predict: Callable[[str], Awaitable[Any]]) -> None:
        for k in range(TURNS_EACH):
            start = time.perf_counter()
            await predict(question(k))
            load.latencies_ms.append(1000 * (time.perf_counter() - start))

    total = len(predicts) * TURNS_EACH
    await settle()
    ours, server = time.process_time(), children_cpu()
    start = time.perf_counter()
    await asyncio.gather(*(one(predict) for predict in predicts))
    took = time.perf_counter() - start
    await settle()  # the server's work that trails the turns (visibility) is counted too
    load.rates.append(total / took)
    load.ours_ms.append(1000 * (time.process_time() - ours) / total)
    load.server_ms.append(1000 * (children_cpu() - server) / total)
    return (
        f"{total} turns in {took:.1f} s = {total / took:.1f} turns/s, CPU per turn {load.ours_ms[-1]:.1f} ms "
        f"(client + workers) + {load.server_ms[-1]:.1f} ms (dev server)"
    )


async def measure(b: Bench, size: int) -> dict[str, Load]:
    loads = {name: Load() for name in SYSTEMS}
    for rep in range(reps(size)):
        for name in SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]:
            names = [f"scale{size}-{rep}-{i}" for i in range(size)]
            predicts: list[Callable[[str], Awaitable[Any]]]
            if name == "threadline":
                chats = [b.threadline(n) for n in names]
                predicts, handles = [patient(c, loads[name]) for c in chats], [c.handle for c in chats]
            else:
                bares = [b.bare(n) for n in names]
                predicts, handles = [c.predict for c in bares], [b.client.get_workflow_handle(c.id) for c in bares]
            line = await burst(predicts, loads[name])
            if name == "threadline":
                ids = [chat.id for chat in chats]
                ended = await asyncio.to_thread(ended_once, b.settings.store_folder("default"), ids)
                turns = len(ids) * TURNS_EACH
                check(ended == turns, f"every turn ended exactly once ({ended} of {turns})")
            again = await runs_again(handles)
            loads[name].again += again.total()
            reasons = f" ({', '.join(f'{k} {n}' for k, n in again.most_common())})" if again else ""
            queued = f"; {loads[name].queued} sends answered Queued so far" if loads[name].queued else ""
            runs = f"{again.total()} activity runs again{reasons}{queued}"
            print(f"  {size:>5,} conversations, rep {rep + 1} {name}: {line}; {runs}", flush=True)
    return loads


def ended_records(store: Path, ids: Sequence[str] | None = None) -> Iterator[dict[str, Any]]:
    """The `ended` records of these conversations' record logs (every conversation's with no `ids`)."""
    folder = store / "conversations"
    paths = (folder / f"{cid}.jsonl" for cid in ids) if ids is not None else folder.glob("*.jsonl")
    for path in paths:
        for line in path.read_bytes().splitlines():
            if b'"kind":"ended"' in line:
                yield json.loads(line)


def ended_once(store: Path, ids: Sequence[str]) -> int:
    """Turns of these conversations with exactly one `ended` record (a turn with two would not count)."""
    ends = Counter(record["turn"] for record in ended_records(store, ids))
    return sum(count == 1 for count in ends.values())


async def runs_again(handles: Sequence[WorkflowHandle[Any, Any]]) -> Counter[str]:
    """Activity attempts after the first in these workflows' histories, by activity and why the attempt
    before was given up (read after the burst, outside the timed part): each is an attempt the server
    gave up on (its worker too slow to heartbeat or to answer in time, on an overloaded machine) and
    ran again."""
    gate = asyncio.Semaphore(20)

    async def count(handle: WorkflowHandle[Any, Any]) -> Counter[str]:
        async with gate:
            history = await handle.fetch_history()
        kinds = {
            e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
        }
        again: Counter[str] = Counter()
        for e in history.events:
            if e.HasField("activity_task_started_event_attributes"):
                attributes = e.activity_task_started_event_attributes
                again[f"{kinds.get(attributes.scheduled_event_id, '?')}: {why(attributes.last_failure)}"] += (
                    attributes.attempt - 1
                )
        return +again

    return sum((await asyncio.gather(*(count(handle) for handle in handles))), Counter())


def why(failure: Any) -> str:
    """What ended an attempt the server gave up on: a timeout's kind, else the failure's message."""
    if failure.HasField("timeout_failure_info"):
        return TimeoutType.Name(failure.timeout_failure_info.timeout_type).removeprefix("TIMEOUT_TYPE_").lower()
    return failure.message or "failed"


def rows_for(size: int, loads: dict[str, Load]) -> list[Row]:
    t, a = loads["threadline"], loads["anchor"]
    what = f"{size:,} conversations x {TURNS_EACH} turns"
    return [
        Row(f"throughput, {what} (anchor: bare Temporal)", t.rate, a.rate, "turns/s", higher=True),
        Row(f"turn latency p50, {what}", pct(t.latencies_ms, 0.5), pct(a.latencies_ms, 0.5), "ms", 0),
        Row(f"turn latency p95, {what}", pct(t.latencies_ms, 0.95), pct(a.latencies_ms, 0.95), "ms", 0),
        Row(f"CPU per turn, {what} (client + workers + dev server)", t.cpu_ms, a.cpu_ms, "ms"),
        Row(
            f"activity runs retried after a timeout, {what}, all reps",
            float(t.again),
            float(a.again),
            "",
            0,
            higher=None,
        ),
    ]


def flatness(results: dict[int, dict[str, Load]]) -> Row:
    low, high = min(results), max(results)
    growth = {name: results[high][name].cpu_ms / results[low][name].cpu_ms for name in SYSTEMS}
    ok = growth["threadline"] <= FLAT
    measure = f"CPU per turn, {high:,} / {low:,} conversations (anchor: the bare conversation's own)"
    return Row(measure, growth["threadline"], growth["anchor"], "", 2, f"<= {FLAT:.2f} (flat)", ok)


def charts(results: dict[int, dict[str, Load]]) -> list[Chart]:
    xs = [float(n) for n in results]

    def series(get: Callable[[Load], float], part: Callable[[Load], float] | None = None) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for name, label in (("threadline", "threadline"), ("anchor", "bare Temporal")):
            out[label] = [get(results[n][name]) for n in results]
            if part is not None:
                out[f"{label}, client + workers"] = [part(results[n][name]) for n in results]
        return out

    def chart(name: str, title: str, unit: str, values: dict[str, list[float]], log_y: bool = False) -> Chart:
        return Chart(name, title, "conversations at once", unit, xs, values, log_y=log_y)

    return [
        chart("scale-throughput", f"Throughput, {TURNS_EACH} turns each", "turns/s", series(lambda x: x.rate)),
        chart(
            "scale-latency",
            "Turn latency p95 (Little's law: it grows with the queue)",
            "ms",
            series(lambda x: pct(x.latencies_ms, 0.95)),
            log_y=True,
        ),
        chart(
            "scale-cpu",
            "CPU per turn: all, and the client + workers' part",
            "ms",
            series(lambda x: x.cpu_ms, lambda x: statistics.median(x.ours_ms)),
        ),
    ]


async def run() -> Section:
    """Every size in `SIZES`, both systems; the rows and the charts."""
    results: dict[int, dict[str, Load]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-scale-load-") as tmp:
        # each worker caches every conversation of the largest burst and more (Temporal's default
        # of 1,000 would make the largest burst evict its own conversations)
        async with started(Path(tmp), cache=2 * max(SIZES)) as b:
            for size in SIZES:
                results[size] = await measure(b, size)
    section = Section(charts=charts(results))
    for size, loads in results.items():
        section.rows += rows_for(size, loads)
    if len(results) > 1:
        section.rows.append(flatness(results))
    return section
