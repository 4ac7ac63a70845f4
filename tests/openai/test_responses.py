"""The Responses protocol through the official `openai` client against the real service: a response is a
turn (at the head, after an older response as a branch, or of a new conversation), read back by id,
with its instructions, metadata, model and usage as recorded; a retried POST with the same
`Idempotency-Key` is the same turn."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest_asyncio
from temporalio.client import Client
from temporalio.worker import Worker

from activities.language_model import OfflineModel, Provider
from activities.providers import OpenAIProvider
from core.settings import Settings
from store.backends.folder import FolderStore
from store.log.state import Log
from tests.openai.kit import protocol_client, turn_of
from tests.support.fakeprovider import FakeProvider, Reply
from threadline.client import Threadline
from worker import build_worker


async def test_previous_response_id_on_an_older_response_is_a_branch(tl: Threadline, worker: Worker) -> None:
    """A response after the first one, when the second is the head, makes a branch: the head stays
    where it was (the next `conversation` send continues there) until it is moved."""
    async with protocol_client(tl) as client:
        conversation = await client.conversations.create()
        first = await client.responses.create(input="one", conversation=conversation.id)
        second = await client.responses.create(input="two", conversation=conversation.id)
        branch = await client.responses.create(input="one again", previous_response_id=first.id)
        head_after_branch = await tl.conversation("chat", id=conversation.id).current_head()
        main = await client.responses.create(input="three", conversation=conversation.id)
        await tl.conversation("chat", id=conversation.id).head(turn_of(branch.id))
        on_branch = await client.responses.create(input="after the move", conversation=conversation.id)

    assert first.id == branch.previous_response_id
    assert "I was shown 1 earlier turn(s)" in branch.output_text
    assert turn_of(second.id) == head_after_branch
    assert second.id == main.previous_response_id
    assert main.output_text.endswith("I was shown 2 earlier turn(s).")
    assert branch.id == on_branch.previous_response_id
    assert 5 == len(await tl.conversation("chat", id=conversation.id).turns(all=True))  # nothing deleted


async def test_neither_conversation_nor_previous_makes_a_new_conversation(tl: Threadline, worker: Worker) -> None:
    """A response alone starts a conversation of its own, which the protocol then lists and reads back."""
    async with protocol_client(tl) as client:
        made = await client.responses.create(input=[{"role": "user", "content": "Hello"}], metadata={"k": "v"})
        assert made.conversation is not None
        read = await client.responses.retrieve(made.id)
        items = await client.conversations.items.list(made.conversation.id)

    assert ("completed", {"k": "v"}, made.output_text) == (read.status, read.metadata, read.output_text)
    assert 2 == len(items.data)
    assert made.output_text.startswith("(offline) You said: Hello.")


async def test_instructions_are_the_turns_system_text(tl: Threadline, worker: Worker, folder: Path) -> None:
    """`instructions` (and system messages of `input`) are recorded as the conversation's system prompt,
    which the turn is shown and which the response reads back."""
    async with protocol_client(tl) as client:
        made = await client.responses.create(
            input=[{"role": "developer", "content": "Mind the units."}, {"role": "user", "content": "2 m + 3 m?"}],
            instructions="Be brief.",
        )
    assert made.conversation is not None

    turn = Log(FolderStore(folder).read(made.conversation.id)).turns[turn_of(made.id)]
    assert ["Be brief.\n\nMind the units."] == turn.record["context"]["sections"]
    assert "Be brief.\n\nMind the units." == made.instructions


async def test_the_same_idempotency_key_twice_is_one_turn(tl: Threadline, worker: Worker) -> None:
    """A retried POST with the same `Idempotency-Key` answers the same response, and one turn is recorded."""
    key = f"retry-{uuid.uuid4().hex}"
    async with protocol_client(tl) as client:
        conversation = await client.conversations.create()
        sent = [
            await client.responses.create(
                input="only once", conversation=conversation.id, extra_headers={"Idempotency-Key": key}
            )
            for _ in range(2)
        ]

    turns = await tl.conversation("chat", id=conversation.id).turns(all=True)
    assert sent[0].id == sent[1].id
    assert [key] == [t.request_id for t in turns]


@pytest_asyncio.fixture(name="fake")
async def _fake() -> AsyncIterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


async def test_a_provider_model_is_mapped_and_its_usage_is_the_recorded_one(
    tl: Threadline, client: Client, settings: Settings, fake: FakeProvider
) -> None:
    """`gpt-4o-mini` goes to the OpenAI provider (here the fake one on loopback) as itself, and the
    response's usage is what the turn recorded."""
    fake.add(Reply("Five sixths.", chunks=3, input_tokens=21, output_tokens=4))
    async with httpx.AsyncClient() as http:
        openai_provider = OpenAIProvider(http, base_url=fake.openai_url, api_key="sk-test")
        providers: dict[str, Provider] = {"offline": OfflineModel(), "openai": openai_provider}
        async with build_worker(client, settings, providers=providers), protocol_client(tl) as protocol:
            made = await protocol.responses.create(model="gpt-4o-mini", input="What is 1/2 + 1/3?")
            read = await protocol.responses.retrieve(made.id)

    assert ("Five sixths.", "gpt-4o-mini") == (made.output_text, fake.requests[0].body["model"])
    assert made.usage is not None
    assert (21, 4, 25) == (made.usage.input_tokens, made.usage.output_tokens, made.usage.total_tokens)
    assert made.usage == read.usage
