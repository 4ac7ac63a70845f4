"""Tool turns through real providers (the fake provider server, both wire formats), and a worker killed
with `kill -9` after a changing tool ran: nothing runs twice, and no recorded reply is paid for again."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client

from activities.providers import build_providers
from core.settings import Settings
from store.backends.folder import FolderStore
from store.log.state import Log
from tests.support import acting_programs
from tests.support.acting_programs import runs_in
from tests.support.fakeprovider import Call, FakeProvider, Received, Reply
from tests.support.processes import WorkerProcess
from threadline.client import Threadline, connect
from worker import build_worker

KEY = "sk-test-tools-never-leak"
CALLS = (Call("call_1", "order_status", {"order": "7"}), Call("call_2", "refund", {"order": "7", "amount": 5}))


@pytest.fixture(name="fake")
def _fake() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


def provider_env(fake: FakeProvider) -> dict[str, str]:
    return {
        "OPENAI_API_KEY": KEY,
        "OPENAI_BASE_URL": fake.openai_url,
        "ANTHROPIC_API_KEY": KEY,
        "ANTHROPIC_BASE_URL": fake.url,
    }


@pytest_asyncio.fixture(name="live")
async def _live(client: Client, settings: Settings, fake: FakeProvider) -> AsyncIterator[Threadline]:
    settings = dataclasses.replace(settings, programs=("tests.support.acting_programs",))
    async with httpx.AsyncClient() as http:
        providers = build_providers(settings, http, env=provider_env(fake))
        async with build_worker(client, settings, providers=providers):
            yield await connect(settings, client=client)


def records(folder: Path, cid: str) -> list[dict[str, Any]]:
    return FolderStore(folder).read(cid)


def shape(record: dict[str, Any]) -> tuple[Any, ...]:
    """A record's kind, attempt, and (tools) state, invocation and keys, as format 1 orders them."""
    if record["kind"] == "tool":
        return ("tool", record.get("attempt"), record["state"], record["invocation"], tuple(record))
    return (record["kind"], record.get("attempt"))


TOOL_KEYS = ("functai_conversation", "kind", "at", "turn", "attempt", "site", "invocation", "id", "name")


@pytest.mark.parametrize("model", ["openai:gpt-test", "anthropic:claude-test"])
async def test_a_reading_and_a_changing_tool_through_a_provider(
    live: Threadline, fake: FakeProvider, cid: str, model: str
) -> None:
    """The provider asks for both tools in its own wire format; the records are format 1's, in order;
    the second request carries both results; the outputs end with every call."""
    fake.add(Reply(calls=CALLS), Reply("Refunded 5 on order 7."))
    runs = len(acting_programs.RUNS)

    turn = await live.conversation("shop", id=cid, lm=model).predict("Refund 5 on order 7, once you know where it is")

    found = [shape(r) for r in records(live.settings.store_folder("default"), cid) if r.get("turn") == turn.id]
    assert [
        ("turn", None),
        ("lease", 1),
        ("reply", 1),
        ("tool", 1, "done", 1, (*TOOL_KEYS, "state", "output", "seq")),
        ("tool", 1, "started", 2, (*TOOL_KEYS, "input", "effects", "state", "seq")),
        ("tool", 1, "done", 2, (*TOOL_KEYS, "state", "output", "seq")),
        ("reply", 1),
        ("ended", 1),
    ] == found
    assert ["order_status", "refund"] == acting_programs.RUNS[runs:]
    assert "Refunded 5 on order 7." == turn.result
    assert [c.id for c in CALLS] == [c["id"] for c in turn.outputs["calls"]]
    second = json.dumps(fake.requests[1].body)
    assert "order 7 is in Leeds" in second
    assert "refunded 5 on order 7" in second
    assert {"input_tokens": 22, "output_tokens": 14, "total_tokens": 36} == turn.usage


def first_step(received: Received) -> bool:
    """Whether a request is the turn's first model step (no tool result in it yet)."""
    return "is in Leeds" not in json.dumps(received.body)


async def test_a_worker_killed_after_a_changing_tool_ran_runs_it_no_more(
    settings: Settings, fake: FakeProvider, cid: str, tmp_path: Path
) -> None:
    """`kill -9` while the model writes its final reply (the refund `done`): the retry on a new worker
    runs no tool again (their runs counted) and pays for no recorded reply (the first step is asked once)."""
    runs_file = tmp_path / "runs.txt"
    env = {
        **provider_env(fake),
        "THREADLINE_PROGRAMS": "tests.support.acting_programs",
        "THREADLINE_TEST_TOOL_RUNS": str(runs_file),
    }
    fake.add(Reply(calls=CALLS), Reply("Refunded.", chunks=3, delay=20.0), Reply("Refunded 5 on order 7."))
    settings = dataclasses.replace(settings, programs=("tests.support.acting_programs",))
    first = WorkerProcess(settings, tmp_path / "w1.log", env=env)
    first.wait_ready()
    tl = await connect(settings)
    folder = settings.store_folder("default")

    placed = await tl.conversation("shop", id=cid, lm="openai:gpt-test").send("Refund 5 on order 7")
    await until(
        lambda: (
            len(fake.requests) >= 2
            and any(r.get("state") == "done" and r.get("name") == "refund" for r in records(folder, cid))
        )
    )
    first.kill()
    second = WorkerProcess(settings, tmp_path / "w2.log", env=env)
    try:
        second.wait_ready()
        turn = await asyncio.wait_for(placed.result(), 60)
    finally:
        second.stop()

    assert ("done", "Refunded 5 on order 7.") == (turn.state, turn.result)
    assert ["order_status", "refund"] == runs_in(runs_file)
    assert 1 == sum(first_step(r) for r in fake.requests)
    assert 3 == len(fake.requests)
    log = Log(records(folder, cid))
    assert 1 == sum(t.get("state") == "started" for t in log.turns[turn.id].tools)


async def until(done: Any, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not done():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
