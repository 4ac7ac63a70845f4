"""What telemetry costs a worker: CPU per turn with traces and metrics on against off.

    python -m bench.turns --telemetry

Worker processes take turns: a plain one (`off`), one serving `/metrics` alone (`metrics`), and
one also exporting traces over OTLP/HTTP to a receiver on loopback, as a collector would take
them (`on`). Each repetition runs `CONVERSATIONS` conversations of `TURNS_EACH` turns on each,
in a rotating order. CPU is the worker process's own (user + system, from /proc), divided by the
turns it ran.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from core.settings import Settings
from tests.support.otlp import Receiver
from tests.support.processes import WorkerProcess
from tests.telemetry.kit import free_port
from threadline.client import Threadline, connect

TARGET = 1.1
"""CPU per turn with telemetry on over off."""
CONVERSATIONS = 20
TURNS_EACH = 3
REPS = 3


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process `pid` used so far; Linux only."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = 100.0  # os.sysconf("SC_CLK_TCK") on Linux
    return (int(fields[11]) + int(fields[12])) / ticks


async def _turns(tl: Threadline, label: str) -> None:
    async def one(i: int) -> None:
        chat = tl.conversation("tutor", id=f"tel-{label}-{i}-{uuid.uuid4().hex[:8]}")
        for k in range(TURNS_EACH):
            await chat.predict(f"question {k}")

    await asyncio.gather(*(one(i) for i in range(CONVERSATIONS)))


async def _cpu_per_turn(tl: Threadline, worker: WorkerProcess, label: str) -> float:
    await _turns(tl, f"{label}-warm")  # caches, imports and connections warm before timing
    before = process_cpu(worker.process.pid)
    await _turns(tl, label)
    await asyncio.sleep(0.5)  # spans still being exported are counted too
    return 1000 * (process_cpu(worker.process.pid) - before) / (CONVERSATIONS * TURNS_EACH)


async def bench_telemetry(settings: Settings, client: Any, root: Path, row: Any) -> list[Any]:
    """CPU per turn of a worker with telemetry on and off; the table's row."""
    receiver = Receiver()
    metrics = {"THREADLINE_METRICS_BIND": f"127.0.0.1:{free_port()}"}
    traces = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SERVICE_NAME": "bench-worker"}
    envs: dict[str, dict[str, str]] = {"off": {}, "metrics": metrics, "on": {**metrics, **traces}}
    cpu: dict[str, list[float]] = {mode: [] for mode in envs}
    with receiver:
        for rep in range(REPS):
            modes = list(envs)
            for mode in modes[rep % 3 :] + modes[: rep % 3]:
                queue = f"bench-telemetry-{mode}-{uuid.uuid4().hex[:8]}"
                own = dataclasses.replace(settings, task_queue=queue)
                worker = WorkerProcess(own, root / f"worker-{mode}-{rep}.log", env=envs[mode])
                try:
                    await asyncio.to_thread(worker.wait_ready, 90.0)
                    tl = await connect(own, client=client)
                    started = time.perf_counter()
                    cpu[mode].append(await _cpu_per_turn(tl, worker, f"{mode}{rep}"))
                    took = time.perf_counter() - started
                finally:
                    await asyncio.to_thread(worker.stop)
                print(f"  rep {rep + 1} telemetry {mode}: worker CPU per turn {cpu[mode][-1]:.2f} ms ({took:.1f} s)")
        spans = len(receiver.received())
    on, alone, off = (statistics.median(cpu[mode]) for mode in ("on", "metrics", "off"))
    print(f"  median: on {on:.2f} ms, metrics alone {alone:.2f} ms, off {off:.2f} ms; {spans} spans received")
    return [
        row(
            "worker CPU per turn, traces and metrics",
            on,
            off,
            "ms",
            False,
            2,
            target=f"ratio <= {TARGET}",
            met=on / off <= TARGET,
        ),
        row(
            "worker CPU per turn, metrics alone",
            alone,
            off,
            "ms",
            False,
            2,
            target=f"ratio <= {TARGET}",
            met=alone / off <= TARGET,
        ),
    ]
