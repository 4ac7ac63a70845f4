"""Anthropic's Messages API over httpx, streamed.

One plain string output is asked as text. Anything else is asked through one forced tool,
`answer`, whose input schema is the outputs object: its streamed input is the outputs' JSON.

A program's tools are `tools` with an `input_schema`. The model calls them with `tool_use`
content blocks (the input streams as `input_json_delta` fragments of the block's index); calls
go back as the assistant's `tool_use` blocks and results as `tool_result` blocks of the next user
message. With tools and structured outputs, `answer` is offered beside them with `tool_choice:
any`, so each reply either calls tools or answers through `answer` (forcing `answer` would leave
the model no way to call anything; letting it answer in prose would lose the outputs' schema).
`stream=False` asks for whole replies.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import httpx
import pydantic

from activities.language_model import Message, ModelReply, ModelRequest, TextSink
from core.errors import ErrorCode, ThreadlineError

from ._http import Collected, is_plain, outputs_schema, parse_event, post_events, post_json, provider_error, stream_cut

NAME = "anthropic"
ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
ANSWER_TOOL = "answer"

# the status each error type of an `error` event stands for, so one map decides what is retried
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


class _Usage(pydantic.BaseModel):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _Message(pydantic.BaseModel):
    model: str | None = None
    usage: _Usage = pydantic.Field(default_factory=_Usage)


class _Delta(pydantic.BaseModel):
    type: str | None = None
    text: str | None = None
    partial_json: str | None = None
    stop_reason: str | None = None


class _Event(pydantic.BaseModel):
    type: str
    message: _Message | None = None
    index: int | None = None
    content_block: dict[str, Any] | None = None
    delta: _Delta | None = None
    usage: _Usage | None = None
    error: dict[str, Any] | None = None


class _Whole(_Message):
    content: list[dict[str, Any]] = pydantic.Field(default_factory=list)
    stop_reason: str | None = None


@dataclass(slots=True)
class _Reading:
    """A reply being read: what it collected, the answer tool's name, and what each content block is."""

    collected: Collected
    answer: str
    blocks: dict[int, str] = field(default_factory=dict)
    """`answer`, `call` or `text`, by the block's index."""


class AnthropicProvider:
    """Answers model requests with Anthropic's Messages API.

    Args:
        client: The worker's shared client; it must not retry, Temporal does.
        base_url: The API root; `/v1/messages` is appended.
        api_key: Sent as `x-api-key`; without one every request is refused before it is sent.
        max_tokens: The most tokens a reply may have (the API requires a bound).
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        base_url: str = ANTHROPIC_BASE_URL,
        api_key: str | None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        stream: bool = True,
    ) -> None:
        self._client = client
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key or None
        self.max_tokens = max_tokens
        self.stream = stream

    def __repr__(self) -> str:
        key = "<set>" if self._api_key else None
        return f"AnthropicProvider(base_url={self.base_url!r}, api_key={key}, max_tokens={self.max_tokens})"

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply:
        """Answer `request`, passing each streamed piece of text (or of the answer's JSON) to `on_text`.

        Raises:
            ThreadlineError: `provider-unconfigured` (no key), `provider-unavailable` (retryable),
                `provider-rejected`, or `parse-failed` for outputs that are not there.
        """
        if self._api_key is None:
            message = "anthropic has no API key; set ANTHROPIC_API_KEY on the worker"
            raise ThreadlineError(ErrorCode.PROVIDER_UNCONFIGURED, message)
        reading = _Reading(Collected(model=request.model, outputs=request.outputs), answer_tool(request))
        sent = self._request(request, self._api_key)
        if not self.stream:
            await _take_whole(await post_json(self._client, sent, provider=NAME), reading, on_text)
            return reading.collected.reply(NAME, secret=self._api_key)
        events = post_events(self._client, sent, provider=NAME)
        async with aclosing(events):
            async for event in events:
                parsed = parse_event(_Event, event, provider=NAME)
                if parsed.type == "message_stop":
                    return reading.collected.reply(NAME, secret=self._api_key)
                await _take(parsed, reading, on_text)
        raise stream_cut(NAME)

    def _request(self, request: ModelRequest, api_key: str) -> httpx.Request:
        accept = "text/event-stream" if self.stream else "application/json"
        headers = {"accept": accept, "x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION}
        body = messages_body(request, max_tokens=self.max_tokens, stream=self.stream)
        return self._client.build_request("POST", f"{self.base_url}/v1/messages", headers=headers, json=body)


def answer_tool(request: ModelRequest) -> str:
    """The name of the tool that carries the outputs: `answer`, unless a tool of the program has it."""
    taken = {str(t["name"]) for t in request.tools}
    return next(n for n in (ANSWER_TOOL, *(f"{ANSWER_TOOL}_{i}" for i in range(1, len(taken) + 2))) if n not in taken)


def messages_body(request: ModelRequest, *, max_tokens: int, stream: bool = True) -> dict[str, Any]:
    """The Messages body for `request`: the instruction as `system`, the tools, the outputs as a tool."""
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens or max_tokens,  # the request's own bound (a summary's) first
        "messages": _messages(request.messages),
        "stream": stream,
    }
    if request.instruction:
        body["system"] = request.instruction
    tools = [_tool(t) for t in request.tools]
    if not is_plain(request.outputs):
        name = answer_tool(request)
        description = f"Give the outputs of {request.program}."
        tools.append({"name": name, "description": description, "input_schema": outputs_schema(request.outputs)})
        body["tool_choice"] = {"type": "any"} if request.tools else {"type": "tool", "name": name}
    if tools:
        body["tools"] = tools
    return body


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    described = {"description": tool["description"]} if tool.get("description") else {}
    return {"name": tool["name"], **described, "input_schema": tool["parameters"]}


def _messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The messages in Anthropic's form; a tool result is a block of a user message, and blocks of one
    role in a row share a message, since every result must follow its calls in the next user message."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"
        content = _content(message)
        last = out[-1] if out else None
        if (
            last is not None
            and last["role"] == role
            and (isinstance(content, list) or isinstance(last["content"], list))
        ):
            last["content"] = _blocks(last["content"]) + _blocks(content)
        else:
            out.append({"role": role, "content": content})
    return out


def _content(message: Message) -> str | list[dict[str, Any]]:
    if message.role == "tool":
        result = {"content": message.content} if message.content else {}
        return [{"type": "tool_result", "tool_use_id": message.call_id, **result}]
    if not message.calls:
        return message.content
    uses = [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in message.calls]
    return _blocks(message.content) + uses


def _blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Anthropic refuses an empty text block
    return content if isinstance(content, list) else [{"type": "text", "text": content}] if content else []


async def _take_whole(data: Any, reading: _Reading, on_text: TextSink | None) -> None:
    try:
        whole = _Whole.model_validate(data)
    except pydantic.ValidationError:
        message = f"{NAME} sent a malformed reply; the call will be retried"
        raise ThreadlineError(ErrorCode.PROVIDER_UNAVAILABLE, message, retryable=True) from None
    stop = _Delta(stop_reason=whole.stop_reason)
    await _take(_Event(type="message_delta", message=whole, delta=stop, usage=whole.usage), reading, on_text)
    for index, block in enumerate(whole.content):
        _start_block(index, block, reading)
        if block.get("type") == "text":
            await _add_text(str(block.get("text") or ""), reading, on_text)
        elif block.get("type") == "tool_use":
            piece = json.dumps(block.get("input") or {}, ensure_ascii=False)
            if reading.blocks[index] == "answer":
                await reading.collected.add(piece, on_text, said=False)
            else:
                reading.collected.calls.add(index, piece=piece)


async def _add_text(piece: str, reading: _Reading, on_text: TextSink | None) -> None:
    if reading.collected.plain:
        await reading.collected.add(piece, on_text)
    elif piece:
        reading.collected.said.append(piece)


async def _take(event: _Event, reading: _Reading, on_text: TextSink | None) -> None:
    collected = reading.collected
    if event.type == "error":
        kind = (event.error or {}).get("type")
        reason = kind if isinstance(kind, str) and kind in _ERROR_STATUS else None
        raise provider_error(NAME, _ERROR_STATUS.get(reason or "", 500), reason=reason)
    if event.message is not None:
        usage = event.message.usage
        collected.model = event.message.model or collected.model
        # cached prompt tokens are still tokens the model was shown
        parts = (usage.input_tokens, usage.cache_creation_input_tokens, usage.cache_read_input_tokens)
        collected.input_tokens = sum(n or 0 for n in parts)
    if event.usage is not None and event.usage.output_tokens is not None:
        collected.output_tokens = event.usage.output_tokens
    if event.type == "content_block_start" and event.index is not None:
        _start_block(event.index, event.content_block or {}, reading)
    delta = event.delta
    if delta is None:
        return
    if delta.stop_reason == "refusal":
        collected.refused = True
    kind = reading.blocks.get(event.index or 0, "text")
    if delta.type == "text_delta":
        await _add_text(delta.text or "", reading, on_text)
    elif delta.type == "input_json_delta" and kind == "answer":
        await collected.add(delta.partial_json or "", on_text, said=False)
    elif delta.type == "input_json_delta" and kind == "call":
        collected.calls.add(event.index, piece=delta.partial_json or "")


def _start_block(index: int, block: Mapping[str, Any], reading: _Reading) -> None:
    if block.get("type") != "tool_use":
        reading.blocks[index] = "text"
    elif block.get("name") == reading.answer:
        reading.blocks[index] = "answer"
    else:
        reading.blocks[index] = "call"
        reading.collected.calls.add(index, id=str(block.get("id") or ""), name=str(block.get("name") or ""))
