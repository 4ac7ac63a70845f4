"""Errors in the protocol's shape, with the statuses the official client maps to its exception classes;
bad input is refused before anything is recorded."""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path

import openai
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from core.settings import Settings
from store.backends.folder import FolderStore
from tests.openai.kit import KEY, protocol_client
from tests.support.kit import slow
from threadline.client import Threadline
from worker import build_worker


async def test_a_wrong_key_is_an_authentication_error(tl: Threadline) -> None:
    """401 `invalid_api_key` for a key the service does not have, on every protocol route."""
    async with protocol_client(tl, keys=("another-key",)) as client:
        with pytest.raises(openai.AuthenticationError) as refused:
            await client.conversations.create()

    assert ("invalid_api_key", "authentication_error") == (refused.value.code, refused.value.type)


async def test_a_key_of_other_stores_is_a_permission_error(tl: Threadline) -> None:
    """403 for a key scoped to stores none of which the protocol can use for it."""
    async with protocol_client(tl, keys=(f"{KEY}:north+south",)) as client:
        with pytest.raises(openai.PermissionDeniedError) as refused:
            await client.responses.create(input="hi")

    assert "permission_denied" == refused.value.code


async def test_unknown_ids_are_not_found(tl: Threadline, worker: Worker) -> None:
    """404 for a conversation, a response or a previous response that does not exist."""
    async with protocol_client(tl) as client:
        conversation = await client.conversations.create()
        unknown = f"01a2344b-0000-7000-8000-000000000000~{conversation.id}"
        missing: list[Awaitable[object]] = [
            client.conversations.retrieve("no-such-conversation"),
            client.conversations.items.list("no-such-conversation"),
            client.responses.retrieve("not-a-response-id"),
            client.responses.retrieve(unknown),
            client.responses.create(input="hi", previous_response_id=unknown),
            client.responses.create(input="hi", conversation="no-such-conversation"),
        ]
        codes = []
        for call in missing:
            with pytest.raises(openai.NotFoundError) as refused:
                await call
            codes.append(refused.value.code)

    assert ["not_found"] * len(missing) == codes


@pytest.mark.parametrize(
    ("given", "param", "code"),
    [
        ({"model": "no-such-model"}, "model", "model_not_found"),
        ({"tools": [{"type": "web_search"}]}, "tools", "invalid_request"),
        ({"tools": [{"type": "function", "name": "f f", "parameters": {}}]}, "tools", "invalid_request"),
        ({"tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "f"}]}, "tools", "invalid_request"),
        ({"tools": [{"type": "function", "name": "f"}], "stream": True}, "stream", "invalid_request"),
        (
            {"input": [{"type": "function_call_output", "call_id": "call-1", "output": "42"}]},
            "input",
            "invalid_request",
        ),
        ({"store": False}, "store", "invalid_request"),
        ({"input": [{"role": "assistant", "content": "I said this"}]}, "input", "invalid_request"),
        ({"input": ""}, "input", "invalid_request"),
        ({"extra_body": {"prompt_cache_key": "x"}}, None, "invalid_request"),
    ],
    ids=[
        "unknown-model",
        "hosted-tool",
        "bad-function-name",
        "two-functions-of-one-name",
        "streamed-tools",
        "output-of-no-call",
        "store-false",
        "assistant-input",
        "empty-input",
        "unmapped-field",
    ],
)
async def test_bad_input_is_a_bad_request_and_records_nothing(
    tl: Threadline, worker: Worker, folder: Path, given: dict[str, object], param: str | None, code: str
) -> None:
    """400 with the protocol's code and the field at fault; no conversation, turn or record is made."""
    async with protocol_client(tl) as client:
        conversation = await client.conversations.create()
        before = FolderStore(folder).read(conversation.id)
        body = {"input": "hi", **given}
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(**body)  # type: ignore[call-overload]
        with pytest.raises(openai.BadRequestError):
            await client.responses.create(**{**body, "conversation": conversation.id})  # type: ignore[call-overload]

    assert (code, "invalid_request_error") == (refused.value.code, refused.value.type)
    if param is not None:
        assert param == refused.value.param
    assert [conversation.id] == FolderStore(folder).conversations()
    assert before == FolderStore(folder).read(conversation.id)


async def test_a_second_send_to_a_refusing_conversation_is_a_conflict(
    tl: Threadline, client: Client, settings: Settings
) -> None:
    """With `sends: refuse` (an extension), a response sent while another runs is refused with 409
    `conversation_locked`; the running one goes on."""
    async with build_worker(client, slow(settings, 2.0)), protocol_client(tl) as protocol:
        conversation = await protocol.conversations.create(extra_body={"sends": "refuse"})
        running = await protocol.responses.create(input="slow", conversation=conversation.id, background=True)
        with pytest.raises(openai.ConflictError) as refused:
            await protocol.responses.create(input="at once", conversation=conversation.id)
        turns = await tl.conversation("chat", id=conversation.id).turns(all=True)

    assert "conversation_locked" == refused.value.code
    assert [running.id.split("~")[0]] == [t.id for t in turns]
