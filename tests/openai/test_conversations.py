"""The Conversations protocol through the official `openai` client, unchanged, against the real service
on loopback, a real dev server and worker, the log on disk: create, read, update and delete a
conversation, list and add its items, and the same conversation read from the Python API."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from temporalio.worker import Worker

from store.backends.folder import FolderStore
from store.log.state import Log
from tests.openai.kit import protocol_client, text_of
from tests.support.functai_kit import offline, reply, tutor
from threadline.client import Threadline


async def test_a_conversation_with_three_turns_lists_its_items(tl: Threadline, worker: Worker) -> None:
    """Three responses in a conversation: six items, oldest first with `order=asc`, newest first by
    default, paged with `limit` and `after`; each item id names its turn, and the Python API reads
    the same turns."""
    async with protocol_client(tl) as client:
        conversation = await client.conversations.create(metadata={"user": "u-1"})
        responses = [
            await client.responses.create(model="offline", input=text, conversation=conversation.id)
            for text in ("one", "two", "three")
        ]
        ascending = await client.conversations.items.list(conversation.id, order="asc")
        paged = [item.id async for item in client.conversations.items.list(conversation.id, limit=4)]
        after = await client.conversations.items.list(conversation.id, order="asc", after=str(ascending.data[1].id))

    turns = [r.id.split("~")[0] for r in responses]
    expected = [f"msg-{side}-{turn}" for turn in turns for side in ("in", "out")]
    assert expected == [item.id for item in ascending.data]
    assert expected[::-1] == paged
    assert expected[2:] == [item.id for item in after.data]
    assert ["one", "two", "three"] == [text_of(ascending.data[i]) for i in (0, 2, 4)]
    assert [r.output_text for r in responses] == [text_of(ascending.data[i]) for i in (1, 3, 5)]
    assert "I was shown 2 earlier turn(s)" in responses[2].output_text
    assert [r.id for r in responses[:2]] == [r.previous_response_id for r in responses[1:]]
    native = await tl.conversation("chat", id=conversation.id).turns()
    assert turns == [t.id for t in native]


async def test_create_retrieve_update_delete(tl: Threadline, worker: Worker, folder: Path) -> None:
    """Metadata is kept and replaced; after delete the protocol answers 404 while the records stay."""
    async with protocol_client(tl) as client:
        made = await client.conversations.create(
            metadata={"topic": "fractions"}, items=[{"role": "user", "content": "Hi, I'm Alex."}]
        )
        read = await client.conversations.retrieve(made.id)
        updated = await client.conversations.update(made.id, metadata={"topic": "geometry"})
        items = await client.conversations.items.list(made.id, order="asc")
        deleted = await client.conversations.delete(made.id)
        with pytest.raises(openai.NotFoundError) as gone:
            await client.conversations.retrieve(made.id)

    assert ({"topic": "fractions"}, made.created_at) == (read.metadata, read.created_at)
    assert {"topic": "geometry"} == updated.metadata
    assert ["Hi, I'm Alex."] == [text_of(item) for item in items.data]
    assert (made.id, True, "conversation.deleted") == (deleted.id, deleted.deleted, deleted.object)
    assert "not_found" == gone.value.code
    assert 1 == len(Log(FolderStore(folder).read(made.id)).order)  # the imported turn is kept


async def test_items_create_records_turns_without_a_model_call(tl: Threadline, worker: Worker) -> None:
    """A user message and the assistant message after it are one done turn; the next response is
    shown it."""
    async with protocol_client(tl) as client:
        conversation = await client.conversations.create()
        added = await client.conversations.items.create(
            conversation.id,
            items=[
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "My name is Ada."}]},
                {"type": "message", "role": "assistant", "content": "Hello Ada!"},
            ],
        )
        answer = await client.responses.create(input="What is my name?", conversation=conversation.id)

    turn = (await tl.conversation("chat", id=conversation.id).turns())[0]
    assert [f"msg-in-{turn.id}", f"msg-out-{turn.id}"] == [item.id for item in added.data]
    assert ("done", "Hello Ada!") == (turn.state, turn.result)
    assert "I was shown 1 earlier turn(s)" in answer.output_text


async def test_a_conversation_of_the_python_api_is_read_and_continued(tl: Threadline, worker: Worker, cid: str) -> None:
    """A conversation the Python API made is listed and continued through the protocol."""
    chat = tl.conversation("chat", id=cid)
    first = await chat.predict("from Python")
    async with protocol_client(tl) as client:
        items = await client.conversations.items.list(cid, order="asc")
        answer = await client.responses.create(input="from the protocol", conversation=cid)

    assert [f"msg-in-{first.id}", f"msg-out-{first.id}"] == [item.id for item in items.data]
    assert "I was shown 1 earlier turn(s)" in answer.output_text
    assert answer.id.split("~")[0] == await chat.current_head()


async def test_functai_reads_a_conversation_the_protocol_made(tl: Threadline, worker: Worker, folder: Path) -> None:
    """The protocol's conversation is functai's record log too: functai lists its turns and answers."""
    async with protocol_client(tl) as client:
        made = await client.responses.create(input="Hello from the client")
    assert made.conversation is not None

    with offline([reply("unused")]):
        listed = [(t.id, t.state, t.result) for t in tutor.conversation(made.conversation.id, store=str(folder)).turns]

    assert [(made.id.split("~")[0], "done", made.output_text)] == listed
