"""Section 2 of bench/scale.py: a worker's memory per cached idle conversation, and turns past its cache.

1. A Threadline worker process (`python worker.py`, `THREADLINE_WORKFLOW_CACHE` raised to hold them
   all) serves `WARMUP` conversations of one turn; its resident memory (VmRSS, /proc) then is the
   baseline. Conversations of one turn each are added, `CONCURRENCY` at a time, until `IDLE[0]`,
   `IDLE[1]`, ... of them sit idle; at each size, once the worker's CPU settles, its RSS and its
   CPU over `WINDOW_S` seconds are read. The anchor: the bare Temporal conversation
   (bench/_bare.py) in a worker process of its own (bench/_bare_worker.py), driven the same way.
2. Past the cache (bench/_scale_evict.py): a new worker whose cache holds fewer conversations than
   it serves; evicted conversations' next turns, checked and timed against cached ones'.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client

from bench import _bare_worker
from bench._scale_kit import CONCURRENCY, QUIET_S, Chart, Row, Section, add, cpu_seconds, sizes, status_kb, worker_env
from bench._server import start_dev_server
from bench.turns import BareChat, question, settings_for
from core.settings import Settings
from tests.support.processes import WorkerProcess
from threadline.client import Threadline, connect

IDLE = sizes(os.environ.get("BENCH_SCALE_IDLE", ""), (1000, 10000))
WARMUP = 50
WINDOW_S = 10.0
RATIO = 1.1
"""The target: a worker's memory per idle cached conversation at most this times the bare workflow's (an
earlier absolute target, 100 KB each and 1 GB at 10,000, was below what the bare workflow itself
takes: 134 KB and 1,380 MB). A whole worker's memory is shown beside the bare one's, its baseline
(the modules a Threadline worker imports) included."""


@dataclass(slots=True)
class Idle:
    """One system's worker as idle conversations were added."""

    baseline_kb: int = 0
    rss_kb: dict[int, int] = field(default_factory=dict)
    cpu_ms: dict[int, float] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)
    """How long adding the conversations up to each size took."""

    def per_kb(self, size: int) -> float:
        return (self.rss_kb[size] - self.baseline_kb) / (size - WARMUP)


async def settled(pid: int, limit: float = 60.0) -> None:
    """Wait (at most `limit` s) until process `pid` uses under 3 % of a core over a second."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = cpu_seconds(pid)
        await asyncio.sleep(1.0)
        if cpu_seconds(pid) - before < 0.03:
            return


async def fill(pid: int, make: Callable[[int], Awaitable[None]], name: str) -> Idle:
    """Warm up, read the baseline, then add conversations up to each size and read the worker."""
    idle = Idle()
    await add(make, 0, WARMUP)
    await settled(pid)
    idle.baseline_kb = status_kb(pid, "VmRSS")
    made = WARMUP
    for size in IDLE:
        idle.seconds[size] = await add(make, made, size)
        made = size
        await asyncio.sleep(Settings().attributes_every_s + QUIET_S)  # the last attribute timers fire
        await settled(pid)
        before = cpu_seconds(pid)
        await asyncio.sleep(WINDOW_S)
        idle.cpu_ms[size] = 1000 * (cpu_seconds(pid) - before)
        idle.rss_kb[size] = status_kb(pid, "VmRSS")
        print(
            f"  {name}: {size:,} idle conversations (added in {idle.seconds[size]:.0f} s), worker RSS "
            f"{idle.baseline_kb / 1024:.0f} -> {idle.rss_kb[size] / 1024:.0f} MB = {idle.per_kb(size):.0f} KB each; "
            f"CPU over {WINDOW_S:.0f} s idle {idle.cpu_ms[size]:.0f} ms",
            flush=True,
        )
    return idle


# ----- the systems


async def threadline_idle(tl: Threadline, settings: Settings, root: Path, ids: list[str]) -> Idle:
    process = WorkerProcess(settings, root / "worker-idle.log", env=worker_env(len(ids) + 100))

    async def make(i: int) -> None:
        await tl.conversation("tutor", id=ids[i]).predict(question(i))

    try:
        await asyncio.to_thread(process.wait_ready)
        return await fill(process.process.pid, make, "threadline")
    finally:
        await asyncio.to_thread(process.stop)


async def bare_idle(client: Client, settings: Settings, root: Path, count: int) -> Idle:
    queue = f"bench-scale-bare-{uuid.uuid4().hex[:8]}"
    folder = root / "bare"
    folder.mkdir()

    async def make(i: int) -> None:
        cid = f"bare-idle-{queue}-{i:05d}"
        await BareChat(client, queue, f"bare/{cid}", folder / f"{cid}.jsonl").predict(question(i))

    async with _bare_worker.running(settings, queue, count + 100) as process:
        return await fill(process.pid, make, "anchor")


# ----- the section


def rows_for(tl: Idle, bare: Idle) -> list[Row]:
    rows = []
    for size in IDLE:
        per, bare_per = tl.per_kb(size), bare.per_kb(size)
        target = f"ratio <= {RATIO:.2f}"
        title = f"worker RSS per idle cached conversation, {size:,} idle"
        rows.append(Row(title, per, bare_per, "KB", 0, target, per <= RATIO * bare_per))
        mb, bare_mb = tl.rss_kb[size] / 1024, bare.rss_kb[size] / 1024
        rows.append(Row(f"worker RSS with {size:,} idle conversations", mb, bare_mb, "MB", 0))
        rows.append(
            Row(f"worker CPU over {WINDOW_S:.0f} s, {size:,} idle", tl.cpu_ms[size], bare.cpu_ms[size], "ms", 0)
        )
    last, made = max(IDLE), max(IDLE) - WARMUP
    spent = sum(tl.seconds.values())
    rows.append(
        Row(
            f"time to start {made:,} conversations of one turn, {CONCURRENCY} at a time",
            spent,
            sum(bare.seconds.values()),
            "s",
            0,
        )
    )
    print(f"  threadline: {made / spent:.1f} conversations/s up to {last:,}")
    return rows


def chart(tl: Idle, bare: Idle) -> Chart:
    xs = [0.0, *(float(n) for n in IDLE)]
    return Chart(
        "scale-memory",
        "Worker RSS with idle cached conversations (one turn each)",
        "idle conversations",
        "MB",
        xs,
        {
            "threadline": [tl.baseline_kb / 1024, *(tl.rss_kb[n] / 1024 for n in IDLE)],
            "bare Temporal": [bare.baseline_kb / 1024, *(bare.rss_kb[n] / 1024 for n in IDLE)],
        },
        log_x=False,
    )


async def run() -> Section:
    """Memory of idle conversations for both systems, then turns past a worker's cache."""
    from bench._scale_evict import past_cache

    with tempfile.TemporaryDirectory(prefix="bench-scale-idle-") as tmp:
        root = Path(tmp)
        async with await start_dev_server(root / "payloads") as env:
            settings = dataclasses.replace(
                settings_for(env, root / "data", f"bench-scale-idle-{uuid.uuid4().hex[:8]}"),
                payloads=root / "payloads",
            )
            tl = await connect(settings, client=env.client)
            tag = uuid.uuid4().hex[:6]
            ids = [f"idle-{tag}-{i:05d}" for i in range(max(IDLE))]
            ours = await threadline_idle(tl, settings, root, ids)
            rows = await past_cache(tl, settings, root, ids)
            bare = await bare_idle(env.client, settings, root, max(IDLE))
    return Section(rows_for(ours, bare) + rows, [chart(ours, bare)])
