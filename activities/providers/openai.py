"""OpenAI Chat Completions over httpx, streamed: OpenAI itself and every compatible server.

Ollama, vLLM, llama.cpp and LM Studio speak the same wire format at their own base URL, often
with no key. One plain string output is asked as text; anything else as structured outputs
(`response_format: json_schema`), strict when OpenAI's strict subset of JSON Schema holds it.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any
from urllib.parse import urlsplit

import httpx
import pydantic

from activities.models import ModelReply, ModelRequest, TextSink
from core.errors import ErrorCode, ThreadlineError

from ._http import Collected, is_plain, outputs_schema, parse_event, post_events, provider_error, stream_cut

NAME = "openai"
OPENAI_BASE_URL = "https://api.openai.com/v1"

_STRICT_KEYWORDS = frozenset(
    {"type", "enum", "const", "anyOf", "items", "properties", "required", "additionalProperties", "$defs", "$ref"}
    | {"title", "description", "pattern", "format", "minItems", "maxItems"}
    | {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)
_TYPED = frozenset({"type", "enum", "const", "anyOf", "$ref"})


class _Delta(pydantic.BaseModel):
    content: str | None = None
    refusal: str | None = None


class _Choice(pydantic.BaseModel):
    delta: _Delta | None = None


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

    def __init__(self, client: httpx.AsyncClient, *, base_url: str = OPENAI_BASE_URL, api_key: str | None) -> None:
        self._client = client
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key or None

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
        events = post_events(self._client, self._request(request), provider=NAME)
        async with aclosing(events):
            async for event in events:
                if event.data == "[DONE]":
                    return collected.reply(NAME)
                await _take(parse_event(_Chunk, event, provider=NAME), collected, on_text)
        raise stream_cut(NAME)

    def _request(self, request: ModelRequest) -> httpx.Request:
        headers = {"accept": "text/event-stream"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        url = f"{self.base_url}/chat/completions"
        return self._client.build_request("POST", url, headers=headers, json=chat_body(request))


def chat_body(request: ModelRequest) -> dict[str, Any]:
    """The streamed Chat Completions body for `request`: the instruction as the system message."""
    messages = [{"role": "system", "content": request.instruction}] if request.instruction else []
    messages += [{"role": m.role, "content": m.content} for m in request.messages]
    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
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
    for delta in (choice.delta for choice in chunk.choices or () if choice.delta is not None):
        if delta.refusal:
            collected.refused = True
        await collected.add(delta.content or "", on_text)


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
