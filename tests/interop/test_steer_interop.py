"""Steered turns in a log functai 1.2.0 reads: a tool turn steered after its first tool round answers with
both messages, and functai lists it done with its answer and continues after it, shown its tool steps;
a plain turn steered mid-answer reads the same way."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import functai
import httpx
import pytest_asyncio
from temporalio.client import Client

from activities.providers import build_providers
from core.settings import Settings
from tests.support import functai_tools
from tests.support.fakeprovider import Call, FakeProvider, Reply
from tests.support.functai_kit import offline, reply, tutor
from tests.support.functai_tools import answers, model
from tests.workflow.test_steer import asked, steer_entries
from threadline.client import Threadline, connect
from worker import build_worker

MODEL = "openai:gpt-test"


@pytest_asyncio.fixture(name="live")
async def _live(client: Client, settings: Settings, fake: FakeProvider) -> AsyncIterator[Threadline]:
    settings = dataclasses.replace(settings, programs=("tests.support.acting_programs",))
    env = {"OPENAI_API_KEY": "sk-test-steer", "OPENAI_BASE_URL": fake.openai_url}
    async with (
        httpx.AsyncClient() as http,
        build_worker(client, settings, providers=build_providers(settings, http, env=env)),
    ):
        yield await connect(settings, client=client)


async def test_a_tool_turn_steered_after_its_first_tool_round(live: Threadline, fake: FakeProvider, cid: str) -> None:
    """The steer sent while the first step runs joins the second: that request holds the message, the
    tool's result and then the steer; the turn answers both, once, and functai reads and continues it."""
    fake.add(
        Reply(calls=(Call("call_1", "order_status", {"order": "7"}),), delay=0.3),
        Reply("Order 7 is in Leeds, and order 8 ships tomorrow."),
    )
    running = await live.conversation("shop", id=cid, lm=MODEL).send("Where is order 7?")
    await asked(fake, 1)

    steer = await live.conversation("shop", id=cid, lm=MODEL, sends="steer").send("And order 8?")
    turn = await running.result()

    assert ("done", "Order 7 is in Leeds, and order 8 ships tomorrow.") == (turn.state, turn.result)
    assert [(steer.request_id, 1)] == [(s["request_id"], s["step"]) for s in turn.steers]
    assert turn.id == (await steer.result()).id
    first, second = json.dumps(fake.requests[0].body), json.dumps(fake.requests[1].body)
    assert "order 8" not in first
    assert second.index("Where is order 7?") < second.index("order 7 is in Leeds") < second.index("And order 8?")
    assert ["steer", "steered"] == [kind for kind, _ in steer_entries(live, cid)]

    theirs, request, entries = await asyncio.to_thread(functai_continues, live, cid)

    assert [(turn.id, "done", turn.result)] == theirs[:1]
    assert [(turn.id, steer.request_id, {"request": "And order 8?"})] == [
        (e["turn"], e["data"]["request_id"], e["data"]["inputs"]) for e in entries
    ]
    assert "done" == theirs[1][1]
    assert "order 7 is in Leeds" in request  # shown whole, with its tool steps: the lmcc is functai's


async def test_a_plain_turn_steered_mid_answer_reads_in_functai(live: Threadline, fake: FakeProvider, cid: str) -> None:
    """functai lists the steered plain turn once, done with the second answer, and continues after it."""
    fake.add(Reply("A long story that goes on and on.", chunks=30, delay=0.1), Reply("A short one."))
    running = await live.conversation("tutor", id=cid, lm=MODEL).send("Tell me a story.")
    await asked(fake, 1)
    await asyncio.sleep(0.5)
    await live.conversation("tutor", id=cid, lm=MODEL, sends="steer").send("Make it short.")
    turn = await running.result()
    assert 1 == len(turn.steers)

    def functai_reads() -> tuple[list[Any], str]:
        with offline([reply("Glad you liked it.")]) as client:
            view = tutor.conversation(cid, store=str(live.settings.store_folder("default")))
            view("Thanks!")
            return [(t.id, t.state, t.result) for t in view.turns], repr(client.requests[0])

    listed, request = await asyncio.to_thread(functai_reads)

    assert (turn.id, "done", "A short one.") == listed[0]
    assert ("done", "Glad you liked it.") == listed[1][1:]
    assert "A short one." in request


def functai_continues(tl: Threadline, cid: str) -> tuple[list[Any], str, list[dict[str, Any]]]:
    """functai sends one more turn; the turns it lists, the request it made, the `steer` entries it reads."""
    client = model(answers("You are welcome."))
    with functai.configure(lm="fake-model", client=client):
        view = functai_tools.shop.conversation(cid, store=str(tl.settings.store_folder("default")))
        view("Thanks.")
        listed = [(t.id, t.state, t.result) for t in view.turns]
        entries = view.entries("threadline", "steer")
    return listed, repr(client.requests[0]), entries
