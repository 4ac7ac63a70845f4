"""The turn API as functai's: settings given with a call are that turn's only, usage sums every model
call of a turn, a stream knows its turn at once and raises `Cancelled` when stopped, `interrupt`
stops the running turn, and tool calls appear in `render`, in the request and in a turn's steps."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client

from activities.language_model import OfflineModel
from activities.providers import build_providers
from core.errors import ErrorCode
from core.settings import Settings
from store.backends.folder import FolderStore
from store.log.state import Log
from tests.support.fakeprovider import FakeProvider, Reply
from tests.support.functai_kit import offline, tutor
from threadline.acting import Cancelled, Waiting
from threadline.client import Threadline, connect
from worker import build_worker

KEY = "sk-test-parity"


@pytest.fixture(name="fake")
def _fake() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest_asyncio.fixture(name="live")
async def _live(client: Client, settings: Settings, fake: FakeProvider) -> AsyncIterator[Threadline]:
    """A worker with the offline model (taking 2 s a reply), the fake provider, and the test programs."""
    settings = dataclasses.replace(
        settings, programs=("tests.support.example_programs", "tests.support.acting_programs")
    )
    async with httpx.AsyncClient() as http:
        env = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": fake.openai_url}
        providers = {**build_providers(settings, http, env=env), "slow": OfflineModel(delay=2.0)}
        async with build_worker(client, settings, providers=providers):
            yield await connect(settings, client=client)


def records(tl: Threadline, cid: str) -> list[dict[str, Any]]:
    return FolderStore(tl.settings.store_folder("default")).read(cid)


async def test_a_model_given_with_a_call_is_that_turns_only(live: Threadline, cid: str) -> None:
    """`await chat("...", lm=...)` sends that turn to that model and records it as the turn's setting."""
    chat = live.conversation("tutor", id=cid)

    first = await chat("Hi", lm="offline:other")
    second = await chat.predict("Again")

    turns = [r for r in records(live, cid) if r["kind"] == "turn"]
    assert [{"lm": "offline:other"}, None] == [t.get("settings") for t in turns]
    assert first.startswith("(offline)")
    assert "done" == second.state


async def test_usage_counts_the_repair_request_too(live: Threadline, fake: FakeProvider, cid: str) -> None:
    """A reply that did not fit and its repair: the turn's usage is the sum of both calls."""
    bad = {"verdict": {"label": "maybe", "score": 0.5}, "result": "?"}
    good = {"verdict": {"label": "correct", "score": 1.0}, "result": "Yes."}
    fake.add(
        Reply(outputs=bad, input_tokens=10, output_tokens=3), Reply(outputs=good, input_tokens=20, output_tokens=4)
    )

    turn = await live.conversation("grader", id=cid, lm="openai:gpt-test").predict(question="q", answer="a")

    assert {"input_tokens": 30, "output_tokens": 7, "total_tokens": 37} == turn.usage


async def test_usage_counts_the_topic_call_and_every_tool_round(live: Threadline, cid: str) -> None:
    """With topics tracked and tools, `ended.usage` sums the classification and both model steps."""
    chat = live.conversation("shop", id=cid, context={"topics": "track"})
    await chat.predict("Hello.")  # the first message is a new topic without a model call

    turn = await chat.predict("Where is order 7?")

    log = Log(records(live, cid))
    replies = [r["response"]["usage"] for r in log.turns[turn.id].replies]
    topics = [e["data"] for e in log.entries if e.get("entry") == "topic"]
    topic = next(t["usage"] for t in topics if t["request_id"] == turn.request_id)
    expected = {k: sum(u[k] for u in [*replies, topic]) for k in ("input_tokens", "output_tokens", "total_tokens")}
    assert expected == turn.usage


async def test_a_stream_knows_its_turn_at_once_and_raises_cancelled_when_stopped(live: Threadline, cid: str) -> None:
    """`await chat.stream(...)` gives the turn's id before any text; stopping it raises `Cancelled`."""
    chat = live.conversation("tutor", id=cid, lm="slow")

    stream = await chat.stream("Tell me a long story.")
    turn = stream.turn

    async def read_then_stop() -> None:
        async for _ in stream:
            await chat.stop(turn)

    with pytest.raises(Cancelled) as cancelled:
        await read_then_stop()

    assert (ErrorCode.CANCELLED, turn) == (cancelled.value.code, cancelled.value.turn)
    assert "stopped" == (await chat.turn(turn)).state


async def test_interrupt_stops_the_running_turn_and_continues_from_its_parent(live: Threadline, cid: str) -> None:
    """`sends="interrupt"`: the running turn ends `stopped` and stays; the new turn is its sibling."""
    chat = live.conversation("tutor", id=cid, lm="slow")
    first = await chat.predict("First.")
    running = await chat.send("Second, slowly.")

    newer = await live.conversation("tutor", id=cid, sends="interrupt").predict("Third, at once.")

    stopped = await running.result()
    assert ("stopped", first.id) == (stopped.state, stopped.parent)
    assert first.id == newer.parent
    kinds = [(r["kind"], r.get("turn")) for r in records(live, cid)]
    assert kinds.index(("stop", stopped.id)) + 1 == kinds.index(("turn", newer.id))


async def test_interrupt_reads_in_functai(live: Threadline, cid: str) -> None:
    """functai lists the interrupted turn `stopped` and the new turn done, both children of the first."""
    chat = live.conversation("tutor", id=cid, lm="slow")
    first = await chat.predict("First.")
    running = await chat.send("Second, slowly.")
    newer = await live.conversation("tutor", id=cid, sends="interrupt").predict("Third, at once.")
    await running.result()

    with offline([]):
        theirs = tutor.conversation(cid, store=str(live.settings.store_folder("default")))
        states = {t.id: (t.state, t.parent) for t in theirs.all_turns()}

    assert {first.id: ("done", None), running.id: ("stopped", first.id), newer.id: ("done", first.id)} == states


async def test_tool_calls_appear_in_render_in_the_request_and_in_the_turns_steps(live: Threadline, cid: str) -> None:
    """After a turn that called tools, the next request shows its calls (assistant) and results (`tool`)."""
    chat = live.conversation("shop", id=cid)
    turn = await chat.predict("Where is order 7?")

    rendered = await chat.render("And order 8?")

    roles = [m["role"] for m in (rendered.request or {})["messages"]]
    assert ["user", "assistant", "tool", "tool", "assistant", "user"] == roles
    calls = (rendered.request or {})["messages"][1]["calls"]
    assert ["order_status", "refund"] == [c["name"] for c in calls]
    assert [("assistant", None), ("tool", "order_status"), ("tool", "refund")] == [
        (s["role"], s.get("name")) for s in turn.steps
    ]
    assert "order 7?" in json.dumps(turn.steps)


async def test_a_stream_of_a_turn_that_waits_for_a_person_raises_waiting(live: Threadline, cid: str) -> None:
    """A streamed turn that stops to ask a person raises `Waiting` with what it asks."""
    stream = await live.conversation("careful_shop", id=cid).stream("Refund order 7")

    async def read() -> None:
        async for _ in stream:
            pass

    with pytest.raises(Waiting) as waiting:
        await read()

    assert (stream.turn, ["refund"]) == (waiting.value.turn.id, [a["name"] for a in waiting.value.approvals])
