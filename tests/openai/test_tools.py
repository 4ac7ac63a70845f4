"""Function tools through the official `openai` client: the model calls the caller's function, the
response holds the `function_call`, the caller sends its `function_call_output` and the same turn
goes on to the answer; the conversation's items show the call and its output, and the log holds
them as format 1's `tool` records (functai reads it: tests/interop)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai import BadRequestError, ConflictError
from temporalio.worker import Worker

from core.settings import Settings
from store.backends.folder import FolderStore
from store.log.state import Log
from tests.openai.kit import protocol_client, turn_of
from tests.support.fakeprovider import Call, FakeProvider, Reply
from threadline.client import Threadline

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def output(call_id: str, text: str) -> Any:
    """A `function_call_output` input item."""
    return {"type": "function_call_output", "call_id": call_id, "output": text}


async def test_a_function_tool_round_trip(tl: Threadline, worker: Worker, folder: Path) -> None:
    """The offline model calls the function; the response holds the call; its output sent with
    `previous_response_id` ends the same turn with an answer that quotes it."""
    async with protocol_client(tl) as client:
        conversation = await client.conversations.create()
        first = await client.responses.create(
            model="offline", input="Weather in Paris?", conversation=conversation.id, tools=[WEATHER]
        )
        call = first.output[0]
        assert "function_call" == call.type
        with pytest.raises(ConflictError) as busy:  # the turn waits for the caller: no send queues behind it
            await client.responses.create(model="offline", input="And Rome?", conversation=conversation.id)
        outputs = [output(call.call_id, "Sunny, 21 C")]
        answered = await client.responses.create(
            model="offline", previous_response_id=first.id, input=outputs, tools=[WEATHER]
        )
        again = await client.responses.create(model="offline", previous_response_id=first.id, input=outputs)
        listed = await client.conversations.items.list(conversation.id, order="asc")

    assert ("completed", "completed", "get_weather") == (first.status, call.status, call.name)
    assert {"city": "Weather in Paris?"} == json.loads(call.arguments)
    assert answered.id == first.id  # the same turn went on
    assert "conversation_locked" == busy.value.code
    assert (answered.id, answered.output_text) == (again.id, again.output_text)  # the same outputs again
    assert answered.output_text.endswith("Tools said: get_weather: Sunny, 21 C.")
    kinds = [item.type for item in listed.data]
    assert ["message", "function_call", "function_call_output", "message"] == kinds
    assert "Sunny, 21 C" == listed.data[2].output  # type: ignore[union-attr]
    turn = Log(FolderStore(folder).read(conversation.id)).turns[turn_of(first.id)]
    assert ["started", "given"] == [t["state"] for t in turn.tools]
    assert "done" == (turn.ended or {}).get("state")


async def test_the_fake_provider_is_offered_the_function_and_shown_its_output(
    tl: Threadline, live: Settings, fake: FakeProvider
) -> None:
    """Over OpenAI's wire: the request offers the caller's function; after the output is sent with
    `conversation`, the next request shows the call and its output, and the answer is the model's."""
    fake.add(Reply(calls=(Call("call_w1", "get_weather", {"city": "Paris"}),)), Reply("It is sunny in Paris."))
    async with protocol_client(tl) as client:
        conversation = await client.conversations.create()
        first = await client.responses.create(
            model="gpt-4o-mini", input="Weather in Paris?", conversation=conversation.id, tools=[WEATHER]
        )
        answered = await client.responses.create(
            model="gpt-4o-mini", conversation=conversation.id, input=[output("call_w1", "Sunny, 21 C")]
        )
        again = await client.responses.retrieve(first.id)

    assert ["call_w1"] == [item.call_id for item in first.output]  # type: ignore[union-attr]
    offered = fake.requests[0].body["tools"]
    assert ["get_weather"] == [t.get("name") or t["function"]["name"] for t in offered]
    assert "Sunny, 21 C" in str(fake.requests[1].body)
    assert "It is sunny in Paris." == answered.output_text == again.output_text


async def test_outputs_for_calls_never_made_are_refused(tl: Threadline, worker: Worker) -> None:
    """An output for a call the response did not make is a 400 naming `input`; nothing goes on."""
    async with protocol_client(tl) as client:
        first = await client.responses.create(model="offline", input="Weather?", tools=[WEATHER])
        with pytest.raises(BadRequestError) as caught:
            await client.responses.create(previous_response_id=first.id, input=[output("call_nope", "x")])
        still = await client.responses.retrieve(first.id)

    assert "input" == caught.value.body["param"]  # type: ignore[index]
    assert "function_call" == still.output[0].type
