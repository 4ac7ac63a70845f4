"""`sends="steer"`: a send that arrives while a turn runs joins it at its next step; one that comes after
the turn's last step becomes the next turn; a plain turn still answering is cut short and asked again."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest_asyncio
from temporalio.client import Client

from activities.providers import build_providers
from core.settings import Settings
from store.backends.folder import FolderStore
from store.log.state import Log
from tests.support.fakeprovider import Call, FakeProvider, Reply
from tests.support.service_kit import send, serving
from threadline.client import Threadline, connect
from threadline.http import create_app
from worker import build_worker

MODEL = "openai:gpt-test"
STORY = "Once upon a time, a long story began, and it went on and on and on for a very long while."


@pytest_asyncio.fixture(name="live")
async def _live(client: Client, settings: Settings, fake: FakeProvider) -> AsyncIterator[Threadline]:
    """A worker whose OpenAI provider is the fake server, with the shop's programs."""
    settings = dataclasses.replace(settings, programs=("tests.support.acting_programs",))
    env = {"OPENAI_API_KEY": "sk-test-steer", "OPENAI_BASE_URL": fake.openai_url}
    async with (
        httpx.AsyncClient() as http,
        build_worker(client, settings, providers=build_providers(settings, http, env=env)),
    ):
        yield await connect(settings, client=client)


async def asked(fake: FakeProvider, count: int) -> None:
    """Wait until the provider was asked `count` times."""
    deadline = time.monotonic() + 20
    while len(fake.requests) < count:
        assert time.monotonic() < deadline, f"the provider was asked {len(fake.requests)} times"
        await asyncio.sleep(0.05)


def steer_entries(tl: Threadline, cid: str) -> list[tuple[str, dict[str, Any]]]:
    log = Log(FolderStore(tl.settings.store_folder("default")).read(cid))
    return [(e["entry"], e["data"]) for e in log.entries if e.get("entry") in ("steer", "steered")]


async def test_a_steer_after_the_last_step_is_the_next_turn(live: Threadline, fake: FakeProvider, cid: str) -> None:
    """A steer that arrives while the model writes a tool turn's answer (its last step) is not taken: the
    turn answers without it, and the steer becomes the next turn, after it, with its request id."""
    fake.add(
        Reply(calls=(Call("call_1", "order_status", {"order": "7"}),)),
        Reply("Order 7 is in Leeds.", chunks=10, delay=0.2),
        Reply("Order 8 is in York."),
    )
    chat = live.conversation("shop", id=cid, lm=MODEL)
    running = await chat.send("Where is order 7?")
    await asked(fake, 2)  # the last step is under way

    steer = await live.conversation("shop", id=cid, lm=MODEL, sends="steer").send("And order 8?")
    first, then = await running.result(), await steer.result()

    assert ("done", "Order 7 is in Leeds.", []) == (first.state, first.result, first.steers)
    assert ("done", "Order 8 is in York.", first.id) == (then.state, then.result, then.parent)
    assert steer.request_id == then.request_id
    assert "And order 8?" in json.dumps(fake.requests[2].body)
    assert ["steer"] == [kind for kind, _ in steer_entries(live, cid)]


async def test_a_plain_turn_steered_mid_answer_is_asked_again(live: Threadline, fake: FakeProvider, cid: str) -> None:
    """The model call under way is cut short; the model is asked again, shown what it had said and the
    steer; the turn answers once, says it took the steer, and keeps what was cut short in its log."""
    fake.add(Reply(STORY, chunks=40, delay=0.1), Reply("A short one."))
    chat = live.conversation("tutor", id=cid, lm=MODEL)
    running = await chat.send("Tell me a story.")
    await asked(fake, 1)
    await asyncio.sleep(1.0)  # some of the story is written

    steer = await live.conversation("tutor", id=cid, lm=MODEL, sends="steer").send("Make it short.")
    turn = await running.result()

    assert ("done", "A short one.") == (turn.state, turn.result)
    assert [steer.request_id] == [s["request_id"] for s in turn.steers]
    assert turn.id == (await steer.result()).id
    said = turn.steers[0]["said"]
    assert STORY.startswith(said)
    assert 0 < len(said) < len(STORY)
    messages = fake.requests[1].body["messages"]
    assert [("user", "Tell me a story."), ("assistant", said), ("user", "Make it short.")] == [
        (m["role"], m["content"]) for m in messages if m["role"] != "system"
    ]
    assert ["steer", "steered"] == [kind for kind, _ in steer_entries(live, cid)]
    assert 1 == len([r for r in FolderStore(live.settings.store_folder("default")).read(cid) if r["kind"] == "turn"])


async def test_a_steer_over_http(live: Threadline, fake: FakeProvider, cid: str) -> None:
    """The body field `sends`: the steer's answer is the running turn's, which says it took the steer."""
    fake.add(Reply(STORY, chunks=40, delay=0.1), Reply("A short one."))
    async with serving(create_app(live)) as http:
        placed = await send(http, cid, message="Tell me a story.", lm=MODEL)
        await asked(fake, 1)
        steered = await send(http, cid, message="Make it short.", lm=MODEL, sends="steer", request_id="s-1", wait=True)
        turn = await http.get(f"/v1/conversations/{cid}/turns/{placed.json()['turn']}")

    answer = steered.json()
    assert (200, placed.json()["turn"], "A short one.", ["s-1"]) == (
        steered.status_code,
        answer["turn"],
        answer["result"],
        answer["steers"],
    )
    assert [("s-1", {"message": "Make it short."})] == [(s["request_id"], s["inputs"]) for s in turn.json()["steers"]]


def roles(body: dict[str, Any] | None) -> list[tuple[str, str]]:
    """A request's messages as (role, text), its instruction and tool results' ids left out."""
    assert body is not None
    return [(m["role"], m.get("content") or "") for m in body["messages"] if m["role"] != "system"]


async def test_later_turns_render_and_ask_again_show_a_plain_turns_steer_where_it_joined(
    live: Threadline, fake: FakeProvider, cid: str
) -> None:
    """The next turn's request shows the steered turn as it was asked: its message, what the cut call had
    said, the steer, then its answer; `render` and `ask_again` of that next turn show the same, and
    `ask_again` of the steered turn sends its last request with the steer."""
    replies = ("A short one.", "Short again.", "You are welcome.", "Again.")
    fake.add(Reply(STORY, chunks=40, delay=0.1), *(Reply(text) for text in replies))
    chat = live.conversation("tutor", id=cid, lm=MODEL)
    running = await chat.send("Tell me a story.")
    await asked(fake, 1)
    await asyncio.sleep(1.0)  # some of the story is written
    await live.conversation("tutor", id=cid, lm=MODEL, sends="steer").send("Make it short.")
    steered = await running.result()
    said = steered.steers[0]["said"]

    own = await (await chat.turn(steered.id)).ask_again()
    rendered = await chat.render("Thanks!")
    thanks = await chat.predict("Thanks!")
    again = await thanks.ask_again()

    earlier = [
        ("user", "Tell me a story."),
        ("assistant", said),
        ("user", "Make it short."),
        ("assistant", "A short one."),
        ("user", "Thanks!"),
    ]
    assert earlier[:3] == roles(fake.requests[1].body) == roles(fake.requests[2].body) == roles(own.request)
    assert earlier == roles(fake.requests[3].body)
    assert earlier == roles(rendered.request)
    assert earlier == roles(again.request)


async def test_a_later_turn_shows_a_tool_turns_steer_after_the_tool_round_it_followed(
    live: Threadline, fake: FakeProvider, cid: str
) -> None:
    """Shown whole with its tool steps, the steered tool turn keeps its steer between the first round's
    result and the answer, as the turn itself was asked."""
    fake.add(
        Reply(calls=(Call("call_1", "order_status", {"order": "7"}),), delay=0.3),
        Reply("Order 7 is in Leeds, and order 8 ships tomorrow."),
        Reply("You are welcome."),
    )
    chat = live.conversation("shop", id=cid, lm=MODEL)
    running = await chat.send("Where is order 7?")
    await asked(fake, 1)
    await live.conversation("shop", id=cid, lm=MODEL, sends="steer").send("And order 8?")
    await running.result()

    await chat.predict("Thanks.")

    shown = roles(fake.requests[2].body)
    assert [
        ("user", "Where is order 7?"),
        ("assistant", ""),
        ("tool", shown[2][1]),
        ("user", "And order 8?"),
        ("assistant", "Order 7 is in Leeds, and order 8 ships tomorrow."),
        ("user", "Thanks."),
    ] == shown
    assert "Leeds" in shown[2][1]
