"""A worker killed (`kill -9`) between two helper calls of a program's turn: the retry on a new worker runs
the code again and takes the first helper's recorded reply instead of asking (provider requests counted);
left for functai instead (no worker comes back), functai resumes it, and Threadline's next turn is shown
the final attempt's calls only."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import functai
import pytest
from temporalio.client import Client

from core.settings import Settings
from store.backends.folder import FolderStore
from store.backends.reader import now
from store.log.state import Log
from tests.support import support_programs
from tests.support.fakeprovider import FakeProvider
from tests.support.functai_kit import Responder, support_reply
from tests.support.kit import lease_ran_out
from tests.support.processes import WorkerProcess
from tests.support.support_kit import MODEL, answer_for, provider_env, sent
from threadline.client import connect
from worker import build_worker

REMEMBERS = {"topic": "turn", "answer": "conversation"}


@pytest.fixture(name="fake")
def _fake() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        fake.answer = answer_for
        yield fake


def records(folder: Path, cid: str) -> list[dict[str, Any]]:
    return FolderStore(folder).read(cid)


def worker_env(fake: FakeProvider, pause: float) -> dict[str, str]:
    env = {**provider_env(fake), "THREADLINE_PROGRAMS": "tests.support.support_programs"}
    return {**env, "THREADLINE_TEST_PAUSE_S": str(pause)}


async def killed_after_topic(settings: Settings, fake: FakeProvider, cid: str, log: Path) -> tuple[Any, str]:
    """Send a `slow_support` turn to a worker process, and kill it once `topic`'s reply is recorded (the code
    then sleeps before `answer`); return the placed send and its turn."""
    folder = settings.store_folder("default")
    first = WorkerProcess(settings, log, env=worker_env(fake, 60.0))
    first.wait_ready()
    tl = await connect(settings)
    chat = tl.conversation("slow_support", id=cid, lm=MODEL, remembers=REMEMBERS)
    placed = await chat.send("Where is my parcel B-2210?")
    try:
        await until(lambda: any(r["kind"] == "call" for r in records(folder, cid)))
    finally:
        first.kill()
    assert placed.id is not None
    return placed, placed.id


async def test_a_worker_killed_between_helpers_does_not_ask_the_first_again(
    settings: Settings, fake: FakeProvider, cid: str, tmp_path: Path
) -> None:
    """The retry on a new worker takes the turn over (attempt 2: a worker that only froze could write
    nothing more), takes `topic`'s recorded reply (one request in all) and records its `call` again in
    its attempt, as a functai resume does; `answer` is asked once; the turn ends done in attempt 2."""
    settings = dataclasses.replace(settings, programs=("tests.support.support_programs",))
    placed, tid = await killed_after_topic(settings, fake, cid, tmp_path / "w1.log")

    second = WorkerProcess(settings, tmp_path / "w2.log", env=worker_env(fake, 0.0))
    try:
        second.wait_ready()
        turn = await asyncio.wait_for(placed.result(), 60)
    finally:
        second.stop()

    assert ("done", 2, "answer after 1 messages") == (turn.state, turn.attempt, turn.result)
    assert 1 == len(sent(fake, "topic"))
    assert 1 == len(sent(fake, "answer"))
    found = [r for r in records(settings.store_folder("default"), cid) if r.get("turn") == tid]
    assert ["turn", "lease", "reply", "call", "call", "reply", "call", "ended"] == [
        r["kind"] for r in found if r["kind"] != "lease" or r["seq"] == found[1]["seq"]
    ]
    calls = [(c["site"], c["attempt"]) for c in found if c["kind"] == "call"]
    assert [("slow_support#1/topic#1", 1), ("slow_support#1/topic#1", 2), ("slow_support#1/answer#1", 2)] == calls


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_turn_threadline_left_between_helpers_is_resumed_by_functai(
    client: Client, settings: Settings, fake: FakeProvider, cid: str, tmp_path: Path
) -> None:
    """No worker comes back: once the lease ran out (40 s), functai resumes the turn. Threadline's replies are
    keyed by Threadline's requests, so functai asks both helpers again (never fed a reply to another
    prompt); the turn ends done in attempt 2, and Threadline's next turn is shown the final attempt's
    `answer` call only."""
    settings = dataclasses.replace(settings, programs=("tests.support.support_programs",))
    folder = settings.store_folder("default")
    _, tid = await killed_after_topic(settings, fake, cid, tmp_path / "w1.log")
    await until(lambda: lease_ran_out(folder, cid, tid), within=55.0)

    programs = support_programs.functai_programs()
    remembers = {programs[name]: mode for name, mode in REMEMBERS.items()}
    model = Responder(support_reply, provider="openai")  # the turn recorded lm "openai:gpt-test"

    def resume() -> Any:
        with functai.configure(lm=MODEL, client=model):
            chat = programs["support"].conversation(cid, store=str(folder), remembers=remembers)
            return chat.turn(tid).resume()

    result = await asyncio.to_thread(resume)
    async with build_worker(client, settings):
        tl = await connect(settings, client=client)
        chat = tl.conversation("support", id=cid, lm="offline", remembers=REMEMBERS)
        nxt = await chat.predict("And parcel B-2211?")

    assert "answer after 1 messages" == result
    assert 2 == len(model.requests)
    assert ("done", 2) == (
        Log(records(folder, cid)).turns[tid].state(now()),
        Log(records(folder, cid)).turns[tid].attempt,
    )
    calls = [(c["program"]["name"], c["attempt"]) for c in records(folder, cid) if c["kind"] == "call"]
    assert [("topic", 1), ("topic", 2), ("answer", 2), ("topic", 1), ("answer", 1)] == calls
    assert "I was shown 1 earlier turn(s)" in nxt.result  # answer saw one earlier call: attempt 2's


async def until(done: Any, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not done():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
