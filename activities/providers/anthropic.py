"""Anthropic's Messages API over httpx, streamed.

One plain string output is asked as text. Anything else is asked through one forced tool,
`answer`, whose input schema is the outputs object: its streamed input is the outputs' JSON.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import httpx
import pydantic

from activities.models import ModelReply, ModelRequest, TextSink
from core.errors import ErrorCode, ThreadlineError

from ._http import Collected, is_plain, outputs_schema, parse_event, post_events, provider_error, stream_cut

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
    delta: _Delta | None = None
    usage: _Usage | None = None
    error: dict[str, Any] | None = None


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
    ) -> None:
        self._client = client
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key or None
        self.max_tokens = max_tokens

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
        collected = Collected(model=request.model, outputs=request.outputs)
        events = post_events(self._client, self._request(request, self._api_key), provider=NAME)
        async with aclosing(events):
            async for event in events:
                parsed = parse_event(_Event, event, provider=NAME)
                if parsed.type == "message_stop":
                    return collected.reply(NAME)
                await _take(parsed, collected, on_text)
        raise stream_cut(NAME)

    def _request(self, request: ModelRequest, api_key: str) -> httpx.Request:
        headers = {"accept": "text/event-stream", "x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION}
        body = messages_body(request, max_tokens=self.max_tokens)
        return self._client.build_request("POST", f"{self.base_url}/v1/messages", headers=headers, json=body)


def messages_body(request: ModelRequest, *, max_tokens: int) -> dict[str, Any]:
    """The streamed Messages body for `request`: the instruction as `system`, outputs as a forced tool."""
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": max_tokens,
        "messages": [{"role": m.role, "content": m.content} for m in request.messages],
        "stream": True,
    }
    if request.instruction:
        body["system"] = request.instruction
    if not is_plain(request.outputs):
        tool = {
            "name": ANSWER_TOOL,
            "description": f"Give the outputs of {request.program}.",
            "input_schema": outputs_schema(request.outputs),
        }
        body["tools"] = [tool]
        body["tool_choice"] = {"type": "tool", "name": ANSWER_TOOL}
    return body


async def _take(event: _Event, collected: Collected, on_text: TextSink | None) -> None:
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
    delta = event.delta
    if delta is None:
        return
    if delta.stop_reason == "refusal":
        collected.refused = True
    wanted = "text_delta" if collected.plain else "input_json_delta"
    if delta.type == wanted:
        await collected.add((delta.text if collected.plain else delta.partial_json) or "", on_text)
