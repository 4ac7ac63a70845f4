"""Streaming benchmark: a streamed reply through Threadline against a direct httpx call, side by side.

    python -m bench.streaming

One fake OpenAI-compatible server on loopback (`tests.support.fakeprovider.FakeProvider`) answers both,
streaming the same reply in `CHUNKS` pieces with `CHUNK_DELAY_S` before each stream event, so the
first token comes some milliseconds after the request, as with a real provider.

- anchor: a direct `httpx.AsyncClient` POST to `<fake>/v1/chat/completions` with `stream: true`;
  first token = the first SSE `data:` line whose delta has content, end = `data: [DONE]`.
- threadline: `chat.stream(...)` (lm `openai:gpt-test`) through an in-process worker on a dev
  server; first token = the first text piece yielded, end = the finished `Turn`. One conversation,
  sequential turns (its workflow is running: the steady state of a conversation).

The systems alternate turn by turn (the first one alternating too); `WARMUP` calls of each first,
then `REPS` timed. Besides the figures the table shows, the timeline of a call is printed (when
the turn was placed, when the fake received the request, first and last piece), and, as a
diagnostic, the same turn read with `watch(poll=0.005)` instead of `stream`'s 20 ms poll.

Absolute times depend on the machine (the server, the worker, the fake and the driver share its
cores); the difference and the ratio are what to read.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from activities.providers import build_providers
from bench._report import exit_now, run_benchmark
from bench._server import start_dev_server
from bench.turns import Row, check, pct, run_costs, settings_for, verdict
from core.temporal import workflow_id
from tests.support.fakeprovider import Failure, FakeProvider, Reply
from threadline.client import Conversation, Threadline, connect
from threadline.reading import Turn
from threadline.turnstream import TurnHandle
from worker import build_worker

WARMUP = 5
REPS = 30
CHUNKS = 20
CHUNK_DELAY_S = 0.005
TARGET_MS = 50.0
DIAGNOSTIC_POLL_S = 0.005
MODEL = "openai:gpt-test"
TEXT = (
    "To add 1/2 and 1/3, first find a common denominator: 6 works. Then 1/2 = 3/6 and 1/3 = 2/6, so the "
    "sum is 5/6. Try 1/4 + 1/6 the same way and tell me what you get."
)
REPLY = Reply(TEXT, chunks=CHUNKS, delay=CHUNK_DELAY_S, input_tokens=120, output_tokens=48)
SYSTEMS = ("threadline", "anchor", "diagnostic")

# ------------------------------------------------------------------ the fake server, stamping each request


class StampedScript(deque[Reply | Failure]):
    """The fake's script: every request gets `REPLY`, and the moment it arrived is kept.

    `FakeProvider` takes `script.popleft()` right after it has read a request (no await between),
    so the stamp is when the whole request had reached the server.
    """

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[float] = []

    def __bool__(self) -> bool:
        return True

    def popleft(self) -> Reply | Failure:
        self.arrivals.append(time.perf_counter())
        return REPLY


# ------------------------------------------------------------------ one call each way


@dataclass(slots=True)
class Sample:
    """One streamed reply, in seconds after the call: first and last piece of text, the end; when
    the fake received the request, and (Threadline) when `send()` had placed the turn."""

    first: float
    last: float
    total: float
    arrived: float
    placed: float | None = None


class TimedConversation(Conversation):
    """A conversation handle that notes when `send()` (signal-with-start + `begun` update) returned;
    `stream()` calls it first, so the timing is `stream()`'s own."""

    placed_at: float = 0.0

    async def send(self, *args: Any, request_id: str | None = None, lm: str | None = None, **inputs: Any) -> TurnHandle:
        handle = await super().send(*args, request_id=request_id, lm=lm, **inputs)
        self.placed_at = time.perf_counter()
        return handle


def chat_request(text: str) -> dict[str, Any]:
    """A Chat Completions body like the one Threadline sends for a first turn of `tutor`."""
    return {
        "model": MODEL.partition(":")[2],
        "messages": [
            {"role": "system", "content": "You are a patient tutor. Answer the learner's message."},
            {"role": "user", "content": text},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def direct(http: httpx.AsyncClient, url: str, text: str) -> tuple[float, float, float, str]:
    """One streamed call straight to the fake: first and last content line, end (perf_counter), text."""
    first = last = 0.0
    pieces: list[str] = []
    async with http.stream("POST", f"{url}/chat/completions", json=chat_request(text)) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line.removeprefix("data:").strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            content = "".join((c.get("delta") or {}).get("content") or "" for c in chunk.get("choices") or [])
            if content:
                last = time.perf_counter()
                first = first or last
                pieces.append(content)
    return first, last, time.perf_counter(), "".join(pieces)


async def through_stream(chat: TimedConversation, text: str) -> tuple[float, float, float, Turn]:
    """`chat.stream(text)`: first and last text piece, the finished Turn (perf_counter), and the Turn."""
    first = last = 0.0
    turn: Turn | None = None
    async for item in chat.stream(text):
        if isinstance(item, Turn):
            turn = item
        elif item:
            last = time.perf_counter()
            first = first or last
    check(turn is not None, "the stream ended without its turn")
    assert turn is not None
    return first, last, time.perf_counter(), turn


async def through_watch(chat: TimedConversation, text: str) -> tuple[float, float, float, Turn]:
    """What `stream()` does (send, watch, result), with `watch(poll=DIAGNOSTIC_POLL_S)`."""
    first = last = 0.0
    placed = await chat.send(text)
    check(placed.id is not None, "the turn was not placed")
    assert placed.id is not None
    async for piece in chat.watch(placed.id, poll=DIAGNOSTIC_POLL_S):
        if piece.text:
            last = time.perf_counter()
            first = first or last
    turn = await placed.result()
    return first, last, time.perf_counter(), turn


# ------------------------------------------------------------------ where a turn's time goes on the server


@dataclass(frozen=True, slots=True)
class TaskCost:
    """Per turn of one workflow run, from its history's timestamps: workflow tasks, their wait in
    the task queue (scheduled to started) and their run (started to completed), and activities."""

    turns: int
    tasks: float
    wait_ms: float
    run_ms: float
    activities: dict[str, float]

    def line(self) -> str:
        acts = ", ".join(f"{n:.2f} {name}" for name, n in sorted(self.activities.items()))
        return (
            f"{self.tasks:.2f} workflow tasks per turn, each waiting {self.wait_ms:.1f} ms in the queue "
            f"(scheduled to started) and running {self.run_ms:.1f} ms (mean of {self.turns} turns); "
            f"activities per turn: {acts}"
        )


async def task_cost(chat: Conversation) -> TaskCost:
    """`TaskCost` of the conversation's run that holds the most turns (the newest such)."""
    runs = await run_costs(chat.tl.client, workflow_id(chat.config.store, chat.id))
    run = max(runs, key=lambda r: r.turns)
    tasks = run.kinds["WORKFLOW_TASK_STARTED"]
    prefix = "ACTIVITY_TASK_SCHEDULED "
    activities = {k.removeprefix(prefix): v / run.turns for k, v in run.kinds.items() if k.startswith(prefix)}
    return TaskCost(
        run.turns,
        tasks / run.turns,
        1000 * run.spans["workflow task: scheduled to started"] / tasks,
        1000 * run.spans["workflow task: started to completed"] / tasks,
        activities,
    )


# ------------------------------------------------------------------ the run


@dataclass(slots=True)
class Bench:
    fake: FakeProvider
    script: StampedScript
    http: httpx.AsyncClient
    chats: dict[str, TimedConversation]

    async def once(self, system: str, text: str) -> Sample:
        before = len(self.fake.requests)
        start = time.perf_counter()
        if system == "anchor":
            first, last, end, got = await direct(self.http, self.fake.openai_url, text)
            placed = None
        else:
            call = through_stream if system == "threadline" else through_watch
            chat = self.chats[system]
            first, last, end, turn = await call(chat, text)
            check(turn.state == "done", f"{system}: a turn ended {turn.state}")
            got, placed = str(turn.result), chat.placed_at - start
        check(got == TEXT, f"{system}: the reply came back as {got!r}")
        check(len(self.fake.requests) == before + 1, f"{system}: {len(self.fake.requests) - before} requests")
        check(first > 0, f"{system}: no text arrived")
        arrived = self.script.arrivals[-1]
        return Sample(first - start, last - start, end - start, arrived - start, placed)


@contextlib.asynccontextmanager
async def started(root: Path) -> AsyncIterator[Bench]:
    """The fake server, a quiet dev server, a worker whose `openai` provider calls the fake, two conversations."""
    script = StampedScript()
    with FakeProvider() as fake:
        fake.script = script
        async with (
            await start_dev_server() as env,
            httpx.AsyncClient(timeout=30) as worker_http,
            httpx.AsyncClient(timeout=30) as http,
        ):
            settings = settings_for(env, root, f"bench-streaming-{uuid.uuid4().hex[:8]}")
            providers = build_providers(
                settings, worker_http, env={"OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": fake.openai_url}
            )
            async with build_worker(env.client, settings, providers=providers):
                tl: Threadline = await connect(settings, client=env.client)
                chats = {}
                for name in ("threadline", "diagnostic"):
                    made = tl.conversation("tutor", id=f"stream-{name}-{uuid.uuid4().hex[:8]}", lm=MODEL)
                    chats[name] = TimedConversation(tl, made.config)
                yield Bench(fake, script, http, chats)


def question(i: int) -> str:
    return f"Question {i}: how do I add {i % 9 + 1}/{i % 7 + 2} and 1/{i % 5 + 3}?"


async def measure(b: Bench) -> dict[str, list[Sample]]:
    samples: dict[str, list[Sample]] = {name: [] for name in SYSTEMS}
    for i in range(WARMUP + REPS):
        order = SYSTEMS if i % 2 == 0 else SYSTEMS[::-1]
        for system in order:
            sample = await b.once(system, question(i))
            if i >= WARMUP:
                samples[system].append(sample)
        if i + 1 == WARMUP:
            print(f"  {WARMUP} warm-up calls each done")
        elif i >= WARMUP and (i + 1 - WARMUP) % 10 == 0:
            done = i + 1 - WARMUP
            ttft = {s: 1000 * statistics.median(x.first for x in samples[s]) for s in SYSTEMS}
            print(
                f"  {done}/{REPS}: median TTFT so far threadline {ttft['threadline']:.1f} ms, "
                f"anchor {ttft['anchor']:.1f} ms, diagnostic (poll 5 ms) {ttft['diagnostic']:.1f} ms"
            )
    return samples


def ms(values: list[float]) -> list[float]:
    return [1000 * v for v in values]


def report(samples: dict[str, list[Sample]]) -> list[Row]:
    tl, anchor, diag = samples["threadline"], samples["anchor"], samples["diagnostic"]
    ttft = {name: ms([s.first for s in v]) for name, v in samples.items()}
    total = {name: ms([s.total for s in v]) for name, v in samples.items()}
    rows: list[Row] = []
    for label, values in (("time to first token", ttft), ("total time to the end", total)):
        for q, name in ((0.5, "p50"), (0.95, "p95")):
            t, a = pct(values["threadline"], q), pct(values["anchor"], q)
            print(
                f"  {label} {name}: threadline {t:.1f} ms, anchor {a:.1f} ms, "
                f"difference {t - a:+.1f} ms, ratio {t / a:.2f}"
            )
            rows.append(Row(f"{label} {name}", t, a, "ms", False))
    diff50 = pct(ttft["threadline"], 0.5) - pct(ttft["anchor"], 0.5)
    paired = statistics.median(t - a for t, a in zip(ttft["threadline"], ttft["anchor"], strict=True))
    print(
        f"  TTFT difference at p50: {diff50:.1f} ms (median of the paired differences {paired:.1f} ms)   "
        f"target <= {TARGET_MS:.0f} ms: {verdict(diff50 <= TARGET_MS)}"
    )
    rows.insert(
        2,
        Row(
            "TTFT difference p50 (threadline - anchor)",
            diff50,
            None,
            "ms",
            False,
            target=f"<= {TARGET_MS:.0f} ms",
            met=diff50 <= TARGET_MS,
        ),
    )
    rows.append(
        Row(
            f"TTFT p50, diagnostic: watch(poll={DIAGNOSTIC_POLL_S * 1000:.0f} ms) instead of stream()",
            pct(ttft["diagnostic"], 0.5),
            pct(ttft["anchor"], 0.5),
            "ms",
            False,
        )
    )

    def med(values: list[Sample], get: Callable[[Sample], float | None]) -> float:
        return 1000 * statistics.median(float(x) for s in values if (x := get(s)) is not None)

    print("\n  Timeline of a call (medians, ms after the call):")
    print(f"    {'':<34}{'anchor':>10}{'threadline':>12}{'diag. 5 ms':>12}")
    steps: list[tuple[str, Callable[[Sample], float | None]]] = [
        ("turn placed (send() returned)", lambda s: s.placed),
        ("request reached the fake", lambda s: s.arrived),
        ("first token", lambda s: s.first),
        ("last token", lambda s: s.last),
        ("end (DONE / Turn returned)", lambda s: s.total),
    ]
    for label, get in steps:
        cells = [f"{med(v, get):>12.1f}" if any(get(s) is not None for s in v) else f"{'-':>12}" for v in (tl, diag)]
        anchor_cell = f"{med(anchor, get):>10.1f}" if any(get(s) is not None for s in anchor) else f"{'-':>10}"
        print(f"    {label:<34}{anchor_cell}{''.join(cells)}")
    dispatch = med(tl, lambda s: s.arrived) - med(anchor, lambda s: s.arrived)
    provider = med(anchor, lambda s: s.first - s.arrived)
    after = med(tl, lambda s: s.first - s.arrived) - provider
    after_diag = med(diag, lambda s: s.first - s.arrived) - provider
    tail = med(tl, lambda s: s.total - s.last)
    print("\n  What the TTFT difference consists of (medians):")
    print(
        f"    before the provider call, {dispatch:.1f} ms more than a direct call: the `turn` signal "
        "(signal-with-start), a workflow task that places the turn (local activity begin_turn: a log "
        "read and a conditional append), the `begun` update, scheduling and starting the run_turn activity, "
        "its log read and request build"
    )
    print(
        f"    after the provider's first token, {after:.1f} ms more: the worker appends the piece to the "
        f"turn's stream file and the client's watch() finds it on its next poll (every 20 ms, so 10 ms "
        f"on average, plus a thread hop per read); with poll 5 ms it is {after_diag:.1f} ms"
    )
    print(
        f"    the provider itself ({provider:.1f} ms from request to first token here) is the same for both; "
        f"after the last token Threadline takes {tail:.1f} ms more to return the Turn (the end marker on "
        f"the next poll, the `wait` update, a read of the record log)"
    )
    return rows


def header() -> None:
    import temporalio

    print("Streaming benchmark: a streamed reply through Threadline against a direct httpx call")
    print(
        f"  fake OpenAI server on loopback: {len(TEXT)} characters in {CHUNKS} chunks, "
        f"{CHUNK_DELAY_S * 1000:.0f} ms before each stream event"
    )
    print(f"  threadline: chat.stream() (lm {MODEL}), one conversation, in-process worker, one dev server")
    print("  anchor: httpx.AsyncClient POST /v1/chat/completions with stream: true, parsing the SSE lines")
    print(
        f"  temporalio {temporalio.__version__}, python {platform.python_version()} on {platform.system()} "
        f"{platform.machine()}, os.cpu_count() = {os.cpu_count()}"
    )
    print(f"  {WARMUP} warm-up calls, then {REPS} timed; systems alternate call by call; ratio = threadline / anchor")
    print()


async def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-streaming-") as tmp:
        async with started(Path(tmp)) as b:
            samples = await measure(b)
            cost = await task_cost(b.chats["threadline"])
    print()
    rows = report(samples)
    print(f"\n  On the server, the threadline conversation (warm-up included): {cost.line()}")
    return rows


def main() -> list[Row]:
    """Run the measurement, print the details and the table; return the table's rows."""
    return run_benchmark(header, run, "ratio = threadline / anchor")


if __name__ == "__main__":
    main()
    exit_now()
