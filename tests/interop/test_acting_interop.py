"""Turns that act, shared with functai 1.2.0 both ways: approvals answered in either engine count in
both, a waiting turn is resumed by the other engine, and a turn functai left interrupted inside a
changing tool is resumed here, its tool never run twice and never fed a result recorded for another call."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import functai
import pytest
import pytest_asyncio
from temporalio.client import Client

from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from store.backends.folder import FolderStore
from store.log.state import Log
from tests.support import acting_programs, functai_tools
from tests.support.functai_tools import answers, asks, model
from threadline.acting import Waiting
from threadline.client import Threadline, connect
from worker import build_worker

ROOT = Path(__file__).resolve().parents[2]


@pytest_asyncio.fixture(name="shop")
async def _shop(client: Client, settings: Settings) -> AsyncIterator[Threadline]:
    settings = dataclasses.replace(settings, programs=("tests.support.acting_programs",))
    async with build_worker(client, settings):
        yield await connect(settings, client=client)


def records(tl: Threadline, cid: str) -> list[dict[str, Any]]:
    return FolderStore(tl.settings.store_folder("default")).read(cid)


def tools_of(tl: Threadline, cid: str, turn: str) -> list[tuple[Any, ...]]:
    return [
        (r["state"], r["invocation"], r.get("attempt"))
        for r in records(tl, cid)
        if r["kind"] == "tool" and r["turn"] == turn
    ]


async def test_functai_approves_and_resumes_a_threadline_waiting_turn(shop: Threadline, cid: str) -> None:
    """functai answers the refund Threadline asked about and runs the rest itself; the reading tool's
    recorded result is reused there; Threadline's workflow then sees the turn done."""
    chat = shop.conversation("careful_shop", id=cid, waiting_check_s=2.0)
    with pytest.raises(Waiting) as waiting:
        await chat("Refund order 7")
    turn = waiting.value.turn
    runs = len(acting_programs.RUNS)

    def functai_answers() -> Any:
        with functai.configure(lm="fake-model", client=model(asks("Refund order 7"), answers("Refunded."))):
            theirs = functai_tools.careful_shop.conversation(cid, store=str(shop.settings.store_folder("default")))
            asked = theirs.turn(turn.id)
            return asked.approve(asked.waiting[0], by="functai")

    result = await asyncio.to_thread(functai_answers)

    assert "Refunded." == result
    assert ["refund"] == acting_programs.RUNS[runs:]
    assert [("done", 1, 1), ("started", 2, 2), ("done", 2, 2)] == tools_of(shop, cid, turn.id)
    outcome = await settled(chat, turn.request_id or "")
    assert ("done", "Refunded.") == (outcome.state, (await chat.turn(turn.id)).result)


async def test_threadline_approves_and_resumes_a_functai_waiting_turn(shop: Threadline, cid: str) -> None:
    """functai's turn waits for the refund; Threadline lists the question, approves it, and runs the turn
    on: the reading tool functai ran is not run again, the refund runs once, functai reads the answer."""
    folder = str(shop.settings.store_folder("default"))
    runs = len(acting_programs.RUNS)

    def functai_waits() -> str:
        with functai.configure(lm="fake-model", client=model(asks("Refund order 8"))):
            theirs = functai_tools.careful_shop.conversation(cid, store=folder, approve="changes")
            with pytest.raises(functai.Waiting):
                theirs("Refund order 8")
            return str(theirs.turns[-1].id)

    tid = await asyncio.to_thread(functai_waits)
    turn = await shop.conversation("careful_shop", id=cid).turn(tid)
    ended = await turn.approve(by="ann")

    assert [("refund", 2)] == [(a["name"], a["invocation"]) for a in turn.approvals]
    assert ("done", 2) == (ended.state, ended.attempt)
    assert ["order_status", "refund"] == acting_programs.RUNS[runs:]
    with functai.configure(lm="fake-model", client=model()):
        theirs = functai_tools.careful_shop.conversation(cid, store=folder).turn(tid)
        assert ("done", ended.result) == (theirs.state, theirs.result)


def interrupted_by_functai(folder: Path, cid: str, amount: int) -> str:
    """A functai process that started the refund and was killed there; its 2-s lease then runs out."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.functai_tools", str(folder), cid, str(amount)], cwd=ROOT
    )
    try:
        deadline = time.monotonic() + 30
        while not any(r.get("state") == "started" for r in FolderStore(folder).read(cid)):
            assert time.monotonic() < deadline, "functai never started the refund"
            time.sleep(0.05)
    finally:
        process.kill()
        process.wait()
    tid = next(r["turn"] for r in FolderStore(folder).read(cid) if r["kind"] == "turn")
    while Log(FolderStore(folder).read(cid)).turns[tid].state(time.time()) != "interrupted":
        time.sleep(0.1)
    return str(tid)


@pytest.mark.slow
async def test_threadline_resumes_a_turn_functai_left_interrupted_in_a_changing_tool(
    shop: Threadline, cid: str
) -> None:
    """The refund may have run: resuming without saying what it returned is `turn-unfinished`; with its
    result given, nothing runs again and the model is shown that result."""
    folder = shop.settings.store_folder("default")
    tid = await asyncio.to_thread(interrupted_by_functai, folder, cid, 0)
    runs = len(acting_programs.RUNS)
    turn = await shop.conversation("shop", id=cid).turn(tid)

    with pytest.raises(ThreadlineError) as unfinished:
        await turn.resume()
    ended = await turn.resume(results={2: "refunded 0 on order Refund order 9"})

    assert ("interrupted", [2]) == (turn.state, [t["invocation"] for t in turn.unfinished])
    assert ErrorCode.TURN_UNFINISHED == unfinished.value.code
    assert ("done", 2) == (ended.state, ended.attempt)
    assert "refund: refunded 0 on order Refund order 9" in ended.result
    assert [] == acting_programs.RUNS[runs:]


@pytest.mark.slow
async def test_a_result_recorded_for_another_call_is_never_fed_to_the_model(shop: Threadline, cid: str) -> None:
    """functai's model asked to refund 5, Threadline's asks to refund 0: the result recorded for the first
    is not the second's. A person is asked (plugin `threadline`); once allowed, the refund runs here."""
    folder = shop.settings.store_folder("default")
    tid = await asyncio.to_thread(interrupted_by_functai, folder, cid, 5)
    runs = len(acting_programs.RUNS)
    turn = await shop.conversation("shop", id=cid).turn(tid)

    waiting = await turn.resume(results={2: "refunded 5 on order Refund order 9"})
    ended = await waiting.approve()

    assert [("refund", "threadline")] == [(a["name"], a["plugin"]) for a in waiting.approvals]
    assert ("done", 3) == (ended.state, ended.attempt)
    assert "refund: refunded 0 on order Refund order 9" in ended.result
    assert ["refund"] == acting_programs.RUNS[runs:]


async def settled(chat: Any, request_id: str) -> Any:
    """The send's outcome once the workflow stopped waiting on its turn."""
    for _ in range(200):
        outcome = await chat.outcome(request_id)
        if outcome.state != "waiting":
            return outcome
        await asyncio.sleep(0.1)
    raise AssertionError("the workflow still waits")
