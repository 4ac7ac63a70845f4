"""Service benchmark: a busy service's turns, most of them on conversations the worker has not cached.

    python -m bench.service [--conversations 5000] [--cache 500] [--minutes 5] [--load 0.7 | --rate R]

One dev server and a worker process per system (bench/turns.py's `served`), each caching `--cache`
conversations (`max_cached_workflows`), as a service runs its workers: Threadline (`python
worker.py`, the offline model; sent to with `await chat(...)`) and the best bare conversation
(bench/_bare.py: one update-with-start per turn, whose handler runs one activity appending one
fsynced line). The sends come from this process, which shares neither worker's event loop. For each
system in turn:

1. `--conversations` conversations take one turn each (`CONCURRENCY` at a time): each has a
   history to replay when it comes back cold.
2. Capacity: `CLOSED` senders, one after another, for `CAPACITY_S` seconds, each send to a
   conversation drawn Zipf-like (weight 1/rank; the ranks shuffled): turns per second.
3. The schedule: sends arriving at random (Poisson) at `--load` of the smaller capacity of the two
   systems (or `--rate` sends per second: an earlier run's schedule, to compare two versions at
   one rate), for `--minutes`, each to a conversation drawn the same way; the same seed, so both
   systems get the same sends at the same moments. A send to a conversation with a turn still
   running waits for it (as a user waits for the answer). Latency is from the send's scheduled
   moment until its answer is back.

A Threadline send answered `server-unavailable` (Temporal did not answer in time, or no worker took
the send yet) is sent again with the same request id, as the error tells a caller to do (it places
no second turn); its latency runs on until the answer, and the sends asked again are counted.

Reported: p50 and p95 latency of both systems and their ratios (target <= 1.5x), the share of
cold turns (a send to a conversation not among the `--cache` most recently sent to: the worker's
cache as a least-recently-used list of the sends; the first sends of step 1 warm it, as they
do the worker's), and `docs/charts/service-latency.png`: p50 and p95 over the run, per 10 s.
Printed beside each system's figures: the latency of the hottest conversation's sends (about one
in 11 of them, which wait for each other) against that of the others'.
Absolute figures depend on the machine (the server, the workers and the sends share its cores).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import collections
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench._report import exit_now, print_table, quiet_logs
from bench._scale_charts import draw
from bench._scale_kit import Chart, Row
from bench._scale_load import ended_records
from bench.turns import Bench, check, pct, question, served
from core.errors import ErrorCode, ThreadlineError
from store.records import uuid7

CHARTS = Path(__file__).resolve().parent.parent / "docs" / "charts"
CONCURRENCY = 50
CLOSED = 32
"""Senders of the capacity step: enough to keep both workers busy."""
CAPACITY_S = 20.0
WINDOW_S = 10.0
TARGET = 1.5
ASKS = 20
"""The most times one Threadline send is asked again after `server-unavailable` before the run fails."""
SEED = 24
SYSTEMS = ("threadline", "best bare")

Send = Callable[[int, str], Awaitable[object]]
"""A system's turn: conversation number, text."""


@dataclass(slots=True)
class Run:
    """One system under the schedule: each send's moment (s from the start) and latency (ms)."""

    capacity: float = 0.0
    at: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    conversation: list[int] = field(default_factory=list)
    """Each send's conversation number, beside its moment and latency."""
    asked: int = 0
    """Threadline: how many times a send was asked again (same request id) after `server-unavailable`."""
    ended: int = 0
    """Threadline's turns ended under the schedule (`ended` records written)."""
    again: int = 0
    """Of those, the turns a later try ended: Temporal gave up on the first (its heartbeat timeout) and
    ran the turn again, which a turn pays for with at least that timeout (3 s)."""

    def p(self, q: float) -> float:
        return pct(self.latency_ms, q)

    def hottest(self) -> str:
        """The latency of the sends to the conversation sent to most (one after another, as a user waits
        for each answer), beside that of all the others' sends."""
        top, count = collections.Counter(self.conversation).most_common(1)[0]
        hot = [ms for i, ms in zip(self.conversation, self.latency_ms, strict=True) if i == top]
        rest = [ms for i, ms in zip(self.conversation, self.latency_ms, strict=True) if i != top]
        return (
            f"the hottest conversation's {count:,} sends ({count / len(self.conversation):.0%}): p50 "
            f"{pct(hot, 0.5):.0f} ms, p95 {pct(hot, 0.95):.0f} ms; the others': p50 {pct(rest, 0.5):.0f} ms, "
            f"p95 {pct(rest, 0.95):.0f} ms"
        )


def zipf(count: int, rng: random.Random) -> Callable[[], int]:
    """A draw of a conversation number, Zipf-like over `count` (weight 1/rank, ranks shuffled)."""
    ranks = list(range(count))
    rng.shuffle(ranks)
    weights = [1.0 / (r + 1) for r in range(count)]
    cumulative = list(_accumulate(weights))
    total = cumulative[-1]

    def draw() -> int:
        return ranks[bisect.bisect_left(cumulative, rng.random() * total)]

    return draw


def _accumulate(values: list[float]) -> list[float]:
    out, running = [], 0.0
    for v in values:
        running += v
        out.append(running)
    return out


def schedule(count: int, rate: float, seconds: float) -> list[tuple[float, int]]:
    """The sends: (moment in s, conversation number), Poisson at `rate` per second, Zipf-like targets."""
    rng = random.Random(SEED)
    draw = zipf(count, rng)
    sends: list[tuple[float, int]] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            return sends
        sends.append((t, draw()))


def cold_share(sends: list[tuple[float, int]], count: int, cache: int) -> float:
    """The share of sends to a conversation outside the `cache` most recently sent to (the first
    turns of every conversation, in order, sent before)."""
    recent: collections.OrderedDict[int, None] = collections.OrderedDict((i, None) for i in range(count))
    while len(recent) > cache:
        recent.popitem(last=False)
    cold = 0
    for _, i in sends:
        if i in recent:
            recent.move_to_end(i)
        else:
            cold += 1
            recent[i] = None
            if len(recent) > cache:
                recent.popitem(last=False)
    return cold / len(sends)


def systems(b: Bench, count: int, runs: dict[str, Run]) -> dict[str, Send]:
    """Each system's turn on conversation `i` of `count` (the handles made once). A Threadline send
    answered `server-unavailable` is asked again with its request id (counted in `runs`)."""
    chats = [b.threadline(f"svc-{i}") for i in range(count)]
    bests = [b.best(f"svc-{i}") for i in range(count)]

    async def threadline(i: int, text: str) -> object:
        request_id, asked = uuid7(), 0
        while True:
            try:
                return await chats[i](text, request_id=request_id)
            except ThreadlineError as err:
                if err.code != ErrorCode.SERVER_UNAVAILABLE or asked == ASKS:
                    raise
            asked += 1
            runs["threadline"].asked += 1

    async def best(i: int, text: str) -> object:
        return await bests[i].predict(text)

    return {"threadline": threadline, "best bare": best}


async def first_turns(send: Send, count: int) -> float:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(i: int) -> None:
        async with gate:
            await send(i, question(i))

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    return time.perf_counter() - start


async def capacity(send: Send, count: int) -> float:
    """Turns per second with `CLOSED` senders, each turn to a Zipf-drawn conversation not already busy."""
    rng = random.Random(SEED + 1)
    draw = zipf(count, rng)
    busy: set[int] = set()
    done = 0
    end = time.perf_counter() + CAPACITY_S

    async def sender() -> None:
        nonlocal done
        while time.perf_counter() < end:
            i = draw()
            while i in busy:
                i = draw()
            busy.add(i)
            try:
                await send(i, question(done))
            finally:
                busy.discard(i)
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(CLOSED)))
    return done / (time.perf_counter() - start)


def ends(store: Path) -> tuple[int, int]:
    """`ended` records in the store's record logs, and how many of them a try after the first wrote."""
    attempts = [record.get("attempt", 1) for record in ended_records(store)]
    return len(attempts), sum(attempt > 1 for attempt in attempts)


async def open_loop(send: Send, sends: list[tuple[float, int]], run: Run) -> None:
    """Each send at its moment; one conversation's sends one after another."""
    locks: dict[int, asyncio.Lock] = collections.defaultdict(asyncio.Lock)
    start = time.perf_counter()

    async def one(k: int, at: float, i: int) -> None:
        await asyncio.sleep(max(0.0, start + at - time.perf_counter()))
        async with locks[i]:
            await send(i, question(k))
        run.at.append(at)
        run.conversation.append(i)
        run.latency_ms.append(1000 * (time.perf_counter() - start - at))

    await asyncio.gather(*(one(k, at, i) for k, (at, i) in enumerate(sends)))


async def bench(
    count: int, cache: int, seconds: float, load: float, fixed: float | None = None
) -> tuple[list[Row], Chart]:
    runs = {name: Run() for name in SYSTEMS}
    with tempfile.TemporaryDirectory(prefix="bench-service-") as tmp:
        async with served(Path(tmp), cache=cache) as b:
            send = systems(b, count, runs)
            for name in SYSTEMS:
                took = await first_turns(send[name], count)
                print(f"  {name}: {count:,} conversations' first turns in {took:.0f} s", flush=True)
                runs[name].capacity = await capacity(send[name], count)
                asked = f"; sends asked again so far: {runs[name].asked:,}" if name == "threadline" else ""
                print(f"  {name}: capacity {runs[name].capacity:.1f} turns/s{asked}", flush=True)
            smaller = min(r.capacity for r in runs.values())
            rate = fixed or load * smaller
            sends = schedule(count, rate, seconds)
            share = cold_share(sends, count, cache)
            print(
                f"  schedule: {len(sends):,} sends over {seconds:.0f} s ({rate:.1f}/s, {rate / smaller:.0%} of the "
                f"smaller capacity); cold (outside the {cache:,} most recently sent to): {share:.0%}",
                flush=True,
            )
            store = b.settings.store_folder("default")
            for name in SYSTEMS[::-1]:  # the anchor first: the server's history grows with each run
                before = ends(store) if name == "threadline" else (0, 0)
                runs[name].asked = 0  # the schedule's own (the first turns and the capacity step's are printed there)
                start = time.perf_counter()
                await open_loop(send[name], sends, runs[name])
                took = time.perf_counter() - start
                if name == "threadline":
                    after = ends(store)
                    runs[name].ended, runs[name].again = after[0] - before[0], after[1] - before[1]
                    print(f"  {name}: {runs[name].again:,} of {runs[name].ended:,} turns ended by a later try")
                    print(f"  {name}: sends asked again after server-unavailable: {runs[name].asked:,}")
                print(
                    f"  {name}: p50 {runs[name].p(0.5):.0f} ms, p95 {runs[name].p(0.95):.0f} ms ({took:.0f} s); "
                    f"{runs[name].hottest()}",
                    flush=True,
                )
    check(all(len(r.latency_ms) == len(sends) for r in runs.values()), "every send was answered")
    ours, best = runs["threadline"], runs["best bare"]
    rows = [
        Row("capacity (turns/s, Zipf-drawn, closed loop)", ours.capacity, best.capacity, "/s", 1, "-", None, True),
        Row(
            f"latency p50 at {rate:.1f} sends/s",
            ours.p(0.5),
            best.p(0.5),
            "ms",
            0,
            f"<= {TARGET}x",
            ours.p(0.5) <= TARGET * best.p(0.5),
        ),
        Row(
            f"latency p95 at {rate:.1f} sends/s",
            ours.p(0.95),
            best.p(0.95),
            "ms",
            0,
            f"<= {TARGET}x",
            ours.p(0.95) <= TARGET * best.p(0.95),
        ),
        Row(
            "turns ended by a later try (Temporal gave up on the first), threadline",
            100 * ours.again / max(ours.ended, 1),
            None,
            "%",
            1,
            "-",
            None,
            None,
        ),
        Row(
            "sends asked again (the same request id) after server-unavailable, threadline",
            ours.asked,
            None,
            "",
            0,
            "-",
            None,
            None,
        ),
        Row(
            f"share of cold turns (cache {cache:,} of {count:,} conversations)",
            100 * share,
            100 * share,
            "%",
            0,
            "-",
            None,
            None,
        ),
    ]
    return rows, chart(runs, seconds)


def chart(runs: dict[str, Run], seconds: float) -> Chart:
    windows = max(1, int(seconds // WINDOW_S))
    xs = [WINDOW_S * (w + 0.5) for w in range(windows)]
    series: dict[str, list[float]] = {}
    for name, run in runs.items():
        by: list[list[float]] = [[] for _ in range(windows)]
        for at, ms in zip(run.at, run.latency_ms, strict=True):
            by[min(windows - 1, int(at // WINDOW_S))].append(ms)
        series[f"{name}, p50"] = [pct(v, 0.5) if v else 0.0 for v in by]
        series[f"{name}, p95"] = [pct(v, 0.95) if v else 0.0 for v in by]
    return Chart(
        "service-latency",
        "A busy service: turn latency under a Zipf-like schedule (per 10 s)",
        "seconds into the schedule",
        "ms",
        xs,
        series,
        log_x=False,
    )


def main(argv: Sequence[str] = ()) -> list[Row]:
    """Run the benchmark (`argv`: its flags; none under `python -m bench`), print the table; its rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--conversations", type=int, default=5000)
    parser.add_argument("--cache", type=int, default=500)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--load", type=float, default=0.7)
    parser.add_argument("--rate", type=float, help="sends per second (an earlier run's schedule), not --load")
    args = parser.parse_args(list(argv))
    quiet_logs()
    import temporalio

    print("Service benchmark: Threadline against the best bare conversation under one Zipf-like schedule")
    pace = f"{args.rate:g} sends/s" if args.rate else f"{args.load:.0%} of capacity"
    print(
        f"  {args.conversations:,} conversations, worker cache {args.cache:,}, {args.minutes:g} min at "
        f"{pace}; temporalio {temporalio.__version__}, python {platform.python_version()}, "
        f"os.cpu_count() = {os.cpu_count()}",
        flush=True,
    )
    started_at = time.perf_counter()
    rows, made = asyncio.run(bench(args.conversations, args.cache, 60 * args.minutes, args.load, args.rate))
    for path in draw([made], CHARTS):
        print(f"  chart: {path.relative_to(CHARTS.parent.parent)}")
    elapsed = time.perf_counter() - started_at
    print_table(rows, f"Results ({os.cpu_count()} CPUs, {elapsed:.0f} s; ratio = threadline / best bare)")
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
    exit_now()
