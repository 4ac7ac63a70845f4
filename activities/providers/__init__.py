"""Model providers over httpx, and the worker's choice of them from the environment.

`build_providers` gives the offline model always, `openai` when `OPENAI_API_KEY` or
`OPENAI_BASE_URL` is set (a base URL alone serves a local server with no key), and `anthropic`
when `ANTHROPIC_API_KEY` is set. Keys stay in the providers' request headers: never in a
request, a reply, a record, an error or a log line. `OPENAI_STREAM=false` (or
`ANTHROPIC_STREAM=false`) asks for whole replies, for servers that cannot stream tool calls.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol

import httpx

from activities.language_model import Message, ModelRequest, OfflineModel, Provider, split_model
from core.errors import ErrorCode, ThreadlineError

from ._http import MAX_RETRY_AFTER, RETRYABLE_STATUSES, provider_error, retry_after
from .anthropic import ANTHROPIC_BASE_URL, DEFAULT_MAX_TOKENS, AnthropicProvider, messages_body
from .openai import OPENAI_BASE_URL, OpenAIProvider, chat_body

__all__ = [
    "ANTHROPIC_BASE_URL",
    "HTTP_TIMEOUT",
    "MAX_RETRY_AFTER",
    "OPENAI_BASE_URL",
    "RETRYABLE_STATUSES",
    "AnthropicProvider",
    "OpenAIProvider",
    "ProviderSettings",
    "build_providers",
    "new_http_client",
    "provider_error",
    "request_body",
    "retry_after",
]

HTTP_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
"""Per connect (10 s) and per read or write (60 s): a streamed reply may take longer in all."""


class ProviderSettings(Protocol):
    """What `build_providers` reads from the worker's settings."""

    @property
    def offline_delay_s(self) -> float:
        """Seconds the offline model spends per reply."""
        ...


def request_body(model: str, request: ModelRequest, *, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The JSON body the provider of `model` would be sent for `request` (what `render` shows)."""
    prefix, _ = split_model(model)
    env = os.environ if env is None else env
    if prefix == "openai":
        return chat_body(request, stream=_stream(env, "OPENAI_STREAM"))
    if prefix == "anthropic":
        return messages_body(request, max_tokens=_max_tokens(env), stream=_stream(env, "ANTHROPIC_STREAM"))
    body = {
        "model": request.model,
        "instruction": request.instruction,
        "messages": [_offline_message(m) for m in request.messages],
        "outputs": [dict(f) for f in request.outputs],
    }
    return {**body, "tools": [dict(t) for t in request.tools]} if request.tools else body


def _offline_message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.calls:
        out["calls"] = [c.as_json() for c in message.calls]
    if message.call_id:
        out["call_id"] = message.call_id
    return out


def new_http_client() -> httpx.AsyncClient:
    """The client providers share: default transport, so httpx never retries (Temporal does)."""
    return httpx.AsyncClient(timeout=HTTP_TIMEOUT)


def build_providers(
    settings: ProviderSettings, client: httpx.AsyncClient, *, env: Mapping[str, str] | None = None
) -> dict[str, Provider]:
    """The providers a worker can call, by model-string prefix, configured from `env`.

    Args:
        settings: The worker's settings (the offline model's delay).
        client: The shared httpx client every HTTP provider calls through.
        env: Where keys and base URLs are read (default: the process environment).

    Raises:
        ThreadlineError: `invalid-request` for an `ANTHROPIC_MAX_TOKENS` or `*_STREAM` it cannot read.
    """
    env = os.environ if env is None else env
    providers: dict[str, Provider] = {"offline": OfflineModel(delay=settings.offline_delay_s)}
    openai_key, openai_url = env.get("OPENAI_API_KEY") or None, env.get("OPENAI_BASE_URL") or None
    if openai_key or openai_url:
        providers["openai"] = OpenAIProvider(
            client, base_url=openai_url or OPENAI_BASE_URL, api_key=openai_key, stream=_stream(env, "OPENAI_STREAM")
        )
    anthropic_key = env.get("ANTHROPIC_API_KEY") or None
    if anthropic_key:
        providers["anthropic"] = AnthropicProvider(
            client,
            base_url=env.get("ANTHROPIC_BASE_URL") or ANTHROPIC_BASE_URL,
            api_key=anthropic_key,
            max_tokens=_max_tokens(env),
            stream=_stream(env, "ANTHROPIC_STREAM"),
        )
    return providers


def _max_tokens(env: Mapping[str, str]) -> int:
    raw = env.get("ANTHROPIC_MAX_TOKENS") or ""
    if not raw:
        return DEFAULT_MAX_TOKENS
    if not raw.isdigit() or int(raw) < 1:
        message = f"ANTHROPIC_MAX_TOKENS={raw!r} is not a positive whole number; set it like ANTHROPIC_MAX_TOKENS=4096"
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, message)
    return int(raw)


def _stream(env: Mapping[str, str], name: str) -> bool:
    raw = (env.get(name) or "true").strip().lower()
    if raw not in ("true", "false", "1", "0"):
        message = f"{name}={raw!r} is not true or false; set it like {name}=false"
        raise ThreadlineError(ErrorCode.INVALID_REQUEST, message)
    return raw in ("true", "1")
