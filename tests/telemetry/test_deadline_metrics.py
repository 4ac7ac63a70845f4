"""What approval deadlines make observable: each reminder and the deadline's answer are a log line of
the worker and a count of `threadline_approval_waits_total` on its `/metrics` (a worker process on a
real dev server, deadlines of seconds)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from temporalio.client import Client

from core.settings import Settings
from tests.support.otlp import Receiver
from tests.telemetry.kit import free_port, sample, scrape, telemetry_env, worker
from threadline.acting import Waiting
from threadline.client import connect

pytestmark = pytest.mark.timeout(300)  # a worker process starts slowly on a loaded machine


async def test_reminders_and_the_deadlines_answer_are_logged_and_counted(
    client: Client, settings: Settings, tmp_path: Path, cid: str
) -> None:
    """`remind_every: 1, within: 3, then: deny`: reminders, then the denial, each a log line and a count."""
    settings = dataclasses.replace(settings, programs=("tests.support.acting_programs",))
    tl, port = await connect(settings, client=client), free_port()
    rule = {"calls": "changes", "within": 3, "then": "deny", "remind_every": 1}
    with Receiver() as receiver:
        running = worker(settings, tmp_path / "worker.log", telemetry_env(receiver, "tl-worker", port))
        try:
            chat = tl.conversation("shop", id=cid, approve=rule)
            with pytest.raises(Waiting) as waiting:
                await chat("Refund order 6")
            for _ in range(300):
                if (await chat.turn(waiting.value.turn.id)).state == "done":
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # the counts reach /metrics
            text = scrape(port)
            events = [str(e.get("event")) for e in running.events()]
        finally:
            running.stop()

    assert sample(text, "threadline_approval_waits_total", program="shop", event="reminded") >= 1
    assert 1 == sample(text, "threadline_approval_waits_total", program="shop", event="denied")
    assert [] != [e for e in events if e.startswith("approval reminded")]  # workflow lines end with the run's info
    assert 1 == len([e for e in events if e.startswith("approval answered by its deadline")])
