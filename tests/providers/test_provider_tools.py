"""Tool calls through the HTTP providers and the offline model: native wire forms, streamed and whole."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import httpx
import pytest
import pytest_asyncio

from activities.language_model import Message, ModelReply, ModelRequest, OfflineModel, Provider, build_request
from activities.providers import AnthropicProvider, OpenAIProvider, build_providers, request_body
from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from store.programs.program import Program
from store.programs.tools import Tool, ToolCall
from tests.support import tool_programs
from tests.support.fakeprovider import Call, FakeProvider, Reply

KEY = "sk-test-tools"
KINDS = ["openai", "anthropic"]
MODES = [(kind, stream) for kind in KINDS for stream in (True, False)]
MODE_IDS = [f"{kind}-{'streamed' if stream else 'whole'}" for kind, stream in MODES]

GARDENER = tool_programs.gardener
SORTER = dataclasses.replace(
    Program.define(
        "sorter",
        "Sort the notes.",
        inputs={"request": str},
        outputs={"label": Literal["tidy", "messy"], "result": str},
    ),
    tools=(tool_programs.read_note,),
)
CALLS = (
    Call("call_1", "read_note", {"name": "todo.md"}),
    Call("call_2", "write_note", {"name": "todo.md", "text": "- water the basil\n- sow «thyme»", "mode": "append"}),
)


@pytest.fixture(autouse=True)
def _fresh_notes() -> Iterator[None]:
    """Every test starts from the same notes, whatever the tools it ran wrote."""
    kept = dict(tool_programs.NOTES)
    yield
    tool_programs.NOTES.clear()
    tool_programs.NOTES.update(kept)


@pytest.fixture(name="fake")
def _fake() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest_asyncio.fixture(name="http")
async def _http() -> AsyncIterator[httpx.AsyncClient]:
    # trust_env off: a proxy from the environment must not carry loopback calls
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, connect=2.0), trust_env=False) as client:
        yield client


def make(kind: str, http: httpx.AsyncClient, fake: FakeProvider, *, stream: bool = True) -> Provider:
    if kind == "openai":
        return OpenAIProvider(http, base_url=fake.openai_url, api_key=KEY, stream=stream)
    return AnthropicProvider(http, base_url=fake.url, api_key=KEY, stream=stream)


def ask(program: Program = GARDENER, *, steps: tuple[Message, ...] = ()) -> ModelRequest:
    return build_request(program, [], {"request": "Merge groceries into todo."}, model="m", steps=steps)


class Sink:
    """An `on_text` that keeps every piece."""

    def __init__(self) -> None:
        self.pieces: list[str] = []

    async def __call__(self, piece: str) -> None:
        self.pieces.append(piece)


def tools_sent(kind: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools of a request body, each as `{name, description, parameters}` whatever the wire form."""
    if kind == "openai":
        assert {"function"} == {t["type"] for t in body["tools"]}
        return [{**t["function"], "description": t["function"].get("description", "")} for t in body["tools"]]
    return [
        {"name": t["name"], "description": t.get("description", ""), "parameters": t["input_schema"]}
        for t in body["tools"]
    ]


@pytest.mark.parametrize(("kind", "stream"), MODES, ids=MODE_IDS)
async def test_requests_offer_the_tools_in_the_native_form(kind: str, stream: bool, http, fake: FakeProvider):
    """OpenAI gets `type: function` tools, Anthropic tools with `input_schema`; a plain answer forces no tool."""
    fake.add(Reply("Nothing to do."))

    reply = await make(kind, http, fake, stream=stream).complete(ask())

    body = fake.requests[0].body
    assert [t.spec for t in GARDENER.tools] == tools_sent(kind, body)
    assert ("tool_choice" not in body, stream) == (True, body["stream"])
    assert ("answered", (), {"result": "Nothing to do."}) == (reply.stop, reply.calls, reply.outputs)


@pytest.mark.parametrize(("kind", "stream"), MODES, ids=MODE_IDS)
async def test_tool_calls_are_parsed_whatever_the_wire_form(kind: str, stream: bool, http, fake: FakeProvider):
    """Calls come back in order with their ids and inputs, even when each input arrives in many fragments.

    The reply stops for tools, answers nothing, and keeps what the model said beside its calls.
    """
    fake.add(Reply("Let me look.", calls=CALLS, chunks=9))
    sink = Sink()

    reply = await make(kind, http, fake, stream=stream).complete(ask(), sink)

    assert "tools" == reply.stop
    assert tuple(ToolCall(c.id, c.name, c.input or {}) for c in CALLS) == reply.calls
    assert ({}, "Let me look.", "fake-model") == (reply.outputs, reply.text, reply.model)
    assert "Let me look." == "".join(sink.pieces)  # the arguments are not the answer: they are not streamed
    assert {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18} == reply.usage


def steps_after(reply: ModelReply, results: list[str]) -> tuple[Message, ...]:
    asked = Message("assistant", reply.text, calls=reply.calls)
    return (asked, *(Message("tool", text, call_id=c.id) for c, text in zip(reply.calls, results, strict=True)))


@pytest.mark.parametrize(("kind", "stream"), MODES, ids=MODE_IDS)
async def test_tool_results_go_back_in_the_native_form(kind: str, stream: bool, http, fake: FakeProvider):
    """The next request carries the assistant's calls and each result tied to its call id, as the provider wants."""
    fake.add(Reply(calls=CALLS), Reply("Merged."))
    provider = make(kind, http, fake, stream=stream)
    first = await provider.complete(ask())
    results = [await GARDENER.tool(c.name).call(c.input) for c in first.calls]  # type: ignore[union-attr]

    final = await provider.complete(ask(steps=steps_after(first, results)))

    messages = fake.requests[1].body["messages"]
    if kind == "openai":
        arguments = [json.loads(c["function"]["arguments"]) for c in messages[-3]["tool_calls"]]
        assert {"role": "assistant", "content": None} == {k: messages[-3][k] for k in ("role", "content")}
        assert [c.input for c in CALLS] == arguments
        assert ["call_1", "call_2"] == [c["id"] for c in messages[-3]["tool_calls"]]
        assert [
            {"role": "tool", "tool_call_id": c.id, "content": r} for c, r in zip(CALLS, results, strict=True)
        ] == messages[-2:]
    else:
        uses = [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in CALLS]
        tool_results = [
            {"type": "tool_result", "tool_use_id": c.id, "content": r} for c, r in zip(CALLS, results, strict=True)
        ]
        assert [{"role": "assistant", "content": uses}, {"role": "user", "content": tool_results}] == messages[-2:]
    written = len("- water the basil" + CALLS[1].input["text"])  # type: ignore[index]
    assert ["- water the basil", f"todo.md now has {written} characters"] == results
    assert ("answered", {"result": "Merged."}) == (final.stop, final.outputs)


@pytest.mark.parametrize(("kind", "stream"), MODES, ids=MODE_IDS)
async def test_structured_outputs_still_work_with_tools(kind: str, stream: bool, http, fake: FakeProvider):
    """With tools and several outputs the model may call tools or answer in the outputs' schema.

    OpenAI sends `response_format` beside the tools; Anthropic offers `answer` after the program's
    tools with `tool_choice: any`.
    """
    outputs = {"label": "messy", "result": "Two lists say one thing."}
    fake.add(Reply(calls=CALLS[:1]), Reply(outputs=outputs, chunks=4))
    provider = make(kind, http, fake, stream=stream)

    asked = await provider.complete(ask(SORTER))
    answered = await provider.complete(ask(SORTER, steps=steps_after(asked, ["- water the basil"])))

    body = fake.requests[0].body
    if kind == "openai":
        assert (["read_note"], True) == ([t["function"]["name"] for t in body["tools"]], "response_format" in body)
    else:
        assert (["read_note", "answer"], {"type": "any"}) == ([t["name"] for t in body["tools"]], body["tool_choice"])
    assert ("tools", "read_note") == (asked.stop, asked.calls[0].name)
    assert ("answered", outputs, ()) == (answered.stop, answered.outputs, answered.calls)


async def test_anthropic_renames_its_answer_tool_when_a_program_tool_has_the_name(http, fake: FakeProvider):
    """A program tool named `answer` keeps its name; the outputs go through `answer_1`."""

    def answer(question: str) -> str:
        """Look the answer up."""
        return "42"

    program = dataclasses.replace(SORTER, tools=(Tool.from_function(answer),))
    outputs = {"label": "tidy", "result": "ok"}
    fake.add(Reply(calls=(Call("toolu_1", "answer", {"question": "why"}),)), Reply(outputs=outputs))
    provider = make("anthropic", http, fake)

    asked = await provider.complete(ask(program))
    answered = await provider.complete(ask(program, steps=steps_after(asked, ["42"])))

    assert ["answer", "answer_1"] == [t["name"] for t in fake.requests[0].body["tools"]]
    assert (("answer",), outputs) == (tuple(c.name for c in asked.calls), answered.outputs)


@pytest.mark.parametrize(("kind", "stream"), MODES, ids=MODE_IDS)
async def test_a_call_whose_input_is_not_a_json_object_is_parse_failed(kind: str, stream: bool, http, fake):
    """Arguments that are not a JSON object make the reply unreadable: `parse-failed`."""
    fake.add(Reply(calls=(Call("call_1", "read_note", arguments='["todo.md"]'),)))

    with pytest.raises(ThreadlineError) as caught:
        await make(kind, http, fake, stream=stream).complete(ask())

    assert (ErrorCode.PARSE_FAILED, "read_note") == (caught.value.code, caught.value.details["tool"])


async def test_openai_calls_sent_whole_without_an_index_are_kept_apart():
    """A compatible server that sends each call whole in one delta, with no index, still gives two calls."""
    chunks = [
        {"choices": [{"delta": {"tool_calls": [{"id": "a", "function": {"name": "read_note", "arguments": "{}"}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"id": "b", "function": {"name": "count_notes", "arguments": ""}}]}}]},
    ]
    stream = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=stream.encode(), headers={"content-type": "text/event-stream"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        reply = await OpenAIProvider(http, api_key=KEY).complete(ask())

    assert (ToolCall("a", "read_note", {}), ToolCall("b", "count_notes", {})) == reply.calls


# ------------------------------------------------------------------ the offline model and render


async def test_the_offline_model_calls_each_tool_once_then_quotes_the_results():
    """Offered tools and no results: one call per tool, in order, inputs sampled (text takes the message).

    The inputs fit the tools, and once the results follow, the answer quotes them. Twice, the same.
    """
    model = OfflineModel()

    asked = await model.complete(ask())
    results = [await GARDENER.tool(c.name).call(c.input) for c in asked.calls]  # type: ignore[union-attr]
    answered = await model.complete(ask(steps=steps_after(asked, results)))

    message = "Merge groceries into todo."
    expected_calls = (
        ToolCall("offline_1", "read_note", {"name": message}),
        ToolCall("offline_2", "write_note", {"name": message, "text": message}),
        ToolCall("offline_3", "count_notes", {}),
    )
    assert ("tools", expected_calls, {}) == (asked.stop, asked.calls, asked.outputs)
    assert "answered" == answered.stop
    assert answered.outputs["result"].endswith(
        f"Tools said: read_note: ; write_note: {message} now has 26 characters; count_notes: 3."
    )
    assert (asked, answered) == (
        await model.complete(ask()),
        await model.complete(ask(steps=steps_after(asked, results))),
    )


async def test_the_offline_model_answers_a_program_without_tools_as_before():
    """No tools: it answers at once, naming what it was told and the earlier turns it was shown."""
    program = dataclasses.replace(GARDENER, tools=(), approve=None)

    reply = await OfflineModel().complete(ask(program))

    assert ("answered", ()) == (reply.stop, reply.calls)
    assert "(offline) You said: Merge groceries into todo. I was shown 0 earlier turn(s)." == reply.outputs["result"]


@pytest.mark.parametrize("model", ["openai:m", "anthropic:m", "offline"])
def test_render_shows_the_tools_and_the_tool_messages(model: str):
    """The body `render` shows holds the tools and this turn's calls and results in the provider's form."""
    reply = ModelReply(
        outputs={}, model="m", calls=(ToolCall("call_1", "read_note", {"name": "todo.md"}),), stop="tools"
    )
    body = request_body(model, ask(steps=steps_after(reply, ["- water the basil"])), env={})

    names = [t.get("name") or t["function"]["name"] for t in body["tools"]]
    calls, results = body["messages"][-2:]
    assert ["read_note", "write_note", "count_notes"] == names
    assert "call_1" in json.dumps(calls)
    assert ("call_1", "- water the basil") == _result_of(model, results)


def _result_of(model: str, message: dict[str, Any]) -> tuple[str, str]:
    if model == "openai:m":
        return message["tool_call_id"], message["content"]
    if model == "anthropic:m":
        return message["content"][0]["tool_use_id"], message["content"][0]["content"]
    return message["call_id"], message["content"]


def test_stream_settings_choose_whole_replies():
    """`OPENAI_STREAM=false` and `ANTHROPIC_STREAM=0` ask for whole replies; anything else but true is refused."""
    settings = Settings.from_env({})
    client = httpx.AsyncClient()
    env = {"OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY}

    streamed = build_providers(settings, client, env=env)
    whole = build_providers(settings, client, env={**env, "OPENAI_STREAM": "false", "ANTHROPIC_STREAM": "0"})

    assert [True, True] == [streamed["openai"].stream, streamed["anthropic"].stream]  # type: ignore[attr-defined]
    assert [False, False] == [whole["openai"].stream, whole["anthropic"].stream]  # type: ignore[attr-defined]
    assert False is request_body("openai:m", ask(), env={"OPENAI_STREAM": "false"})["stream"]
    with pytest.raises(ThreadlineError) as caught:
        build_providers(settings, client, env={**env, "OPENAI_STREAM": "sometimes"})
    assert ErrorCode.INVALID_REQUEST == caught.value.code
