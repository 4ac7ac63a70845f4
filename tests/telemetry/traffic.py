"""Traffic that lights up the Grafana dashboard: a worker process and `threadline serve`, both serving
`/metrics`, the offline model, and conversations that call tools, wait for a person, are refused,
stopped, claim-checked and (as root) meet a real store outage.

`Stack` starts and stops the processes; `one_round` sends a round of traffic through them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from core.models import StopSend, TurnSend
from core.settings import Settings
from store.records import uuid7
from tests.chaos.outage import Immutable, Outage, ReadOnlyMount, can_chattr, can_mount
from tests.support.processes import WorkerProcess
from tests.telemetry.kit import ServiceProcess, free_port, sample, scrape
from threadline.acting import Waiting, answer
from threadline.client import Threadline

ERRORS = "threadline_store_append_errors_total"
BIG = "Tell me about the tides, all of it. " * 260
"""A message over 8 KB: kept in the payload store instead of history (the claim check)."""


@dataclass
class Stack:
    """A worker process and `threadline serve` on `settings`' server and task queue, each serving
    `/metrics` on a loopback port of its own; their logs in `logs`."""

    settings: Settings
    logs: Path
    worker_port: int = field(default_factory=free_port)
    service_port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        env = {"THREADLINE_PROGRAMS": "tests.support.acting_programs", "THREADLINE_MODEL": "offline"}
        worker_env = {**env, "THREADLINE_METRICS_BIND": f"127.0.0.1:{self.worker_port}"}
        service_env = {**env, "THREADLINE_METRICS_BIND": f"127.0.0.1:{self.service_port}"}
        self.worker = WorkerProcess(self.settings, self.logs / "worker.log", env=worker_env)
        self.service = ServiceProcess(self.settings, self.logs / "api.log", service_env)

    def jobs(self) -> dict[str, list[str]]:
        """The scrape targets, under the job names of deploy/prometheus/prometheus.yml."""
        return {
            "threadline-worker": [f"127.0.0.1:{self.worker_port}"],
            "threadline-api": [f"127.0.0.1:{self.service_port}"],
        }

    def wait_ready(self) -> None:
        """Both started: the worker polls, the service answers."""
        self.worker.wait_ready(timeout=90)  # a loaded machine takes its time to import and connect
        self.service.wait_ready()

    def stop(self) -> None:
        """SIGTERM to both, then wait for them."""
        self.service.stop()
        self.worker.stop()


async def one_round(tl: Threadline, stack: Stack, *, outage: float | None = None) -> None:
    """Turns with tool calls over HTTP, a claim-checked message, and turns waiting for a person: one
    answered after a second (a send refused meanwhile), one stopped, one left waiting; with `outage`,
    then a send during a real store outage that lasts until the worker counted a failed append and
    `outage` seconds more (root only: `outage_possible`)."""
    tag = uuid.uuid4().hex[:8]
    await asyncio.gather(
        _http_turns(stack.service.url, f"dash-http-{tag}"),
        tl.conversation("tutor", id=f"dash-big-{tag}").predict(BIG),
        _answered(tl, f"dash-answered-{tag}"),
        _stopped(tl, f"dash-stopped-{tag}"),
        _waiting(tl, f"dash-waiting-{tag}"),
    )
    if outage is not None:
        await _outage(tl, stack, f"dash-outage-{tag}", outage)


def outage_possible(settings: Settings) -> bool:
    """A real store outage can be made on `settings`' default store (root: a bind mount, or chattr)."""
    folder = settings.store_folder("default")
    folder.mkdir(parents=True, exist_ok=True)
    return can_mount() or can_chattr(folder)


async def _http_turns(url: str, cid: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for n in (42, 43):
            body = {"message": f"order {n}", "program": "shop", "wait": True}
            answered = await http.post(f"/v1/conversations/{cid}/turns", json=body)
            answered.raise_for_status()


async def _until_waiting(tl: Threadline, cid: str) -> str:
    """Send a refund to `careful_shop`; return its turn, once it waits for a person's yes."""
    try:
        await tl.conversation("careful_shop", id=cid).predict("Refund 5 on order 6")
    except Waiting as waiting:
        return waiting.turn.id
    raise AssertionError("the refund did not wait for a person")


async def _answered(tl: Threadline, cid: str) -> None:
    turn = await _until_waiting(tl, cid)
    chat = tl.conversation("careful_shop", id=cid)
    refused = TurnSend(request_id=uuid7(), inputs={"request": "and order 7?"}, program="careful_shop", sends="refuse")
    await chat.signal(refused)
    await asyncio.sleep(1.0)  # a wait of a second
    await answer(chat, turn, "approve")


async def _stopped(tl: Threadline, cid: str) -> None:
    await _until_waiting(tl, cid)
    await tl.conversation("careful_shop", id=cid).signal(StopSend())


async def _waiting(tl: Threadline, cid: str) -> None:
    await _until_waiting(tl, cid)


async def _outage(tl: Threadline, stack: Stack, cid: str, more: float) -> None:
    """The store's log folder unwritable until the worker counted a failed append, and `more` seconds."""
    folder = stack.settings.store_folder("default")
    fault: Outage = ReadOnlyMount(folder) if can_mount() else Immutable(folder)
    before = sample(scrape(stack.worker_port), ERRORS)
    fault.begin()
    try:
        await tl.conversation("tutor", id=cid).signal(TurnSend(request_id=uuid7(), inputs={"message": "Hi"}))
        deadline = time.monotonic() + 30
        while sample(scrape(stack.worker_port), ERRORS) <= before:
            assert time.monotonic() < deadline, "no failed append was counted"
            await asyncio.sleep(0.2)
        await asyncio.sleep(more)
    finally:
        fault.end()
