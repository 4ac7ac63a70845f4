"""The HTTP providers against a fake provider on loopback: streaming, structured outputs, usage, errors, keys."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Literal

import httpx
import pytest
import pytest_asyncio
import structlog

from activities.language_model import ModelRequest, OfflineModel, Provider, build_request
from activities.providers import AnthropicProvider, OpenAIProvider, build_providers, new_http_client, retry_after
from activities.providers._http import read_events
from activities.providers.openai import chat_body, fits_strict
from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from store.programs.program import TUTOR, Program
from tests.support.fakeprovider import Failure, FakeProvider, Reply

KEY = "sk-test-5ecret-never-shown"
KINDS = ["openai", "anthropic"]

CLASSIFY = Program.define(
    "classify",
    "Label, score, explain.",
    inputs={"message": str},
    outputs={"label": Literal["a", "b"], "score": float, "result": str},
)


@pytest.fixture(name="fake")
def _fake() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest_asyncio.fixture(name="http")
async def _http() -> AsyncIterator[httpx.AsyncClient]:
    # trust_env off: a proxy from the environment must not carry loopback calls
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, connect=2.0), trust_env=False) as client:
        yield client


def make(
    kind: str, http: httpx.AsyncClient, fake: FakeProvider, *, key: str | None = KEY, suffix: str = ""
) -> Provider:
    if kind == "openai":
        return OpenAIProvider(http, base_url=fake.openai_url + suffix, api_key=key)
    return AnthropicProvider(http, base_url=fake.url + suffix, api_key=key)


def ask(program: Program = TUTOR, text: str = "What is 1/2 + 1/3?", *, model: str = "test-model") -> ModelRequest:
    return build_request(program, [], {"message": text}, model=model)


class Sink:
    """An `on_text` that keeps each piece with the time it arrived."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.times: list[float] = []

    async def __call__(self, piece: str) -> None:
        self.pieces.append(piece)
        self.times.append(time.monotonic())


async def fail(provider: Provider, request: ModelRequest | None = None) -> ThreadlineError:
    with pytest.raises(ThreadlineError) as caught:
        await provider.complete(request or ask())
    return caught.value


@pytest.mark.parametrize("kind", KINDS)
async def test_text_streams_in_order_and_joins_to_the_reply(kind: str, http: httpx.AsyncClient, fake: FakeProvider):
    """Each text piece reaches `on_text` as it arrives, in order; together they are the one output.

    The answering model and the provider's token counts come back too.
    """
    text = "Five sixths: 3/6 + 2/6 = 5/6. \u2028Très bien!"
    fake.add(Reply(text, chunks=4, delay=0.05, model="fake-model-2", input_tokens=123, output_tokens=45))
    sink = Sink()

    reply = await make(kind, http, fake).complete(ask(), sink)
    ended = time.monotonic()

    assert ({"result": text}, "fake-model-2") == (reply.outputs, reply.model)
    assert (4, text) == (len(sink.pieces), "".join(sink.pieces))
    assert ended - sink.times[0] >= 0.1  # the first piece came long before the reply ended
    assert {"input_tokens": 123, "output_tokens": 45, "total_tokens": 168} == reply.usage


@pytest.mark.parametrize("kind", KINDS)
async def test_structured_outputs_are_parsed(kind: str, http: httpx.AsyncClient, fake: FakeProvider):
    """Several outputs come back as one JSON object, streamed raw to `on_text`, and fit the program."""
    outputs = {"label": "b", "score": 0.75, "result": "It reads like b."}
    fake.add(Reply(outputs=outputs, chunks=5))
    sink = Sink()

    reply = await make(kind, http, fake).complete(ask(CLASSIFY), sink)

    assert outputs == reply.outputs
    assert outputs == json.loads("".join(sink.pieces))
    assert outputs == CLASSIFY.validate_outputs(reply.outputs)


async def test_openai_asks_for_a_strict_json_schema(http: httpx.AsyncClient, fake: FakeProvider):
    """Structured outputs ask for the outputs object, closed and all required, in strict mode."""
    fake.add(Reply(outputs={"label": "a", "score": 1.0, "result": "a"}))

    await make("openai", http, fake).complete(ask(CLASSIFY))

    body = fake.requests[0].body
    schema = body["response_format"]["json_schema"]
    assert {"name": "classify", "strict": True} == {k: schema[k] for k in ("name", "strict")}
    assert ["label", "score", "result"] == schema["schema"]["required"]
    assert False is schema["schema"]["additionalProperties"]
    assert {"enum": ["a", "b"], "type": "string"} == schema["schema"]["properties"]["label"]
    assert {"include_usage": True} == body["stream_options"]
    assert [{"role": "system", "content": CLASSIFY.instruction}] == body["messages"][:1]


def test_openai_sends_shapes_strict_mode_cannot_hold_without_strict():
    """A free-form mapping or a length bound is sent with `strict: false`, as it is."""
    program = Program.define("tally", "Count.", inputs={"message": str}, outputs={"counts": dict[str, int]})

    schema = chat_body(ask(program))["response_format"]["json_schema"]

    assert False is schema["strict"]
    assert {"type": "object", "additionalProperties": {"type": "integer"}} == schema["schema"]["properties"]["counts"]
    assert False is fits_strict({"type": "string", "minLength": 2})
    assert False is fits_strict({})


async def test_openai_plain_text_sends_no_response_format(http: httpx.AsyncClient, fake: FakeProvider):
    """One string output is asked as text; the earlier turns and the new inputs follow the system message."""
    fake.add(Reply("hi"))
    request = build_request(
        TUTOR, [{"inputs": {"message": "one"}, "outputs": {"result": "two"}}], {"message": "3"}, model="m"
    )

    await make("openai", http, fake).complete(request)

    body = fake.requests[0].body
    assert "response_format" not in body
    assert ["system", "user", "assistant", "user"] == [m["role"] for m in body["messages"]]
    assert ["one", "two", "3"] == [m["content"] for m in body["messages"][1:]]
    assert True is body["stream"]


async def test_anthropic_forces_the_answer_tool(http: httpx.AsyncClient, fake: FakeProvider):
    """Structured outputs are one forced `answer` tool; system, version and max_tokens are sent."""
    fake.add(Reply(outputs={"label": "a", "score": 1.0, "result": "a"}))
    provider = AnthropicProvider(http, base_url=fake.url, api_key=KEY, max_tokens=321)

    await provider.complete(ask(CLASSIFY))

    sent = fake.requests[0]
    assert "2023-06-01" == sent.headers["anthropic-version"]
    assert {"type": "tool", "name": "answer"} == sent.body["tool_choice"]
    assert ["label", "score", "result"] == sent.body["tools"][0]["input_schema"]["required"]
    assert (CLASSIFY.instruction, 321, True) == (sent.body["system"], sent.body["max_tokens"], sent.body["stream"])


UNAVAILABLE, REJECTED = (ErrorCode.PROVIDER_UNAVAILABLE, True), (ErrorCode.PROVIDER_REJECTED, False)


@pytest.mark.parametrize(
    ("failure", "expected"),
    [(Failure(429, retry_after="2"), (*UNAVAILABLE, 2.0))]
    + [(Failure(status), (*UNAVAILABLE, None)) for status in (408, 409, 500, 503, 529)]
    + [(Failure(status), (*REJECTED, None)) for status in (400, 401, 403, 404, 422)],
)
@pytest.mark.parametrize("kind", KINDS)
async def test_the_status_decides_the_error(
    kind: str, failure: Failure, expected: tuple[object, ...], http: httpx.AsyncClient, fake: FakeProvider
):
    """408, 409, 429 and 5xx are retryable provider-unavailable (after Retry-After); other 4xx provider-rejected."""
    fake.add(failure)

    err = await fail(make(kind, http, fake))

    assert expected == (err.code, err.retryable, err.details.get("retry_after"))
    assert (1, failure.status) == (len(fake.requests), err.details["status"])  # httpx did not retry


@pytest.mark.parametrize("kind", KINDS)
async def test_a_stream_cut_halfway_is_retryable(kind: str, http: httpx.AsyncClient, fake: FakeProvider):
    """A connection closed before the stream's end is provider-unavailable and retryable."""
    fake.add(Reply("a long reply that never ends", chunks=6, cut_after=5))
    sink = Sink()

    with pytest.raises(ThreadlineError) as caught:
        await make(kind, http, fake).complete(ask(), sink)

    assert (ErrorCode.PROVIDER_UNAVAILABLE, True) == (caught.value.code, caught.value.retryable)
    assert sink.pieces


OPENAI_CHUNK = 'data: {"model": "m", "choices": [{"delta": {"content": "half"}}]}\n\n'
ANTHROPIC_START = 'event: message_start\ndata: {"type": "message_start", "message": {"model": "m"}}\n\n'


def _anthropic_error(kind: str) -> str:
    return f'event: error\ndata: {{"type": "error", "error": {{"type": "{kind}", "message": "no"}}}}\n\n'


@pytest.mark.parametrize(
    ("kind", "stream", "expected"),
    [
        ("openai", OPENAI_CHUNK, UNAVAILABLE),
        ("anthropic", ANTHROPIC_START, UNAVAILABLE),
        ("openai", 'data: {"error": {"message": "boom"}}\n\n', UNAVAILABLE),
        ("openai", 'data: {"error": {"code": 400}}\n\n', REJECTED),
        ("anthropic", _anthropic_error("overloaded_error"), UNAVAILABLE),
        ("anthropic", _anthropic_error("invalid_request_error"), REJECTED),
        ("openai", "data: {not json\n\n", UNAVAILABLE),
        ("openai", 'data: {"choices": [{"delta": {"refusal": "no"}}]}\n\ndata: [DONE]\n\n', REJECTED),
    ],
)
async def test_what_a_stream_says_decides_the_error(kind: str, stream: str, expected: tuple[object, ...]):
    """A stream that ends without its last event, reports an error, is garbled or refuses maps to a code."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=stream.encode(), headers={"content-type": "text/event-stream"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        provider = OpenAIProvider(http, api_key=KEY) if kind == "openai" else AnthropicProvider(http, api_key=KEY)
        err = await fail(provider)

    assert expected == (err.code, err.retryable)


@pytest.mark.parametrize("kind", KINDS)
async def test_timeouts_and_refused_connections_are_retryable(kind: str, fake: FakeProvider):
    """A read timeout, or a port nobody listens on, is provider-unavailable and retryable."""
    fake.add(Reply("slow", delay=1.0))
    with FakeProvider() as gone:
        pass

    async with httpx.AsyncClient(timeout=httpx.Timeout(0.2), trust_env=False) as http:
        errors = [await fail(make(kind, http, fake)), await fail(make(kind, http, gone))]

    assert [UNAVAILABLE, UNAVAILABLE] == [(e.code, e.retryable) for e in errors]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_reply_without_the_outputs_is_parse_failed(kind: str, http: httpx.AsyncClient, fake: FakeProvider):
    """A reply that is not JSON, or lacks an output, is parse-failed and not retryable."""
    fake.add(Reply("not json at all"), Reply(outputs={"label": "a", "result": "no score"}))
    provider = make(kind, http, fake)

    not_json = await fail(provider, ask(CLASSIFY))
    missing = await fail(provider, ask(CLASSIFY))

    assert (ErrorCode.PARSE_FAILED, False) == (not_json.code, not_json.retryable)
    assert (ErrorCode.PARSE_FAILED, "score") == (missing.code, missing.details["field"])


async def test_no_key_is_unconfigured_before_any_request(http: httpx.AsyncClient, fake: FakeProvider):
    """Anthropic, or OpenAI's own URL, with no key is provider-unconfigured and sends nothing."""
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as openai_http:
        errors = [
            await fail(OpenAIProvider(openai_http, api_key=None)),
            await fail(make("anthropic", http, fake, key=None)),
        ]

    assert [ErrorCode.PROVIDER_UNCONFIGURED] * 2 == [e.code for e in errors]
    assert ([], []) == (sent, fake.requests)


@pytest.mark.parametrize(
    ("kind", "key", "suffix"),
    [("openai", KEY, ""), ("openai", None, "/"), ("anthropic", KEY, ""), ("anthropic", KEY, "/")],
)
async def test_requests_go_to_the_base_url_with_the_key_in_its_header(
    kind: str, key: str | None, suffix: str, http: httpx.AsyncClient, fake: FakeProvider
):
    """The base URL (final slash or not) gets the request; the key goes in Authorization or x-api-key only.

    A base URL of one's own (a local server) needs no key: then no Authorization header is sent.
    """
    fake.add(Reply("ok"))

    await make(kind, http, fake, key=key, suffix=suffix).complete(ask(model="the-model"))

    sent = fake.requests[0]
    header, value = ("authorization", key and f"Bearer {key}") if kind == "openai" else ("x-api-key", key)
    assert ("/v1/chat/completions" if kind == "openai" else "/v1/messages", "the-model") == (
        sent.path,
        sent.body["model"],
    )
    assert value == sent.headers.get(header)
    assert KEY not in json.dumps(sent.body)


@pytest.mark.parametrize("kind", KINDS)
async def test_the_key_and_prompt_never_appear_in_errors_reprs_or_logs(
    kind: str, http: httpx.AsyncClient, fake: FakeProvider
):
    """Errors whose bodies quote the key and the prompt say neither; nor does a provider's repr."""
    prompt = "my-private-question"
    fake.add(Failure(400), Failure(401), Failure(429, retry_after="1"), Failure(500), Reply("x", cut_after=1))
    provider = make(kind, http, fake)

    with structlog.testing.capture_logs() as logs:
        errors = [await fail(provider, ask(text=prompt)) for _ in range(5)]

    texts = [repr(provider), str(logs)] + [f"{e} {e!r} {e.to_dict()}" for e in errors]
    assert [] == [t for t in texts if KEY in t or prompt in t]
    assert "<set>" in repr(provider)


def test_build_providers_follows_the_environment():
    """offline always; openai with a key or a base URL; anthropic with a key only."""
    settings = Settings.from_env({})
    client = httpx.AsyncClient()

    def names(env: dict[str, str]) -> list[str]:
        return sorted(build_providers(settings, client, env=env))

    assert ["offline"] == names({})
    assert ["offline", "openai"] == names({"OPENAI_BASE_URL": "http://localhost:11434/v1"})
    assert ["offline", "openai"] == names({"OPENAI_API_KEY": KEY})
    assert ["offline"] == names({"ANTHROPIC_BASE_URL": "http://localhost:9"})
    assert ["anthropic", "offline"] == names({"ANTHROPIC_API_KEY": KEY})
    assert isinstance(build_providers(settings, client, env={})["offline"], OfflineModel)
    with pytest.raises(ThreadlineError) as caught:
        build_providers(settings, client, env={"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_MAX_TOKENS": "lots"})
    assert ErrorCode.INVALID_REQUEST == caught.value.code
    assert 10.0 == new_http_client().timeout.connect


def test_retry_after_reads_seconds_milliseconds_and_dates():
    """Retry-After in seconds or as an HTTP date, retry-after-ms first; capped at 20 s (under a turn's lease);
    junk ignored."""

    def delay(**headers: str) -> float | None:
        return retry_after(httpx.Headers({k.replace("_", "-"): v for k, v in headers.items()}))

    assert 2.5 == delay(retry_after="2.5")
    assert 0.25 == delay(retry_after_ms="250", retry_after="9")
    assert 20.0 == delay(retry_after="86400")
    assert 0.0 == delay(retry_after="Wed, 21 Oct 2015 07:28:00 GMT")
    assert None is delay(retry_after="soon")
    assert None is delay()


async def test_sse_events_keep_unicode_line_separators():
    """Events split only at newlines; comments are skipped and data lines are joined."""

    async def chunks() -> AsyncIterator[bytes]:
        for part in [b": comment\r\nevent: a\r\ndata: x\xe2\x80\xa8y\r\n\r\ndata: 1\ndat", b"a: 2\n\ndata: last"]:
            yield part

    events = [(e.name, e.data) for e in [e async for e in read_events(chunks())]]

    assert [("a", "x\u2028y"), ("message", "1\n2"), ("message", "last")] == events


def test_a_requests_max_tokens_bounds_the_reply_on_both_wire_formats() -> None:
    """A request's `max_tokens` (a summary's) is the provider's max tokens; without one, OpenAI's body has
    none and Anthropic's keeps the provider's own bound."""
    from activities.providers.anthropic import messages_body

    bounded = build_request(TUTOR, [], {"message": "Summarise"}, model="m", max_tokens=500)
    free = build_request(TUTOR, [], {"message": "Hi"}, model="m")

    assert 500 == chat_body(bounded)["max_tokens"]
    assert "max_tokens" not in chat_body(free)
    assert 500 == messages_body(bounded, max_tokens=4096)["max_tokens"]
    assert 4096 == messages_body(free, max_tokens=4096)["max_tokens"]


def test_the_fake_provider_closed_mid_reply_logs_no_error(caplog: pytest.LogCaptureFixture) -> None:
    """A fake provider closed while it streams a reply (a benchmark or test that ends before its slow
    model answers) cancels that reply's handler: the handler ends quietly, where Python 3.11's stream
    server logged `Exception in callback` with the CancelledError of the handler's task."""
    caplog.set_level(logging.ERROR, logger="asyncio")
    with FakeProvider() as fake:
        fake.add(Reply(text="slow", delay=30.0))
        body = json.dumps({"model": "m", "stream": True, "messages": []}).encode()
        head = f"POST /v1/chat/completions HTTP/1.1\r\nhost: fake\r\ncontent-length: {len(body)}\r\n\r\n"
        client = socket.create_connection(("127.0.0.1", fake.port))
        client.sendall(head.encode() + body)
        deadline = time.monotonic() + 10
        while not fake.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fake.requests, "the fake provider read the request"
    client.close()
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
