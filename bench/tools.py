"""Turns that act: a turn with two tool rounds against the same work done directly, and the cost of
turns that sit waiting for a person.

    python -m bench.tools [WAITING]

1. Two tool rounds. One fake OpenAI-compatible server on loopback (`tests.support.fakeprovider`) answers
   both systems by what a request holds: no tool result yet, it asks for `order_status`; one, for
   `refund`; two, it answers. Whole replies (no streaming), so both sides parse the same JSON.
   - anchor: three `httpx` POSTs to `/v1/chat/completions` with the same bodies Threadline sends,
     the two tools called in-process between them (what an agent loop without durability does);
   - threadline: `chat.predict(...)` of the `shop` program (`tests.support.acting_programs`) through an
     in-process worker on a dev server: every reply recorded before it is used, each tool its own
     activity, the refund recorded `started` then `done`.
   The systems alternate turn by turn; `WARMUP` turns of each first, then `REPS` timed.
2. Waiting turns. A worker run as its own process; `WAITING` conversations (1,000 by default) each
   send a `careful_shop` turn whose refund needs a person: each turn runs its reading tool, then
   waits. The worker's CPU time (from /proc) and resident memory are read over `WINDOW_S` seconds
   before any turn (the anchor: the same worker, idle) and over `WINDOW_S` seconds while every turn
   waits. While a turn waits its workflow sleeps on durable timers (the first look at the log after
   5 minutes): the target is no CPU beyond the idle worker's.

Absolute times depend on the machine (the server, the worker, the fake and the driver share its
cores); the ratios are what to read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from activities.providers import build_providers
from bench._report import exit_now, run_benchmark
from bench._server import start_dev_server
from bench.turns import Row, check, pct, settings_for
from core.settings import Settings
from tests.support import acting_programs
from tests.support.fakeprovider import Call, FakeProvider, Received, Reply
from tests.support.processes import WorkerProcess
from threadline.acting import Waiting
from threadline.client import Threadline, connect
from worker import build_worker

WARMUP = 3
REPS = 20
WAITING = 1000
CONCURRENCY = 50
WINDOW_S = 30.0
MODEL = "openai:gpt-test"
KEY = "sk-bench-tools"
REQUEST = "Refund 5 on order 7 once you know where it is."


# ----- 1. two tool rounds


def script(received: Received) -> Reply:
    """The fake's answer by what the request holds: the first tool, the second, then the answer."""
    results = sum(m.get("role") == "tool" for m in received.body.get("messages", []))
    if results == 0:
        return Reply(calls=(Call(f"c-{uuid.uuid4().hex[:8]}", "order_status", {"order": "7"}),))
    if results == 1:
        return Reply(calls=(Call(f"c-{uuid.uuid4().hex[:8]}", "refund", {"order": "7", "amount": 5}),))
    return Reply("Refunded 5 on order 7, which is in Leeds.")


async def anchor_turn(http: httpx.AsyncClient, url: str, first: dict[str, Any]) -> float:
    """The same exchange done directly: a model call, a tool, a model call, a tool, a model call."""
    started = time.perf_counter()
    body = json.loads(json.dumps(first))
    while True:
        answer = (await http.post(f"{url}/chat/completions", json=body)).json()
        message = answer["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        if not calls:
            check(bool(message.get("content")), "the anchor got an answer")
            return time.perf_counter() - started
        body["messages"].append({"role": "assistant", "content": None, "tool_calls": calls})
        for call in calls:
            tool = {"order_status": acting_programs.order_status, "refund": acting_programs.refund}[
                call["function"]["name"]
            ]
            output = tool(**json.loads(call["function"]["arguments"]))
            body["messages"].append({"role": "tool", "tool_call_id": call["id"], "content": output})


async def threadline_turn(tl: Threadline) -> float:
    started = time.perf_counter()
    turn = await tl.conversation("shop", id=f"tools-{uuid.uuid4().hex[:12]}", lm=MODEL).predict(REQUEST)
    check(turn.state == "done" and len(turn.outputs["calls"]) == 2, "the threadline turn ran both tools")
    return time.perf_counter() - started


async def bench_rounds(tl: Threadline, fake: FakeProvider, http: httpx.AsyncClient) -> list[Row]:
    await threadline_turn(tl)
    first = fake.requests[-3].body | {"stream": False}
    first.pop("stream_options", None)
    times: dict[str, list[float]] = {"threadline": [], "anchor": []}
    for i in range(WARMUP + REPS):
        for name in ("threadline", "anchor") if i % 2 == 0 else ("anchor", "threadline"):
            took = await (threadline_turn(tl) if name == "threadline" else anchor_turn(http, fake.openai_url, first))
            if i >= WARMUP:
                times[name].append(took * 1000)
    ours, theirs = times["threadline"], times["anchor"]
    overhead = statistics.median(ours) - statistics.median(theirs)
    print(
        f"   threadline p50 {statistics.median(ours):.0f} ms, anchor p50 {statistics.median(theirs):.0f} ms: "
        f"{overhead:.0f} ms for durability (3 replies, 2 tools, 9 records)"
    )
    return [
        Row("turn with two tool rounds, p50", statistics.median(ours), statistics.median(theirs), "ms", higher=False),
        Row("turn with two tool rounds, p95", pct(ours, 0.95), pct(theirs, 0.95), "ms", higher=False),
    ]


# ----- 2. turns that wait


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def window(pid: int) -> tuple[float, float]:
    """CPU seconds the process spends over `WINDOW_S`, and its resident memory at the end (MB)."""
    before = cpu_seconds(pid)
    await asyncio.sleep(WINDOW_S)
    return cpu_seconds(pid) - before, rss_mb(pid)


async def wait_one(tl: Threadline, i: int, gate: asyncio.Semaphore) -> str:
    async with gate:
        try:
            await tl.conversation("careful_shop", id=f"waits-{i:05d}")(f"Refund order {i}")
        except Waiting as waiting:
            return waiting.turn.id
    raise RuntimeError("benchmark check failed: a turn did not wait")


async def bench_waiting(settings: Settings, root: Path, count: int) -> list[Row]:
    process = WorkerProcess(settings, root / "worker.log", env={"THREADLINE_PROGRAMS": "tests.support.acting_programs"})
    try:
        process.wait_ready()
        pid = process.process.pid
        idle_cpu, idle_rss = await window(pid)
        tl = await connect(settings)
        started = time.perf_counter()
        gate = asyncio.Semaphore(CONCURRENCY)
        await asyncio.gather(*(wait_one(tl, i, gate) for i in range(count)))
        placed = time.perf_counter() - started
        await asyncio.sleep(2.0)  # the last workflow tasks settle
        waiting_cpu, waiting_rss = await window(pid)
        status = (await tl.conversation("careful_shop", id="waits-00000").handle.describe()).raw_description
        check(not status.pending_activities, "a waiting conversation has no activity running")
    finally:
        process.stop()
    per = (waiting_rss - idle_rss) * 1024 / count
    print(
        f"   {count} turns placed and waiting in {placed:.0f} s; worker RSS {idle_rss:.0f} -> {waiting_rss:.0f} MB "
        f"({per:.0f} KB per waiting conversation, cached)"
    )
    return [
        Row(
            f"worker CPU over {WINDOW_S:.0f} s, {count} turns waiting",
            waiting_cpu * 1000,
            idle_cpu * 1000,
            "ms",
            higher=False,
            digits=0,
            target="no more than idle + 100 ms",
            met=waiting_cpu <= idle_cpu + 0.1,
        ),
        Row("memory per waiting conversation (cached)", per, None, "KB", higher=False, digits=0),
    ]


# ----- the run


async def run() -> list[Row]:
    count = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else WAITING
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-tools-") as tmp, FakeProvider() as fake:
        fake.answer = script
        root = Path(tmp)
        async with await start_dev_server(root / "payloads") as env:
            settings = dataclasses.replace(
                settings_for(env, root / "data", f"bench-tools-{uuid.uuid4().hex[:8]}"),
                programs=("tests.support.acting_programs",),
                payloads=root / "payloads",
            )
            print(f"\n1. A turn with two tool rounds: {WARMUP} warm-up turns, then {REPS} timed, alternating systems")
            async with httpx.AsyncClient() as http:
                env_vars = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": fake.openai_url, "OPENAI_STREAM": "false"}
                providers = build_providers(settings, http, env=env_vars)
                async with build_worker(env.client, settings, providers=providers):
                    rows += await bench_rounds(await connect(settings, client=env.client), fake, http)
            print(f"\n2. {count} turns waiting for a person, the worker a process of its own")
            waiting = dataclasses.replace(settings, task_queue=f"bench-waiting-{uuid.uuid4().hex[:8]}")
            rows += await bench_waiting(waiting, root, count)
    return rows


def header() -> None:
    print("Turns that act: tool rounds against the same calls made directly, and turns waiting for a person")


def main() -> list[Row]:
    """Run the measurements, print the details and the table; return the table's rows."""
    return run_benchmark(header, run, "ratio = threadline / anchor")


if __name__ == "__main__":
    main()
    exit_now()
