"""Section 5 of bench/scale.py: cold turns against warm ones, at turn 10, 100 and 1,000.

A worker process (the offline model) serves one conversation per size in `SIZES`, each taking
`size - 1` turns (all at once, each one after another), so its next turn is turn 10, 100 or
1,000: with the default `THREADLINE_TURNS_PER_RUN` the current workflow run then holds the most
turns it ever holds, and a cold turn replays the most. The worker is stopped and a new one started
whose cache holds one conversation (`THREADLINE_WORKFLOW_CACHE=1`); after one turn of a new
conversation (the new process's own first task and imports) and a second turn of it once another
new conversation evicted it (the process's first replay, whose imports and caches every later
replay shares; both printed):

1. new worker: each conversation's first turn on it (a filler conversation's turn just before, so
   the cache holds another one), replaying the conversation's current run; the worker read the
   logs of the conversations appended to last as it started (`THREADLINE_WARM_LOGS`);
2. evicted, `ROUNDS` times: a filler turn (it evicts the conversation), the conversation's turn
   (cold: evicted, replayed), then its next turn at once (warm: still cached). The warm turns'
   median is the anchor of both;
3. new workers again, `NEW_WORKERS` times in all, every other one with its logs not warmed
   (`THREADLINE_WARM_LOGS=0`): each conversation's first turn on it as in 1. The median of each
   kind is shown; the unwarmed one with no target (what a conversation the warming did not reach
   costs). The anchor of both is the median of the turns right after each new worker's first (warm:
   cached), taken on the same workers: the machine's speed drifts over a minute.

The conversations write their search attributes as each turn ends (the default
`THREADLINE_ATTRIBUTES_EVERY_S`, 0): no timer replays a conversation between its turns, and a cold
turn replays the upsert events a user's conversation holds. Reported with each: the turns and
history events of the run the cold turn replayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from bench._scale_kit import Chart, Row, Section, sizes, worker_env
from bench._scale_long import current_run
from bench._server import start_dev_server
from bench.turns import check, question, settings_for
from core.settings import Settings
from tests.support.processes import WorkerProcess
from threadline.client import Conversation, Threadline, connect

SIZES = sizes(os.environ.get("BENCH_SCALE_COLD", ""), (10, 100, 1000))
ROUNDS = 5
NEW_WORKERS = 3
SETTLE_S = 0.5
"""Waited before a worker stops: a continue-as-new after the last turn sends the next run's first
workflow task to a worker, and one stopped while that task is on its way loses it (the SDK interrupts
its polls); the conversation's next turn then waits out the 10 s workflow task timeout
(docs/operations.md, *Lifecycle*), which is not what this section measures."""
"""New workers of each kind (warmed, not warmed): a new worker's first turn is one sample per worker."""
TARGET = 1.5


@dataclass(slots=True)
class Cold:
    """One conversation's cold and warm turns (ms), and the run each cold turn replayed."""

    chat: Conversation
    new_workers: list[float] = field(default_factory=list)
    unwarmed: list[float] = field(default_factory=list)
    warm_after_new: list[float] = field(default_factory=list)
    """The turn after each new worker's first one (cached): the anchor of both new-worker rows, taken
    on the same worker minutes after the evicted rounds' anchor, on a machine whose speed drifts."""
    evicted: list[float] = field(default_factory=list)
    warm: list[float] = field(default_factory=list)
    replayed: list[tuple[int, int]] = field(default_factory=list)
    """(turns, events) of the current run before each cold turn."""

    @property
    def warm_ms(self) -> float:
        return statistics.median(self.warm)

    @property
    def evicted_ms(self) -> float:
        return statistics.median(self.evicted)

    @property
    def warm_new_ms(self) -> float:
        return statistics.median(self.warm_after_new)

    @property
    def new_worker_ms(self) -> float:
        return statistics.median(self.new_workers)

    @property
    def unwarmed_ms(self) -> float:
        return statistics.median(self.unwarmed)


async def timed(chat: Conversation, text: str) -> float:
    start = time.perf_counter()
    await chat.predict(text)
    return 1000 * (time.perf_counter() - start)


async def build(tl: Threadline, tag: str) -> dict[int, Cold]:
    """One conversation per size, `size - 1` turns each, all at once."""
    colds = {size: Cold(tl.conversation("tutor", id=f"cold-{tag}-{size}")) for size in SIZES}

    async def fill(cold: Cold, turns: int) -> None:
        for i in range(turns):
            await cold.chat.predict(question(i))

    start = time.perf_counter()
    await asyncio.gather(*(fill(cold, size - 1) for size, cold in colds.items()))
    print(f"  {', '.join(f'{s - 1:,}' for s in SIZES)} turns taken in {time.perf_counter() - start:.0f} s", flush=True)
    return colds


async def measure(tl: Threadline, colds: dict[int, Cold], tag: str) -> None:
    """On a new worker caching one conversation: first turns, then evicted and warm ones."""
    filler = tl.conversation("tutor", id=f"cold-{tag}-filler")
    first = await timed(filler, "Hello")
    await tl.conversation("tutor", id=f"cold-{tag}-spare").predict("Hello")  # evicts the filler
    replay = await timed(filler, "Hello again")
    print(
        f"  new worker: a new conversation's first turn {first:.0f} ms; the process's first replay "
        f"(the filler's second turn, evicted) {replay:.0f} ms",
        flush=True,
    )
    await first_turns(filler, colds, warmed=True)
    for r in range(ROUNDS):
        order = list(colds.items()) if r % 2 == 0 else list(colds.items())[::-1]
        for size, cold in order:
            await filler.predict(question(size))
            cold.replayed.append(await current_run(cold.chat))
            cold.evicted.append(await timed(cold.chat, question(size + 1)))
            cold.warm.append(await timed(cold.chat, question(size + 2)))
    for size, cold in colds.items():
        runs = ", ".join(f"{t}/{e:,}" for t, e in cold.replayed)
        print(
            f"  turn {size:,}: new worker {cold.new_workers[0]:.0f} ms, evicted {cold.evicted_ms:.0f} ms "
            f"(median of {ROUNDS}), warm {cold.warm_ms:.0f} ms; replayed runs (turns/events): {runs}",
            flush=True,
        )


async def first_turns(filler: Conversation, colds: dict[int, Cold], *, warmed: bool) -> None:
    """On a new worker (`warmed`: its logs warmed as it started): each conversation's first turn, a
    filler turn before it so the cache holds another one, and the warm turn right after it."""
    for size, cold in colds.items():
        await filler.predict(question(size))
        cold.replayed.append(await current_run(cold.chat))
        took = await timed(cold.chat, question(size))
        (cold.new_workers if warmed else cold.unwarmed).append(took)
        cold.warm_after_new.append(await timed(cold.chat, question(size + 1)))
        kind = "new worker" if warmed else "new worker, its logs not warmed,"
        print(f"  turn {size:,}: {kind} {took:.0f} ms, the next (warm) {cold.warm_after_new[-1]:.0f} ms", flush=True)


def rows_for(colds: dict[int, Cold]) -> list[Row]:
    rows = []
    for size, cold in colds.items():
        turns, events = max(cold.replayed)
        kinds = (
            (f"new worker, median of {NEW_WORKERS}", cold.new_worker_ms, cold.warm_new_ms),
            ("evicted", cold.evicted_ms, cold.warm_ms),
        )
        for kind, ms, warm in kinds:
            measure = (
                f"cold turn ({kind}) at turn {size:,}, replaying up to {turns} turns / {events:,} events "
                "(anchor: a warm turn)"
            )
            rows.append(Row(measure, ms, warm, "ms", 0, f"<= {TARGET}x", ms <= TARGET * warm))
        measure = (
            f"cold turn (new worker, its logs not warmed, median of {NEW_WORKERS}) at turn {size:,} "
            "(anchor: a warm turn)"
        )
        rows.append(Row(measure, cold.unwarmed_ms, cold.warm_new_ms, "ms", 0))
    return rows


def chart(colds: dict[int, Cold]) -> Chart:
    xs = [float(s) for s in colds]
    return Chart(
        "scale-cold",
        "Cold turns (new worker, evicted) against warm ones",
        "turn of the conversation",
        "ms",
        xs,
        {
            "threadline, new worker": [c.new_worker_ms for c in colds.values()],
            "threadline, new worker, logs not warmed": [c.unwarmed_ms for c in colds.values()],
            "threadline, evicted": [c.evicted_ms for c in colds.values()],
            "threadline, warm (evicted rounds)": [c.warm_ms for c in colds.values()],
            "threadline, warm (new workers)": [c.warm_new_ms for c in colds.values()],
        },
    )


@contextlib.asynccontextmanager
async def running(settings: Settings, log: Path, variables: dict[str, str] | None = None) -> AsyncIterator[None]:
    """A worker process, ready; stopped after `SETTLE_S` however the block ends."""
    worker = WorkerProcess(settings, log, env=variables)
    try:
        await asyncio.to_thread(worker.wait_ready, 90.0)
        yield
    finally:
        await asyncio.sleep(SETTLE_S)
        await asyncio.to_thread(worker.stop)


async def run() -> Section:
    """Build the conversations on one worker, measure on a new one caching one conversation."""
    with tempfile.TemporaryDirectory(prefix="bench-scale-cold-") as tmp:
        root = Path(tmp)
        async with await start_dev_server(root / "payloads") as env:
            settings: Settings = dataclasses.replace(
                settings_for(env, root / "data", f"bench-scale-cold-{uuid.uuid4().hex[:8]}"),
                payloads=root / "payloads",
            )
            if "THREADLINE_TURNS_PER_RUN" in os.environ:
                settings = dataclasses.replace(settings, turns_per_run=int(os.environ["THREADLINE_TURNS_PER_RUN"]))
            print(f"  {settings.turns_per_run} turns per workflow run", flush=True)
            tl = await connect(settings, client=env.client)
            tag = uuid.uuid4().hex[:6]
            async with running(settings, root / "worker-0.log"):
                colds = await build(tl, tag)
            async with running(settings, root / "worker-1.log", worker_env(1)):
                await measure(tl, colds, tag)
            for k in range(2, 2 * NEW_WORKERS + 1):  # not warmed, warmed, ... alternating
                warmed = k % 2 == 1
                variables = worker_env(1) if warmed else {**worker_env(1), "THREADLINE_WARM_LOGS": "0"}
                async with running(settings, root / f"worker-{k}.log", variables):
                    filler = tl.conversation("tutor", id=f"cold-{tag}-filler")
                    await filler.predict("Hello")  # the new process's own first task and imports
                    await first_turns(filler, colds, warmed=warmed)
    check(all(c.warm for c in colds.values()), "every conversation took its warm turns")
    return Section(rows_for(colds), [chart(colds)])
