"""Sections 6 and 7 of bench/turns.py: turns on a PostgreSQL store beside the folder store, and
throughput with workers on 1, 2 and 3 test hosts.

6. The same conversation workflow, one in-process worker per store kind on the run's dev server, the
   folder store the anchor (ratio = postgres / folder). PostgreSQL runs with its default durability
   (fsync at every commit), as the folder store fsyncs every append. Sequential turns alternate
   between the two; throughput runs `CONVERSATIONS` conversations at once, alternating which goes first.
7. Workers as `python worker.py` processes on 1, 2 and 3 test hosts (network namespaces, as root;
   skipped otherwise), one PostgreSQL store and one dev server on the bridge they all reach; the
   anchor is 1 host (ratio = n hosts / 1 host). All hosts share this machine's cores, so this shows
   what spreading costs or gains here, not what separate machines would give.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from core.settings import Settings
from store.backends.opening import StoreSet
from tests.support.hosts import Network, can_make_hosts, host_network
from tests.support.pg_kit import postgres_server
from tests.support.processes import WorkerProcess
from threadline.client import Threadline
from threadline.devserver import DevServer, free_port
from worker import build_worker

WARMUP = 5
TIMED = 40
CONVERSATIONS = 50
TURNS_EACH = 3
REPS = 2
HOST_COUNTS = (1, 2, 3)


async def _turns(tl: Threadline, name: str, count: int) -> None:
    chat = tl.conversation("tutor", id=f"{name}-{uuid.uuid4().hex[:8]}")
    for i in range(count):
        await chat.predict(f"Question {i}: what is 1/{i + 2} + 1/3?")


async def _rate(tl: Threadline, name: str) -> float:
    start = time.perf_counter()
    await asyncio.gather(*(_turns(tl, f"{name}{i}", TURNS_EACH) for i in range(CONVERSATIONS)))
    return CONVERSATIONS * TURNS_EACH / (time.perf_counter() - start)


@asynccontextmanager
async def _system(client: Any, settings: Settings) -> AsyncIterator[Threadline]:
    stores = StoreSet(settings.named_stores())
    tl = Threadline(client, settings)
    try:
        async with build_worker(client, settings, stores=stores):
            yield tl
    finally:
        await tl.close()
        await stores.close()


def _queue(name: str) -> str:
    return f"bench-{name}-{uuid.uuid4().hex[:8]}"


async def bench_store_kinds(client: Any, base: Settings, row: Callable[..., Any]) -> list[Any]:
    """Sequential latency and throughput, PostgreSQL against the folder store."""
    with tempfile.TemporaryDirectory(prefix="bench-pg-") as tmp, postgres_server(durable=True) as server:
        url = server.create_database("bench") + "?schema=turns"
        pg_settings = dataclasses.replace(base, stores={"default": url}, task_queue=_queue("pg"))
        folder_settings = dataclasses.replace(base, stores={"default": Path(tmp) / "store"}, task_queue=_queue("f"))
        async with _system(client, pg_settings) as pg, _system(client, folder_settings) as folder:
            systems = {"postgres": pg, "folder": folder}
            latencies = await _sequential(systems)
            rates: dict[str, list[float]] = {name: [] for name in systems}
            for rep in range(REPS):
                for name in list(systems) if rep % 2 else list(systems)[::-1]:
                    rates[name].append(await _rate(systems[name], f"load-{name}-{rep}"))
                    print(f"  rep {rep + 1} {name}: {rates[name][-1]:.1f} turns/s")
    rows = []
    for q, label in ((0.5, "p50"), (0.95, "p95")):
        at = {name: v[min(int(q * len(v)), len(v) - 1)] for name, v in latencies.items()}
        print(f"  turn latency {label}: postgres {at['postgres']:.1f} ms, folder {at['folder']:.1f} ms")
        measure = f"turn latency {label}, PostgreSQL store (anchor: folder)"
        rows.append(row(measure, at["postgres"], at["folder"], "ms", False))
    medians = {name: statistics.median(v) for name, v in rates.items()}
    print(f"  throughput: postgres {medians['postgres']:.1f} turns/s, folder {medians['folder']:.1f} turns/s")
    title = f"throughput, {CONVERSATIONS} conversations x {TURNS_EACH} turns, PostgreSQL store (anchor: folder)"
    rows.append(row(title, medians["postgres"], medians["folder"], "turns/s", True))
    return rows


async def _sequential(systems: dict[str, Threadline]) -> dict[str, list[float]]:
    """Sequential turns on one conversation per system, alternating; the timed ones' ms, sorted."""
    chats = {name: tl.conversation("tutor", id=f"seq-{name}-{uuid.uuid4().hex[:8]}") for name, tl in systems.items()}
    latencies: dict[str, list[float]] = {name: [] for name in systems}
    for i in range(WARMUP + TIMED):
        for name in list(systems) if i % 2 else list(systems)[::-1]:
            start = time.perf_counter()
            await chats[name].predict(f"Question {i}")
            latencies[name].append(1000 * (time.perf_counter() - start))
    return {name: sorted(v[WARMUP:]) for name, v in latencies.items()}


async def bench_hosts(row: Callable[..., Any]) -> list[Any]:
    """Throughput with worker processes on 1, 2 and 3 test hosts (skipped unless root)."""
    if not can_make_hosts():
        print("  skipped: test hosts are network namespaces, which need root and `ip`")
        return []
    with (
        tempfile.TemporaryDirectory(prefix="bench-hosts-") as tmp,
        host_network(max(HOST_COUNTS)) as net,
        postgres_server(durable=True, host=net.bridge, network=net.subnet) as server,
    ):
        url = server.create_database("hosts") + "?schema=hosts"
        port = free_port()
        # On every address: with --ip set to the bridge's, the server's own services still dial loopback.
        async with DevServer(Path(tmp) / "temporal", host="0.0.0.0", port=port, ui_port=None):
            address = f"{net.bridge}:{port}"
            settings = dataclasses.replace(
                Settings.from_env({}), data=Path(tmp) / "data", stores={"default": url}, address=address
            )
            rates = {n: await _hosts_rate(net, settings, n, Path(tmp)) for n in HOST_COUNTS}
    rows = []
    for n, rate in rates.items():
        print(f"  workers on {n} host(s): {rate:.1f} turns/s")
        rows.append(row(f"throughput, workers on {n} host(s) (anchor: 1 host)", rate, rates[1], "turns/s", True))
    return rows


async def _hosts_rate(net: Network, settings: Settings, count: int, tmp: Path) -> float:
    settings = dataclasses.replace(settings, task_queue=f"bench-hosts-{count}-{uuid.uuid4().hex[:8]}")
    env = {"THREADLINE_STORES": f"default={settings.stores['default']}"}
    workers = [
        WorkerProcess(settings, tmp / f"{count}-{host.name}.log", env=env, prefix=host.prefix)
        for host in net.hosts[:count]
    ]
    tl = Threadline(None, settings)
    try:
        for worker in workers:
            await asyncio.to_thread(worker.wait_ready, 60)
        await _turns(tl, f"warm{count}", WARMUP)
        return statistics.median([await _rate(tl, f"hosts{count}-{rep}") for rep in range(REPS)])
    finally:
        await tl.close()
        for worker in workers:
            await asyncio.to_thread(worker.stop)
