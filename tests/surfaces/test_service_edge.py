"""The HTTP service's edge: keys, logging, CORS, its settings, and bad input refused with the right code."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from structlog.contextvars import merge_contextvars
from structlog.testing import capture_logs
from temporalio.client import Client
from temporalio.worker import Worker

from core.errors import ThreadlineError
from core.settings import Settings
from tests.support.service_kit import bearer, recorded, send, serving
from threadline.client import Threadline
from threadline.http import APIKey, ServiceSettings, create_app


@pytest_asyncio.fixture(name="http")
async def _http(tl: Threadline) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an open service (no keys) for this test's task queue and store."""
    async with serving(create_app(tl)) as http:
        yield http


# ----- security


async def test_keys_are_required_and_scoped_to_stores(
    client: Client, settings: Settings, tmp_path: Path, cid: str
) -> None:
    """No key or a wrong key: 401; a key scoped to other stores: 403; a key for the store gets through
    (to a 404: the conversation does not exist)."""
    stores = {**settings.stores, "team": tmp_path / "team"}
    tl = Threadline(client, dataclasses.replace(settings, stores=stores))
    async with serving(create_app(tl, keys=["k-all", "k-team:team"])) as http:
        url = f"/v1/conversations/{cid}"
        missing = await http.get(url)
        wrong = await http.get(url, headers=bearer("k-wrong"))
        other = await http.get(url, headers=bearer("k-team"))
        create_other = await http.post("/v1/conversations", json={"program": "tutor"}, headers=bearer("k-team"))
        own = await http.get(url, params={"store": "team"}, headers=bearer("k-team"))
        every = await http.get(url, headers=bearer("k-all"))

    assert [401, 401, 403, 403, 404, 404] == [r.status_code for r in (missing, wrong, other, create_other, own, every)]
    assert ["unauthorized", "unauthorized", "forbidden"] == [r.json()["error"]["code"] for r in (missing, wrong, other)]
    assert "Bearer" == missing.headers["www-authenticate"]


async def test_each_request_is_logged_once_without_its_key(tl: Threadline, cid: str) -> None:
    """One `http.request` line per request, with the caller's X-Request-ID and never the key."""
    with capture_logs(processors=[merge_contextvars]) as logs:
        async with serving(create_app(tl, keys=["k-secret-7f3a"])) as http:
            answered = await http.get(
                f"/v1/conversations/{cid}", headers={"X-Request-ID": "req-1", **bearer("k-secret-7f3a")}
            )

    lines = [e for e in logs if e["event"] == "http.request"]
    assert "req-1" == answered.headers["x-request-id"]
    assert [("req-1", "GET", f"/v1/conversations/{cid}", 404)] == [
        (e["request_id"], e["method"], e["path"], e["status"]) for e in lines
    ]
    assert "k-secret-7f3a" not in repr(logs)


async def test_an_open_service_warns_when_it_starts(tl: Threadline) -> None:
    """With no keys, the service starts open and says so in a warning."""
    with capture_logs() as logs:
        async with serving(create_app(tl)):
            pass

    assert ["warning"] == [e["log_level"] for e in logs if e["event"] == "service.open"]


async def test_cors_allows_only_the_configured_origins(tl: Threadline) -> None:
    """A configured origin gets CORS headers; another does not."""
    async with serving(create_app(tl, cors_origins=["https://app.example"])) as http:
        allowed = await http.get("/health", headers={"Origin": "https://app.example"})
        other = await http.get("/health", headers={"Origin": "https://evil.example"})

    assert "https://app.example" == allowed.headers["access-control-allow-origin"]
    assert "access-control-allow-origin" not in other.headers


def test_settings_read_keys_limits_and_origins(tmp_path: Path) -> None:
    """Keys come from the variable and the file (comments and blank lines skipped); scopes use `+`."""
    (tmp_path / "keys").write_text("# ops keys\nk-file:team+ops\n\n")
    env = {
        "THREADLINE_API_KEYS": "k-1, k-2:team",
        "THREADLINE_API_KEYS_FILE": str(tmp_path / "keys"),
        "THREADLINE_MAX_BODY_BYTES": "1024",
        "THREADLINE_HEADER_TIMEOUT_S": "2.5",
        "THREADLINE_CORS_ORIGINS": "https://a.example,https://b.example",
    }

    config = ServiceSettings.from_env(env)

    assert [None, frozenset({"team"}), frozenset({"team", "ops"})] == [k.stores for k in config.keys]
    assert (1024, ("https://a.example", "https://b.example")) == (config.max_body_bytes, config.cors_origins)
    assert (2.5, 30.0) == (config.limits.header_timeout_s, config.limits.body_timeout_s)
    assert "k-1" not in repr(config)
    assert ((), 2 << 20, (), 10.0, 30.0) == dataclasses.astuple(ServiceSettings.from_env({}))


@pytest.mark.parametrize(
    ("name", "value"),
    [("THREADLINE_MAX_BODY_BYTES", "2MB"), ("THREADLINE_BODY_TIMEOUT_S", "0"), ("THREADLINE_HEADER_TIMEOUT_S", "x")],
)
def test_malformed_limits_are_refused(name: str, value: str) -> None:
    """A size that is not a byte count, a timeout that is not a positive number: `invalid-request` at start."""
    with pytest.raises(ThreadlineError) as refused:
        ServiceSettings.from_env({name: value})

    assert "invalid-request" == refused.value.code


@pytest.mark.parametrize("spec", ["", ":team", "k-1:", "k-1:+"])
def test_malformed_key_settings_are_refused(spec: str) -> None:
    """A key without a secret, or scoped to no store: `invalid-request` at start."""
    with pytest.raises(ThreadlineError) as refused:
        APIKey.parse(spec)

    assert "invalid-request" == refused.value.code


# ----- bad input


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        ("/v1/conversations/{cid}/turns", b'{"message": ', 422, "invalid-request"),
        ("/v1/conversations/{cid}/turns", b"[1, 2]", 422, "invalid-request"),
        ("/v1/conversations/{cid}/turns", {"message": 42}, 422, "invalid-request"),
        ("/v1/conversations/{cid}/turns", {"message": "hi", "wait": "yes"}, 422, "invalid-request"),
        ("/v1/conversations/{cid}/turns", {"message": "hi", "inputs": {"message": "hi"}}, 422, "invalid-request"),
        ("/v1/conversations/{cid}/turns", {"message": "hi", "colour": "red"}, 422, "invalid-request"),
        ("/v1/conversations/{cid}/turns", {"inputs": {"wrong": "name"}}, 422, "inputs-invalid"),
        ("/v1/conversations/{cid}/turns", {"inputs": {"message": "hi", "lm": "x"}}, 422, "inputs-invalid"),
        ("/v1/conversations/{cid}/turns", {"inputs": {"message": "hi"}, "program": "nope"}, 422, "program-unknown"),
        ("/v1/conversations/{cid}/turns?store=elsewhere", {"message": "hi"}, 422, "store-unknown"),
        ("/v1/conversations/-bad/turns", {"message": "hi"}, 422, "conversation-id"),
        ("/v1/conversations", {"system_prompt": 42}, 422, "invalid-request"),
        ("/v1/conversations", {"program": "tutor", "context": {"lastt": 1}}, 422, "invalid-request"),
        ("/v1/conversations", {"program": "tutor", "id": "a b"}, 422, "conversation-id"),
        ("/v1/conversations", {"program": "tutor", "store": "elsewhere"}, 422, "store-unknown"),
    ],
)
async def test_bad_input_is_refused_and_records_nothing(
    http: httpx.AsyncClient, worker: Worker, folder: Path, cid: str, path: str, body: Any, status: int, code: str
) -> None:
    """Malformed JSON, wrong types, missing or extra fields, bad ids and unknown stores: 4xx, nothing recorded."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()

    refused = await http.post(path.format(cid=cid), content=content, headers={"Content-Type": "application/json"})

    assert (status, code) == (refused.status_code, refused.json()["error"]["code"])
    assert [] == recorded(folder)


async def test_an_oversized_body_is_refused_before_it_is_parsed(
    http: httpx.AsyncClient, folder: Path, cid: str
) -> None:
    """Over the 2 MiB default: 413 `input-too-large`, by Content-Length or by counting a chunked body."""
    big = json.dumps({"message": "x" * (2 << 20)}).encode()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(big), 1 << 16):
            yield big[start : start + (1 << 16)]

    url, headers = f"/v1/conversations/{cid}/turns", {"Content-Type": "application/json"}
    declared = await http.post(url, content=big, headers=headers)
    streamed = await http.post(url, content=chunks(), headers=headers)

    assert [(413, "input-too-large")] * 2 == [(r.status_code, r.json()["error"]["code"]) for r in (declared, streamed)]
    assert [] == recorded(folder)


async def test_unknown_turns_routes_and_offsets_are_refused(http: httpx.AsyncClient, worker: Worker, cid: str) -> None:
    """An unknown turn: 404 `turn-unknown`; an unknown route: 404; a Last-Event-ID that is no offset: 422."""
    turn = (await send(http, cid, message="one", wait=True)).json()["turn"]

    unknown = await http.get(f"/v1/conversations/{cid}/turns/no-such-turn/events")
    route = await http.get("/v1/nowhere")
    offset = await http.get(f"/v1/conversations/{cid}/turns/{turn}/events", headers={"Last-Event-ID": "x"})

    assert (404, "turn-unknown") == (unknown.status_code, unknown.json()["error"]["code"])
    assert (404, "invalid-request") == (route.status_code, route.json()["error"]["code"])
    assert (422, "invalid-request") == (offset.status_code, offset.json()["error"]["code"])


async def test_an_unexpected_failure_answers_internal_and_is_logged_with_its_request_id(
    client: Client, settings: Settings, tmp_path: Path, cid: str
) -> None:
    """A store folder that cannot be one (a file): 500 `internal`, the traceback on the request's log line."""
    (tmp_path / "a-file").write_text("not a folder")
    tl = Threadline(client, dataclasses.replace(settings, stores={"default": tmp_path / "a-file"}))
    with capture_logs(processors=[merge_contextvars]) as logs:
        async with serving(create_app(tl)) as http:
            failed = await http.get(f"/v1/conversations/{cid}", headers={"X-Request-ID": "req-500"})

    lines = [e for e in logs if e["event"] == "http.request"]
    assert (500, "internal") == (failed.status_code, failed.json()["error"]["code"])
    assert "req-500" == failed.headers["x-request-id"]
    assert [("error", "req-500", 500)] == [(e["log_level"], e["request_id"], e["status"]) for e in lines]
    assert isinstance(lines[0]["exc_info"], NotADirectoryError)


def nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


SECRET_TEXT = "my-private-prompt-5e1f"


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({"message": SECRET_TEXT + "\ud800"}).encode(),  # a lone surrogate
        json.dumps({"message": SECRET_TEXT + "\u0000"}).encode(),  # a NUL
        json.dumps({"inputs": {"message": nested(220)}}).encode(),  # deep, but JSON and pydantic take it
        json.dumps({"inputs": {"message": nested(300)}}).encode(),
        b'{"message": "' + SECRET_TEXT.encode() + b'\xff\xfe"}',  # not UTF-8
    ],
    ids=["lone-surrogate", "nul", "nested-220", "nested-300", "not-utf-8"],
)
async def test_text_no_turn_can_take_answers_422_and_logs_none_of_it(
    tl: Threadline, folder: Path, cid: str, body: bytes
) -> None:
    """Malformed text and over-deep values are `invalid-request` (422), nothing is recorded, and the
    service's log holds no trace of the body."""
    with capture_logs(processors=[merge_contextvars]) as logs:
        async with serving(create_app(tl)) as http:
            answered = await http.post(
                f"/v1/conversations/{cid}/turns", content=body, headers={"content-type": "application/json"}
            )

    assert (422, "invalid-request") == (answered.status_code, answered.json()["error"]["code"])
    assert [] == recorded(folder)
    assert SECRET_TEXT not in json.dumps(logs, default=str)


async def test_an_offset_of_thousands_of_digits_is_invalid_not_internal(
    http: httpx.AsyncClient, worker: Worker, cid: str
) -> None:
    """A Last-Event-ID no stream could have given (5,000 digits) is 422 `invalid-request`, never a 500."""
    turn = (await send(http, cid, message="hello", wait=True)).json()["turn"]

    answered = await http.get(f"/v1/conversations/{cid}/turns/{turn}/events", headers={"last-event-id": "9" * 5000})

    assert (422, "invalid-request") == (answered.status_code, answered.json()["error"]["code"])
