"""OpenAI Chat Completions over httpx, streamed: OpenAI itself and every compatible server.

Ollama, vLLM, llama.cpp and LM Studio speak the same wire format at their own base URL, often
with no key. One plain string output is asked as text; anything else as structured outputs
(`response_format: json_schema`), strict when OpenAI's strict subset of JSON Schema holds it.

Tools are `tools` of `type: function`. A reply either calls some (`tool_calls`, their arguments
JSON text that streams in fragments by index) or answers in `content`, in the outputs' schema
when there are several: `response_format` and `tools` go together, so a program with tools and
structured outputs needs nothing more. Calls go back as the assistant's `tool_calls`, results as
`role: tool` messages naming the `tool_call_id`. `stream=False` asks for whole replies, for
compatible servers that cannot stream tool calls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import aclosing
from typing import Any
from urllib.parse import urlsplit

import httpx
import pydantic

from activities.language_model import Message, ModelReply, ModelRequest, TextSink
from core.errors import ErrorCode, ThreadlineError

from ._http import Collected, is_plain, outputs_schema, parse_event, post_events, post_json, provider_error, stream_cut

NAME = "openai"
OPENAI_BASE_URL = "https://api.openai.com/v1"

_STRICT_KEYWORDS = frozenset(
    {"type", "enum", "const", "anyOf", "items", "properties", "required", "additionalProperties", "$defs", "$ref"}
    | {"title", "description", "pattern", "format", "minItems", "maxItems"}
    | {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)
_TYPED = frozenset({"type", "enum", "const", "anyOf", "$ref"})


class _Function(pydantic.BaseModel):
    name: str | None = None
    arguments: str | None = None


class _Call(pydantic.BaseModel):
    index: int | None = None
    id: str | None = None
    function: _Function | None = None


class _Delta(pydantic.BaseModel):
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[_Call] | None = None


class _Choice(pydantic.BaseModel):
    delta: _Delta | None = None
    message: _Delta | None = None
    """A whole reply's message, which has the same parts as a streamed delta."""


class _Usage(pydantic.BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Chunk(pydantic.BaseModel):
    model: str | None = None
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: dict[str, Any] | str | None = None


class OpenAIProvider:
    """Answers model requests with a Chat Completions API.

    Args:
        client: The worker's shared client; it must not retry, Temporal does.
        base_url: The API root, `/chat/completions` is appended (`http://localhost:11434/v1`).
        api_key: Sent as a bearer token. Only OpenAI's own URL needs one; without it, no
            Authorization header is sent.
    """

    def __init__(
        self, client: httpx.AsyncClient, *, base_url: str = OPENAI_BASE_URL, api_key: str | None, stream: bool = True
    ) -> None:
        self._client = client
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key or None
        self.stream = stream

    def __repr__(self) -> str:
        return f"OpenAIProvider(base_url={self.base_url!r}, api_key={'<set>' if self._api_key else None})"

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        """Answer `request`, passing each streamed piece of text (or of JSON) to `on_text`.

        Raises:
            ThreadlineError: `provider-unconfigured` (no key for OpenAI itself), `provider-unavailable`
                (retryable), `provider-rejected`, or `parse-failed` for outputs that are not there.
        """
        if self._api_key is None and urlsplit(self.base_url).hostname == urlsplit(OPENAI_BASE_URL).hostname:
            message = "openai has no API key; set OPENAI_API_KEY on the worker"
            raise ThreadlineError(ErrorCode.PROVIDER_UNCONFIGURED, message)
        collected = Collected(model=request.model, outputs=request.outputs)
        if not self.stream:
            whole = await post_json(self._client, self._request(request), provider=NAME)
            await _take(_parse_whole(whole), collected, on_text)
            return collected.reply(NAME, secret=self._api_key)
        events = post_events(self._client, self._request(request), provider=NAME)
        async with aclosing(events):
            async for event in events:
                if event.data == "[DONE]":
                    return collected.reply(NAME, secret=self._api_key)
                await _take(parse_event(_Chunk, event, provider=NAME), collected, on_text)
        raise stream_cut(NAME)

    def _request(self, request: ModelRequest) -> httpx.Request:
        headers = {"accept": "text/event-stream" if self.stream else "application/json"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        url = f"{self.base_url}/chat/completions"
        body = chat_body(request, stream=self.stream)
        return self._client.build_request("POST", url, headers=headers, json=body)


def chat_body(request: ModelRequest, *, stream: bool = True) -> dict[str, Any]:
    """The Chat Completions body for `request`: the instruction as the system message, the tools as functions."""
    messages = [{"role": "system", "content": request.instruction}] if request.instruction else []
    messages += [_message(m) for m in request.messages]
    body: dict[str, Any] = {"model": request.model, "messages": messages, "stream": stream}
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if stream:
        body["stream_options"] = {"include_usage": True}
    if request.tools:
        body["tools"] = [{"type": "function", "function": _function(t)} for t in request.tools]
    if not is_plain(request.outputs):
        schema = outputs_schema(request.outputs)
        strict = fits_strict(schema)
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": request.program[:64],
                "strict": strict,
                "schema": closed(schema) if strict else schema,
            },
        }
    return body


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
    if not message.calls:
        return {"role": message.role, "content": message.content}
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments(c.input)}}
        for c in message.calls
    ]
    return {"role": "assistant", "content": message.content or None, "tool_calls": calls}


def _arguments(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False)


def _function(tool: Mapping[str, Any]) -> dict[str, Any]:
    described = {"description": tool["description"]} if tool.get("description") else {}
    return {"name": tool["name"], **described, "parameters": tool["parameters"]}


def _parse_whole(data: Any) -> _Chunk:
    try:
        return _Chunk.model_validate(data)
    except pydantic.ValidationError:
        message = f"{NAME} sent a malformed reply; the call will be retried"
        raise ThreadlineError(ErrorCode.PROVIDER_UNAVAILABLE, message, retryable=True) from None


async def _take(chunk: _Chunk, collected: Collected, on_text: TextSink | None) -> None:
    if chunk.error is not None:
        # compatible servers report a failure met mid-stream as a chunk; a retry may well succeed
        code = chunk.error.get("code") if isinstance(chunk.error, dict) else None
        raise provider_error(NAME, code if isinstance(code, int) and 400 <= code < 600 else 500)
    if chunk.model:
        collected.model = chunk.model
    if chunk.usage is not None:
        collected.input_tokens = chunk.usage.prompt_tokens
        collected.output_tokens = chunk.usage.completion_tokens
    for delta in (choice.delta or choice.message for choice in chunk.choices or ()):
        if delta is None:
            continue
        if delta.refusal:
            collected.refused = True
        await collected.add(delta.content or "", on_text)
        for call in delta.tool_calls or ():
            function = call.function or _Function()
            collected.calls.add(call.index, id=call.id, name=function.name, piece=function.arguments or "")


def fits_strict(node: Any) -> bool:
    """Whether OpenAI's strict mode accepts the schema `node`.

    Strict mode knows a subset of JSON Schema and needs every object closed with named properties,
    so a free-form `dict`, an `Any`, a tuple, a set or a length bound means `strict: false`.
    """
    if not isinstance(node, dict) or not node.keys() <= _STRICT_KEYWORDS or not node.keys() & _TYPED:
        return False
    if "$ref" in node and len(node) > 1:
        return False
    types = node.get("type")
    if "object" in (types if isinstance(types, list) else [types]) and (
        not isinstance(node.get("properties"), dict) or node.get("additionalProperties", False) is not False
    ):
        return False
    children = [*(node.get("properties") or {}).values(), *(node.get("$defs") or {}).values()]
    children += [*(node.get("anyOf") or []), *([node["items"]] if "items" in node else [])]
    return all(fits_strict(child) for child in children)


def closed(node: dict[str, Any]) -> dict[str, Any]:
    """`node` with every object closed and all its properties required, as strict mode wants."""
    out = dict(node)
    if isinstance(node.get("properties"), dict):
        out["properties"] = {name: closed(shape) for name, shape in node["properties"].items()}
        out["required"] = list(node["properties"])
        out["additionalProperties"] = False
    if isinstance(node.get("$defs"), dict):
        out["$defs"] = {name: closed(shape) for name, shape in node["$defs"].items()}
    if isinstance(node.get("items"), dict):
        out["items"] = closed(node["items"])
    if isinstance(node.get("anyOf"), list):
        out["anyOf"] = [closed(shape) for shape in node["anyOf"]]
    return out
