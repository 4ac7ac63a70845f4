"""Programs with code shared with functai 1.2.0 on one folder, both ways: functai's `support` module
conversation continued here (no `program-unknown`) and Threadline's continued by functai, each helper
shown the calls the other engine recorded; `call` and `ended` records of the same shape; `earlier()`
giving the same rows; and a turn functai left between two helpers resumed here, its recorded helper
call taken instead of asked again."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import functai
import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client

from activities.providers import build_providers
from core.context import ContextRule
from core.settings import Settings
from store.backends.folder import FolderStore
from store.backends.reader import now
from store.log.state import Log
from tests.support import support_programs
from tests.support.fakeprovider import FakeProvider
from tests.support.functai_kit import Responder, support_reply
from tests.support.functai_support_proc import REMEMBERS
from tests.support.support_kit import MODEL, answer_for, provider_env, sent
from threadline.client import Threadline, connect
from worker import build_worker

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(name="fake")
def _fake() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        fake.answer = answer_for
        yield fake


@pytest_asyncio.fixture(name="desk")
async def _desk(client: Client, settings: Settings, fake: FakeProvider) -> AsyncIterator[Threadline]:
    settings = dataclasses.replace(settings, programs=("tests.support.support_programs",))
    async with (
        httpx.AsyncClient() as http,
        build_worker(client, settings, providers=build_providers(settings, http, env=provider_env(fake))),
    ):
        yield await connect(settings, client=client)


def records(tl: Threadline, cid: str) -> list[dict[str, Any]]:
    return FolderStore(tl.settings.store_folder("default")).read(cid)


def kinds(found: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in found if r["kind"] == kind]


def functai_chat(tl: Threadline, cid: str, program: str = "support", **options: Any) -> Any:
    """functai's conversation `cid` in Threadline's folder, with its own definition of `program`."""
    programs = support_programs.functai_programs()
    remembers = {programs["answer"]: "conversation"} if program == "support" else None
    folder = str(tl.settings.store_folder("default"))
    return programs[program].conversation(cid, store=folder, remembers=remembers, **options)


async def in_functai(fn: Any) -> Any:
    """Run `fn` (functai's blocking calls) with functai's scripted model; return it and the model."""
    model = Responder(support_reply)

    def run() -> Any:
        with functai.configure(lm="fake-model", client=model):
            return fn()

    return await asyncio.to_thread(run), model


async def test_threadline_continues_functais_support_conversation(
    desk: Threadline, fake: FakeProvider, cid: str
) -> None:
    """functai made two turns; Threadline renders the next (no `program-unknown`: the module is registered
    here) and runs it, showing `answer` both calls functai recorded; its `call` and `ended` records have
    the shape of functai's, with the saw entries functai writes."""

    def two_turns() -> list[str]:
        chat = functai_chat(desk, cid)
        chat("Where is my parcel B-2210?")
        chat("And parcel B-2211?")
        return [t.id for t in chat.turns]

    (t1, t2), _ = await in_functai(two_turns)

    chat = desk.conversation("support", id=cid, lm=MODEL, remembers={"answer": "conversation"})
    rendered = await chat.render("And parcel B-2212?")
    third = await chat.predict("And parcel B-2212?")

    assert (t2, [t1, t2], None) == (rendered.parent, rendered.shown, rendered.request)
    assert "answer after 5 messages" == third.result
    assert [1] == [len(m) for m in sent(fake, "topic")]
    found = records(desk, cid)
    theirs, mine = kinds(found, "call")[:2], kinds(found, "call")[2]
    assert [tuple(theirs[0])] == [tuple(mine)]
    assert [{"call": c["call"]} for c in theirs] == mine["saw"]
    ended = kinds(found, "ended")
    assert [tuple(ended[0])] == [tuple(ended[2])]
    assert [{"saw_of": t2}, {"call": t2}] == ended[2]["saw"]
    assert t1 == Log(found).turns[t2].parent


async def test_functai_continues_threadlines_support_conversation(desk: Threadline, cid: str) -> None:
    """Threadline made two turns; functai's third shows its `answer` both calls Threadline recorded, and
    its records have the shape of Threadline's."""
    chat = desk.conversation("support", id=cid, lm=MODEL, remembers={"answer": "conversation"})
    await chat("Where is my parcel B-2210?")
    second = await chat.predict("And parcel B-2211?")

    answer, model = await in_functai(lambda: functai_chat(desk, cid)("And parcel B-2212?"))

    assert "answer after 5 messages" == answer
    assert [1, 5] == [len(r.messages) for r in model.requests]  # topic remembers nothing, answer both calls
    found = records(desk, cid)
    mine, theirs = kinds(found, "call")[:2], kinds(found, "call")[2]
    assert tuple(mine[0]) == tuple(theirs)
    assert [{"call": c["call"]} for c in mine] == theirs["saw"]
    ended = kinds(found, "ended")
    assert tuple(ended[0]) == tuple(ended[2])
    assert [{"saw_of": second.id}, {"call": second.id}] == ended[2]["saw"]


@pytest.mark.parametrize("rule", [None, ContextRule(last=1, without=("message",))])
async def test_earlier_gives_functais_rows(desk: Threadline, cid: str, rule: ContextRule | None) -> None:
    """After the same two turns, `earlier()` in a Threadline turn and in a functai turn (each after the
    second) gives the same rows, and both turns record the same saw."""
    chat = desk.conversation("support", id=cid, lm=MODEL)
    await chat("Where is my parcel B-2210?")
    second = await chat.predict("And parcel B-2211?")
    every = [dict(t.inputs, **t.outputs) for t in await chat.turns()]

    mine = await desk.conversation("probe", id=cid, context=rule).continue_from(second.id).predict("rows?")
    rows_here = support_programs.EARLIER[-1]
    context = functai.last_turns(1, without=["message"]) if rule else None
    theirs = functai_chat(desk, cid, "probe", context=context).continue_from(second.id)
    await asyncio.to_thread(theirs, "rows?")
    rows_there = support_programs.EARLIER[-1]

    expected = [{"result": second.result}] if rule else every
    assert expected == rows_here == rows_there
    ended = kinds(records(desk, cid), "ended")
    assert ended[-2]["turn"] == mine.id
    assert ended[-2]["saw"] == ended[-1]["saw"]


@pytest.mark.slow
async def test_a_turn_functai_left_between_helpers_is_resumed_here(
    desk: Threadline, fake: FakeProvider, cid: str
) -> None:
    """functai answered `topic` (remembered for the turn: a `call` record) and died waiting for `answer`.
    Resumed here, the turn takes `topic`'s recorded call instead of asking (its replies' keys are
    functai's: a reply is reused only by the engine that asked), asks `answer` once, and records this
    attempt's calls, so memory reads the final attempt's."""
    tid = await asyncio.to_thread(left_by_functai, desk.settings.store_folder("default"), cid)

    chat = desk.conversation("support", id=cid, lm=MODEL, remembers=REMEMBERS)
    turn = await (await chat.turn(tid)).resume()

    assert ("done", 2, "answer after 1 messages") == (turn.state, turn.attempt, turn.result)
    assert [] == sent(fake, "topic")
    assert 1 == len(sent(fake, "answer"))
    calls = kinds(records(desk, cid), "call")
    assert [("topic", 1), ("topic", 2), ("answer", 2)] == [(c["program"]["name"], c["attempt"]) for c in calls]
    assert calls[0]["lmcc"] == calls[1]["lmcc"]
    assert calls[0]["call"] != calls[1]["call"]


def left_by_functai(folder: Path, cid: str) -> str:
    """Run the functai process until `topic`'s call is recorded, kill it, and wait for its lease to run out;
    return the turn it left interrupted."""
    args = [sys.executable, "-m", "tests.support.functai_support_proc", str(folder), cid, "Where is my parcel B-2210?"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: any(r["kind"] == "call" for r in FolderStore(folder).read(cid)))
    finally:
        proc.kill()
        proc.wait()
    tid = str(kinds(FolderStore(folder).read(cid), "turn")[0]["turn"])
    wait_for(lambda: Log(FolderStore(folder).read(cid)).turns[tid].state(now()) == "interrupted")
    return tid


def wait_for(done: Any, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


async def until(done: Any, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not done():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
