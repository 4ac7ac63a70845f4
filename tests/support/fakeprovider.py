"""A fake model provider: a real HTTP server on loopback that speaks OpenAI's and Anthropic's wire formats.

`/v1/chat/completions` answers as Chat Completions and `/v1/messages` as Anthropic Messages,
streamed (SSE over chunked transfer) when the request asks for `stream`, whole otherwise. Each
request takes the next scripted `Reply` or `Failure` (an unscripted one gets a 500), and every
request is kept in `requests` with its body. A `Reply` with `calls` asks for tools in the wire
format's own way (`tool_calls` whose arguments stream in `chunks` fragments each; `tool_use`
blocks with `input_json_delta` fragments). The server runs its own event loop in a thread, so sync tests,
async tests and worker subprocesses can all call it::

    with FakeProvider() as fake:
        fake.add(Failure(429, retry_after="2"), Reply("Hello!", chunks=3))
        provider = OpenAIProvider(http, base_url=fake.openai_url, api_key="sk-test")
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

_T = TypeVar("_T")

_ERROR_KINDS = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error"}


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call a reply asks for; `arguments` replaces the input's JSON text (to send a broken one)."""

    id: str
    name: str
    input: dict[str, Any] | None = None
    arguments: str | None = None

    @property
    def text(self) -> str:
        """The input as JSON text, as the wire carries it."""
        return self.arguments if self.arguments is not None else json.dumps(self.input or {}, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Reply:
    """A successful answer, streamed in `chunks` pieces (and each call's input in `chunks` pieces too)."""

    text: str = ""
    outputs: dict[str, Any] | None = None
    """Structured outputs: the reply's JSON text (OpenAI) or the forced tool's input (Anthropic)."""
    calls: tuple[Call, ...] = ()
    """Tool calls asked for after the text (leave `outputs` out: a reply that calls tools answers nothing)."""
    chunks: int = 3
    delay: float = 0.0
    """Seconds to wait before each stream event."""
    input_tokens: int = 11
    output_tokens: int = 7
    model: str = "fake-model"
    cut_after: int | None = None
    """Close the connection after this many stream events, leaving the chunked body unfinished."""


@dataclass(frozen=True, slots=True)
class Failure:
    """An error status with the provider's error body (which quotes the key and the prompt, as real ones may)."""

    status: int
    retry_after: str | None = None
    code: str | None = None
    """The error's short code (OpenAI's `error.code`), which a misbehaving server may fill with anything."""


@dataclass(frozen=True, slots=True)
class Received:
    """One request as the server got it; header names are lower case."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class FakeProvider:
    """A scripted provider server on 127.0.0.1 and a free port; use it as a context manager."""

    def __init__(self) -> None:
        self.script: deque[Reply | Failure] = deque()
        self.answer: Callable[[Received], Reply | Failure | None] | None = None
        """Chooses the reply for a request by what it asks (None: the next scripted one)."""
        self.requests: list[Received] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-provider", daemon=True)
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._closing = False

    @property
    def url(self) -> str:
        """The server's root: Anthropic's base URL."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        """OpenAI's base URL (the API root, ending in `/v1`)."""
        return f"{self.url}/v1"

    def add(self, *items: Reply | Failure) -> None:
        """Script the answers to the next requests, in order."""
        self.script.extend(items)

    def __enter__(self) -> FakeProvider:
        self._thread.start()
        self._server = self._run(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._run(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        self._closing = True
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            received = await _read_request(reader)
            self.requests.append(received)
            item = self.answer(received) if self.answer is not None else None
            if item is None:
                item = self.script.popleft() if self.script else Failure(500)
            await _respond(writer, received, item)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away, as a timeout test means it to
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # cancelled by `_close`: end as a handler that finished (Python 3.11's stream server logs
            # the CancelledError of a handler's task as an error in a callback)
        finally:
            self._handlers.discard(task)
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> Received:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    path = head[0].split(" ")[1]
    headers = {}
    for line in filter(None, head[1:]):
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Received(path, headers, json.loads(body) if body else {})


async def _respond(writer: asyncio.StreamWriter, received: Received, item: Reply | Failure) -> None:
    anthropic = received.path == "/v1/messages"
    if received.path not in ("/v1/messages", "/v1/chat/completions"):
        await _send_json(writer, 404, {"error": {"message": "no such path", "type": "not_found"}})
    elif isinstance(item, Failure):
        headers = {"retry-after": item.retry_after} if item.retry_after is not None else {}
        body = _error_body(received, item.status, anthropic=anthropic, code=item.code)
        await _send_json(writer, item.status, body, headers)
    elif not received.body.get("stream"):
        await _send_json(writer, 200, (_anthropic_message if anthropic else _openai_completion)(item, received.body))
    else:
        await _send_stream(writer, (_anthropic_events if anthropic else _openai_events)(item, received.body), item)


async def _send_json(
    writer: asyncio.StreamWriter, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> None:
    data = json.dumps(body, ensure_ascii=False).encode()
    lines = [f"HTTP/1.1 {status} Fake", "content-type: application/json", f"content-length: {len(data)}"]
    lines += ["connection: close", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
    await writer.drain()


async def _send_stream(writer: asyncio.StreamWriter, events: list[str], item: Reply) -> None:
    head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close"
    writer.write(head.encode() + b"\r\n\r\n")
    for sent, event in enumerate(events):
        if item.cut_after is not None and sent >= item.cut_after:
            return
        if item.delay:
            await asyncio.sleep(item.delay)
        data = event.encode()
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await writer.drain()
    writer.write(b"0\r\n\r\n")
    await writer.drain()


def _error_body(received: Received, status: int, *, anthropic: bool, code: str | None = None) -> dict[str, Any]:
    kind = _ERROR_KINDS.get(status, "api_error")
    key = received.headers.get("x-api-key") or received.headers.get("authorization", "")
    prompt = json.dumps(received.body.get("messages", []))
    message = f"Fake {status} for key {key} and messages {prompt}"
    if anthropic:
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _content(item: Reply) -> str:
    return item.text if item.outputs is None else json.dumps(item.outputs, ensure_ascii=False)


def _pieces(text: str, count: int) -> list[str]:
    size = max(1, -(-len(text) // max(count, 1)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _openai_events(item: Reply, body: dict[str, Any]) -> list[str]:
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": item.model}

    def chunk(**fields: Any) -> str:
        return f"data: {json.dumps({**base, **fields}, ensure_ascii=False)}\n\n"

    def choice(delta: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": delta, "finish_reason": finish}]

    events = [chunk(choices=choice({"role": "assistant", "content": ""}))]
    events += [chunk(choices=choice({"content": piece})) for piece in _pieces(_content(item), item.chunks)]
    for i, call in enumerate(item.calls):
        start = {"index": i, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        events.append(chunk(choices=choice({"tool_calls": [start]})))
        for piece in _pieces(call.text, item.chunks):
            events.append(chunk(choices=choice({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})))
    events.append(chunk(choices=choice({}, "tool_calls" if item.calls else "stop")))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append(chunk(choices=[], usage=_openai_usage(item)))
    return [*events, "data: [DONE]\n\n"]


def _openai_usage(item: Reply) -> dict[str, int]:
    total = item.input_tokens + item.output_tokens
    return {"prompt_tokens": item.input_tokens, "completion_tokens": item.output_tokens, "total_tokens": total}


def _openai_completion(item: Reply, body: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": _content(item) or None}
    if item.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.text}} for c in item.calls
        ]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": item.model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if item.calls else "stop"}],
        "usage": _openai_usage(item),
    }


def _answer_tool(body: dict[str, Any]) -> str:
    # the forced tool, or (with tool_choice any) the last one offered, which is where the outputs go
    return str((body.get("tool_choice") or {}).get("name") or (body.get("tools") or [{"name": "answer"}])[-1]["name"])


def _anthropic_blocks(item: Reply, body: dict[str, Any]) -> list[tuple[dict[str, Any], str, str]]:
    """Each content block as it starts, its delta type and its whole text."""
    blocks: list[tuple[dict[str, Any], str, str]] = []
    if item.outputs is not None:
        start = {"type": "tool_use", "id": "toolu_fake", "name": _answer_tool(body), "input": {}}
        blocks.append((start, "input_json_delta", _content(item)))
    elif item.text or not item.calls:
        blocks.append(({"type": "text", "text": ""}, "text_delta", item.text))
    for call in item.calls:
        start = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        blocks.append((start, "input_json_delta", call.text))
    return blocks


def _anthropic_message(item: Reply, body: dict[str, Any]) -> dict[str, Any]:
    content = []
    for start, kind, text in _anthropic_blocks(item, body):
        content.append({**start, "text": text} if kind == "text_delta" else {**start, "input": json.loads(text)})
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": item.model,
        "content": content,
        "stop_reason": "end_turn" if item.outputs is None and not item.calls else "tool_use",
        "usage": {"input_tokens": item.input_tokens, "output_tokens": item.output_tokens},
    }


def _anthropic_events(item: Reply, body: dict[str, Any]) -> list[str]:
    def event(kind: str, **fields: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields}, ensure_ascii=False)}\n\n"

    message = {**_anthropic_message(item, body), "content": [], "stop_reason": None}
    message["usage"] = {"input_tokens": item.input_tokens, "output_tokens": 1}
    events = [event("message_start", message=message), event("ping")]
    for index, (start, kind, text) in enumerate(_anthropic_blocks(item, body)):
        key = "text" if kind == "text_delta" else "partial_json"
        events.append(event("content_block_start", index=index, content_block=start))
        pieces = _pieces(text, item.chunks)
        events += [event("content_block_delta", index=index, delta={"type": kind, key: p}) for p in pieces]
        events.append(event("content_block_stop", index=index))
    usage = {"output_tokens": item.output_tokens}
    stop = {"stop_reason": _anthropic_message(item, body)["stop_reason"], "stop_sequence": None}
    events.append(event("message_delta", delta=stop, usage=usage))
    return [*events, event("message_stop")]
