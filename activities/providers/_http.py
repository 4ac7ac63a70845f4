"""What the HTTP providers share: one map from failures to coded errors, Retry-After, SSE, replies.

A reply comes streamed (server-sent events) or whole (one JSON body, for servers that cannot
stream tool calls); either way it fills one `Collected`, which makes the `ModelReply`.

Temporal owns retries, so nothing here retries: a failure becomes a `ThreadlineError` that is
`retryable` (the activity raises it and Temporal tries again, after `details["retry_after"]`
seconds when the provider said so) or not (the turn fails). Messages name the provider and the
status, never the key, the prompt or the provider's own error text.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import httpx
import pydantic

from activities.language_model import ModelReply, TextSink
from core.errors import ErrorCode, ThreadlineError
from core.temporal import RETRY_WAIT_MOST_SECONDS

from ._calls import PendingCalls

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""Statuses worth trying again besides 5xx: timeout, conflict, rate limit."""
MAX_RETRY_AFTER = RETRY_WAIT_MOST_SECONDS
"""The longest Retry-After honoured: a longer wait would outlast the turn's lease (it would read
`interrupted` meanwhile), so Temporal tries again sooner and the provider may answer 429 once more."""

_BROKEN = ((httpx.TimeoutException, "did not answer in time"), (httpx.ConnectError, "could not be reached"))
_CODE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_Model = TypeVar("_Model", bound=pydantic.BaseModel)


def provider_error(
    provider: str,
    failure: int | httpx.HTTPError,
    *,
    headers: httpx.Headers | None = None,
    reason: str | None = None,
) -> ThreadlineError:
    """The coded error for a provider call that failed with an HTTP status or an httpx error.

    Timeouts, connection errors, 408, 409, 429 and 5xx are `provider-unavailable` and retryable
    (`retry_after` seconds from `headers`, if any); any other status is `provider-rejected`.
    `reason` is the provider's short error code (`rate_limit_error`), if it gave one.
    """
    if isinstance(failure, httpx.UnsupportedProtocol):
        message = f"{provider}'s base URL is not an http or https URL; fix the provider's base URL setting"
        return ThreadlineError(ErrorCode.PROVIDER_UNCONFIGURED, message)
    if isinstance(failure, httpx.HTTPError):
        what = next((w for kind, w in _BROKEN if isinstance(failure, kind)), "broke off the connection")
        message = f"{provider} {what} ({type(failure).__name__}); the call will be retried"
        return ThreadlineError(ErrorCode.PROVIDER_UNAVAILABLE, message, retryable=True)
    why = f" ({reason})" if reason else ""
    if failure in RETRYABLE_STATUSES or failure >= 500:
        delay = retry_after(headers) if headers is not None else None
        extra = {} if delay is None else {"retry_after": delay}
        message = f"{provider} answered HTTP {failure}{why}; the call will be retried"
        return ThreadlineError(ErrorCode.PROVIDER_UNAVAILABLE, message, retryable=True, status=failure, **extra)
    message = f"{provider} refused the request with HTTP {failure}{why}; check the key, the model name and the inputs"
    return ThreadlineError(ErrorCode.PROVIDER_REJECTED, message, status=failure)


def stream_cut(provider: str) -> ThreadlineError:
    """The retryable error for a stream that ended before the provider said it was complete."""
    message = f"{provider}'s stream ended before the reply was complete; the call will be retried"
    return ThreadlineError(ErrorCode.PROVIDER_UNAVAILABLE, message, retryable=True)


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait from `retry-after-ms` or `Retry-After` (seconds or an HTTP date), at most `MAX_RETRY_AFTER`."""
    seconds: float | None = None
    if "retry-after-ms" in headers:
        seconds = _number(headers["retry-after-ms"])
        seconds = None if seconds is None else seconds / 1000
    raw = headers.get("retry-after")
    if seconds is None and raw is not None:
        seconds = _number(raw)
        if seconds is None:
            try:
                when = parsedate_to_datetime(raw)
            except (TypeError, ValueError):
                return None
            when = when if when.tzinfo else when.replace(tzinfo=UTC)
            seconds = (when - datetime.now(UTC)).total_seconds()
    return None if seconds is None else min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _number(raw: str) -> float | None:
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def scrub(text: str | None, *secrets: str | None) -> str | None:
    """`text`, unless a secret is in it: a provider's short strings (an error code, a model name) are
    written to logs and records, and a misbehaving server may echo the key in them."""
    if text is None or not any(secret and secret in text for secret in secrets):
        return text
    return "(withheld: it held the key)"


def request_secrets(request: httpx.Request) -> tuple[str, ...]:
    """The credentials a request carries (bearer token, `x-api-key`)."""
    bearer = request.headers.get("authorization", "").partition(" ")[2]
    return tuple(filter(None, (bearer, request.headers.get("x-api-key"))))


def error_reason(body: bytes) -> str | None:
    """The provider's short error code from an error body (`invalid_request_error`), if it has one.

    Only a code: the free text of a provider's error may quote the prompt or part of the key.
    """
    try:
        data = json.loads(body)
    except ValueError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return None
    for key in ("code", "type"):
        value = error.get(key)
        if isinstance(value, str) and _CODE.fullmatch(value):
            return value
    return None


# ----- server-sent events


@dataclass(frozen=True, slots=True)
class Event:
    """One server-sent event: its name (`message` when the stream names none) and its data."""

    name: str
    data: str


async def post_events(
    client: httpx.AsyncClient, request: httpx.Request, *, provider: str
) -> AsyncGenerator[Event, None]:
    """Send `request` and yield the events of its streamed response, mapping every failure."""
    try:
        response = await client.send(request, stream=True)
        try:
            if not response.is_success:
                body = await response.aread()
                reason = scrub(error_reason(body), *request_secrets(request))
                raise provider_error(provider, response.status_code, headers=response.headers, reason=reason)
            async for event in read_events(response.aiter_bytes()):
                yield event
        finally:
            await response.aclose()
    except httpx.HTTPError as err:
        raise provider_error(provider, err) from err


async def post_json(client: httpx.AsyncClient, request: httpx.Request, *, provider: str) -> Any:
    """Send `request` and return its whole JSON response, mapping every failure as `post_events` does."""
    try:
        response = await client.send(request)
    except httpx.HTTPError as err:
        raise provider_error(provider, err) from err
    if not response.is_success:
        reason = scrub(error_reason(response.content), *request_secrets(request))
        raise provider_error(provider, response.status_code, headers=response.headers, reason=reason)
    try:
        return response.json()
    except ValueError:
        message = f"{provider} sent a response that is not JSON; the call will be retried"
        raise ThreadlineError(ErrorCode.PROVIDER_UNAVAILABLE, message, retryable=True) from None


async def read_events(chunks: AsyncIterable[bytes]) -> AsyncIterator[Event]:
    """The events of an SSE byte stream; comments and unknown fields are skipped."""
    name = ""
    data: list[str] = []
    async for line in _lines(chunks):
        if not line:
            if data:
                yield Event(name or "message", "\n".join(data))
            name, data = "", []
            continue
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "event":
            name = value
        elif key == "data":
            data.append(value)
    if data:
        yield Event(name or "message", "\n".join(data))


async def _lines(chunks: AsyncIterable[bytes]) -> AsyncIterator[str]:
    # not httpx's aiter_lines: str.splitlines also breaks at U+2028 and kin, which JSON may carry raw
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            yield line.removesuffix(b"\r").decode("utf-8", "replace")
    if buffer:
        yield buffer.removesuffix(b"\r").decode("utf-8", "replace")


def parse_event(model: type[_Model], event: Event, *, provider: str) -> _Model:
    """The event's JSON data as `model`; malformed data is a retryable `provider-unavailable`."""
    try:
        return model.model_validate_json(event.data)
    except pydantic.ValidationError:
        message = f"{provider} sent a malformed stream event; the call will be retried"
        raise ThreadlineError(ErrorCode.PROVIDER_UNAVAILABLE, message, retryable=True) from None


# ----- outputs and replies


def is_plain(outputs: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the outputs are one plain string, answered as text rather than JSON."""
    return len(outputs) == 1 and dict(outputs[0]["shape"]) == {"type": "string"}


def outputs_schema(outputs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The outputs as one object schema, each a required property, with every `$defs` lifted to the top."""
    defs: dict[str, Any] = {}
    properties: dict[str, Any] = {}
    for output in outputs:
        shape = copy.deepcopy(dict(output["shape"]))
        # pydantic's `$ref`s read `#/$defs/X`, which resolves from the root of the whole schema
        defs.update(shape.pop("$defs", None) or {})
        properties[output["name"]] = shape
    schema: dict[str, Any] = {"type": "object", "properties": properties, "required": list(properties)}
    if defs:
        schema["$defs"] = defs
    return schema


def parse_outputs(text: str, outputs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The outputs from a reply's JSON text (other keys dropped), or `parse-failed`."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        message = (
            "the model's reply is not a JSON object of the outputs; try again or use a model with structured outputs"
        )
        raise ThreadlineError(ErrorCode.PARSE_FAILED, message)
    names = [str(output["name"]) for output in outputs]
    missing = [name for name in names if name not in value]
    if missing:
        message = f"the model's reply has no output {missing[0]!r}; try again or use a model with structured outputs"
        raise ThreadlineError(ErrorCode.PARSE_FAILED, message, field=missing[0])
    return {name: value[name] for name in names}


@dataclass(slots=True)
class Collected:
    """What a reply has said so far: the answer's pieces, what the model said, tool calls, the
    answering model, token counts, a refusal."""

    model: str
    outputs: Sequence[Mapping[str, Any]]
    parts: list[str] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    refused: bool = False
    said: list[str] = field(default_factory=list)
    """The model's text as it came (the answer's JSON of a forced tool excluded)."""
    calls: PendingCalls = field(default_factory=PendingCalls)

    @property
    def plain(self) -> bool:
        """Whether the reply is plain text rather than a JSON object of outputs."""
        return is_plain(self.outputs)

    async def add(self, piece: str, on_text: TextSink | None, *, said: bool = True) -> None:
        """Keep a piece of the answer and pass it on as it arrives (`said`: also as the model's text)."""
        if piece:
            self.parts.append(piece)
            if said:
                self.said.append(piece)
            if on_text is not None:
                await on_text(piece)

    def reply(self, provider: str, *, secret: str | None = None) -> ModelReply:
        """The finished reply: the tool calls asked for, else the text as the one output, or the
        outputs parsed from JSON. The answering model's name never holds `secret`."""
        self.model = scrub(self.model, secret) or self.model
        if self.refused:
            message = f"{provider}'s model refused to answer; change the inputs or the model"
            raise ThreadlineError(ErrorCode.PROVIDER_REJECTED, message, reason="refusal")
        usage: dict[str, int] = {}
        if self.input_tokens is not None and self.output_tokens is not None:
            usage = {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}
            usage["total_tokens"] = self.input_tokens + self.output_tokens
        said = "".join(self.said)
        if self.calls:
            calls = self.calls.finish(provider)
            return ModelReply(outputs={}, model=self.model, usage=usage, calls=calls, stop="tools", text=said)
        text = "".join(self.parts)
        values = {str(self.outputs[0]["name"]): text} if self.plain else parse_outputs(text, self.outputs)
        return ModelReply(outputs=values, model=self.model, usage=usage, text=said)
