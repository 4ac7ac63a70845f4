"""What a program's helpers remember, seen in the requests a provider receives (the fake provider over
OpenAI's wire): a helper the conversation remembers is shown its own earlier calls on the branch (with
`"turn"`, only this turn's; with `steps`, their tool calls and results), and any other starts fresh."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client

import threadline
from activities.providers import build_providers
from core.settings import Settings
from store.backends.folder import FolderStore
from tests.support.fakeprovider import FakeProvider
from tests.support.support_kit import MODEL, answer_for, provider_env, sent
from threadline.client import Threadline, connect
from worker import build_worker


@pytest.fixture(name="fake")
def _fake() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        fake.answer = answer_for
        yield fake


@pytest_asyncio.fixture(name="desk")
async def _desk(client: Client, settings: Settings, fake: FakeProvider) -> AsyncIterator[Threadline]:
    settings = dataclasses.replace(settings, programs=("tests.support.support_programs",))
    env = provider_env(fake)
    async with (
        httpx.AsyncClient() as http,
        build_worker(client, settings, providers=build_providers(settings, http, env=env)),
    ):
        yield await connect(settings, client=client)


async def test_answer_remembers_its_calls_on_the_branch_and_topic_nothing(
    desk: Threadline, fake: FakeProvider, cid: str
) -> None:
    """`remembers={answer: "conversation"}`: `answer` is shown its earlier calls of this branch only (a
    branch from the first turn never sees the second's); `topic` is shown nothing, every time."""
    chat = desk.conversation("support", id=cid, lm=MODEL, remembers={"answer": "conversation"})

    first = await chat.predict("Where is parcel B-2210?")
    await chat("And parcel B-2211?")
    branch = await chat.continue_from(first.id)("Cancel B-2210 instead")

    assert [1, 1, 1] == [len(m) for m in sent(fake, "topic")]
    answers = sent(fake, "answer")
    assert [1, 3, 3] == [len(m) for m in answers]
    assert "message: Where is parcel B-2210?\ntopic: shipping" == answers[1][0]["content"]
    assert {"role": "assistant", "content": "answer after 1 messages"} == answers[1][1]
    assert "B-2211" not in json.dumps(answers[2])  # the second turn is not on the branch
    assert "answer after 3 messages" == branch


async def test_a_helper_that_remembers_the_turn_forgets_earlier_turns(
    desk: Threadline, fake: FakeProvider, cid: str
) -> None:
    """`"turn"`: the second call of `answer` in a turn is shown the first; the next turn starts fresh."""
    chat = desk.conversation("twice", id=cid, lm=MODEL, remembers={"answer": "turn"})

    await chat("x")
    await chat("y")

    assert [1, 3, 1, 3] == [len(m) for m in sent(fake, "answer")]
    calls = [r for r in FolderStore(desk.settings.store_folder("default")).read(cid) if r["kind"] == "call"]
    assert [[], [{"call": calls[0]["call"]}], [], [{"call": calls[2]["call"]}]] == [c["saw"] for c in calls]


@pytest.mark.parametrize("steps", [True, False])
async def test_steps_show_a_helpers_earlier_tool_calls(
    desk: Threadline, fake: FakeProvider, cid: str, steps: bool
) -> None:
    """With `remember("conversation", steps=True)` the helper's earlier call is shown with its tool call and
    result (and its saw entry says `steps`); without, by its input and answer only."""
    memory = threadline.remember("conversation", steps=steps)
    chat = desk.conversation("desk", id=cid, lm=MODEL, remembers={"track": memory})

    await chat("Where is order 7?")
    await chat("And now?")

    second = sent(fake, "track")[2]  # the first turn asked twice (the tool call, then the answer)
    shown = [m["role"] for m in second]
    assert (["user", "assistant", "tool", "assistant", "user"] if steps else ["user", "assistant", "user"]) == shown
    if steps:
        assert "order 7 is in Leeds" == second[2]["content"]
    calls = [r for r in FolderStore(desk.settings.store_folder("default")).read(cid) if r["kind"] == "call"]
    entry = {"call": calls[0]["call"], "steps": True} if steps else {"call": calls[0]["call"]}
    assert [entry] == calls[1]["saw"]
