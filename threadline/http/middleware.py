"""The HTTP service's edge: error answers, bearer keys, and the ASGI middleware every request passes.

The middleware is plain ASGI rather than `BaseHTTPMiddleware`, so nothing is buffered that need
not be and the turn events stay a stream. From the outside in: `RequestLog`, CORS (when origins are
set), `Auth`, `BodyLimit`, then the app.
"""

from __future__ import annotations

import asyncio
import hmac
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.errors import ErrorCode, ThreadlineError
from threadline.crossing import error_of

from . import openai_errors
from .limits import Limits, too_slow
from .status import STATUS as STATUS  # re-exported: its home before it had a module of its own

logger = structlog.get_logger("threadline.service")


@dataclass(frozen=True, slots=True)
class APIKey:
    """A bearer key, good for every store (`stores` None) or only for the stores named."""

    secret: str = field(repr=False)
    stores: frozenset[str] | None = None

    @classmethod
    def parse(cls, spec: str) -> APIKey:
        """A key from `key` or `key:store1+store2`."""
        secret, scoped, names = spec.strip().partition(":")
        stores = frozenset(filter(None, (name.strip() for name in names.split("+"))))
        if not secret or (scoped and not stores):
            raise ThreadlineError(
                ErrorCode.INVALID_REQUEST, "an API key is `key` or `key:store1+store2`; fix its setting"
            )
        return cls(secret, stores if scoped else None)

    def allows(self, store: str) -> bool:
        """Whether this key may use `store`."""
        return self.stores is None or store in self.stores


# ----- errors


def error_response(err: ThreadlineError, path: str = "") -> JSONResponse:
    """The answer for `err`: `{"error": {"code", "message"}}` with the status `STATUS` gives its code,
    or the OpenAI protocol's error when `path` is one of its routes."""
    if openai_errors.is_protocol(path):
        return openai_errors.protocol_error(err)
    status = STATUS.get(str(err.code), 500)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": err.to_dict()}, status_code=status, headers=headers)


def as_error(exc: Exception) -> ThreadlineError:
    """`exc` as a coded error: ours as it is, a malformed body `invalid-request`, anything else as
    `threadline.crossing` reads it (Temporal's errors by their codes, the rest `internal`)."""
    if isinstance(exc, RequestValidationError):
        return ThreadlineError(ErrorCode.INVALID_REQUEST, _describe(exc))
    return error_of(exc)


def _describe(exc: RequestValidationError) -> str:
    first: dict[str, Any] = next(iter(exc.errors()), {})
    if first.get("type") == "json_invalid":
        return "the body is not valid JSON; send a JSON object"
    where = ".".join(str(part) for part in first.get("loc", ()))
    return f"{where}: {first.get('msg', 'invalid')}"  # pydantic's message names the rule, never the value


async def on_error(request: Request, exc: Exception) -> Response:
    """Exception handler: answer any exception as its coded error (a malformed body of the OpenAI
    protocol names its field as `param`, as the protocol does)."""
    err = as_error(exc)
    if isinstance(exc, RequestValidationError) and openai_errors.is_protocol(request.url.path):
        err = ThreadlineError(err.code, err.message, param=_field(exc))
    return error_response(err, request.url.path)


def _field(exc: RequestValidationError) -> str | None:
    """The top field of the body the first error is about (None: the body itself)."""
    first: dict[str, Any] = next(iter(exc.errors()), {})
    loc = [str(part) for part in first.get("loc", ())]
    return loc[1] if len(loc) > 1 and loc[0] == "body" else None


async def on_http_error(request: Request, exc: Exception) -> Response:
    """Exception handler for Starlette's own errors (no such route, wrong method): they keep their status,
    except a body that cannot be parsed at all (not UTF-8), which is 422 like any other malformed body."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 400:
        err = ThreadlineError(ErrorCode.INVALID_REQUEST, "the body is not JSON in UTF-8; send a JSON object")
        return error_response(err, request.url.path)
    message = f"{request.method} {request.url.path}: {exc.detail if isinstance(exc, HTTPException) else exc}"
    if openai_errors.is_protocol(request.url.path):
        code = ErrorCode.CONVERSATION_NOT_FOUND if status == 404 else ErrorCode.INVALID_REQUEST
        return JSONResponse(openai_errors.protocol_body(ThreadlineError(code, message), status), status_code=status)
    return JSONResponse({"error": {"code": ErrorCode.INVALID_REQUEST.value, "message": message}}, status_code=status)


# ----- middleware


class RequestLog:
    """Binds a request id (X-Request-ID or a new one) and logs one `http.request` line per request.

    It also answers unexpected exceptions (500 `internal`), so their traceback goes on that same
    line, with the request id, instead of on a line of uvicorn's without it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = Headers(scope=scope).get("x-request-id", "")
        rid = given if 0 < len(given) <= 128 and given.isascii() and given.isprintable() else uuid.uuid4().hex
        status: int | None = None

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message).append("X-Request-ID", rid)
            await send(message)

        with structlog.contextvars.bound_contextvars(request_id=rid):
            start, failure = time.perf_counter(), None
            try:
                await self.app(scope, receive, send_with_id)
            except Exception as exc:  # noqa: BLE001 - answered and logged here, with the request id
                failure = exc
                if status is None:  # else a stream broke: nothing more can be sent, uvicorn closes it
                    await error_response(as_error(exc), scope["path"])(scope, receive, send_with_id)
            fields = {"method": scope["method"], "path": scope["path"], "status": status or 500}
            fields["ms"] = round((time.perf_counter() - start) * 1000, 1)
            if failure is None:
                logger.info("http.request", **fields)
            else:
                logger.error("http.request", **fields, exc_info=failure)


class Auth:
    """Refuses `/v1/` and `/openai/v1/` requests without a configured bearer key (401); puts the key in
    `request.state.key`."""

    def __init__(self, app: ASGIApp, *, keys: Sequence[APIKey]) -> None:
        self.app, self.keys = app, tuple(keys)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        guarded = scope["type"] == "http" and (
            scope["path"].startswith("/v1/") or openai_errors.is_protocol(scope["path"])
        )
        if guarded and self.keys:
            key = self._match(Headers(scope=scope).get("authorization", ""))
            if key is None:
                err = ThreadlineError(ErrorCode.UNAUTHORIZED, "send a valid API key as `Authorization: Bearer <key>`")
                await error_response(err, scope["path"])(scope, receive, send)
                return
            scope.setdefault("state", {})["key"] = key
        await self.app(scope, receive, send)

    def _match(self, header: str) -> APIKey | None:
        scheme, _, token = header.partition(" ")
        given = token.strip().encode()
        found = None
        for key in self.keys:  # every key is compared, each in constant time
            if hmac.compare_digest(key.secret.encode(), given) and scheme.lower() == "bearer":
                found = key
        return found


class BodyLimit:
    """Refuses bodies over `limits.max_body_bytes` (413) by Content-Length, or by counting, before they are
    parsed, and bodies that take longer than `limits.body_timeout_s` to arrive (408, connection closed)."""

    def __init__(self, app: ASGIApp, *, limits: Limits) -> None:
        self.app, self.limits, self.limit = app, limits, limits.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length", "")
        declared = int(length) if length.isdigit() else 0
        try:
            async with asyncio.timeout(self.limits.body_timeout_s):
                read = await self._read(receive, declared)
        except TimeoutError:
            answer = error_response(too_slow(self.limits), scope["path"])
            answer.headers["Connection"] = "close"  # the rest of the body may still come: never read it
            await answer(scope, receive, send)
            return
        if read is None:
            return  # the client went away
        body, whole = read
        if not whole or len(body) > self.limit:
            err = ThreadlineError(ErrorCode.INPUT_TOO_LARGE, f"the body is over {self.limit} bytes; send less")
            await error_response(err, scope["path"])(scope, receive, send)
            return
        await self.app(scope, _replay(bytes(body), receive), send)

    async def _read(self, receive: Receive, declared: int) -> tuple[bytearray, bool] | None:
        """The body and whether it is whole (reading stops once it is over the limit); None if the client left."""
        body, more = bytearray(), True
        while more and declared <= self.limit and len(body) <= self.limit:
            message = await receive()
            if message["type"] != "http.request":
                return None
            body += message.get("body", b"")
            more = message.get("more_body", False)
        return body, not more


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives `body` once, then passes later messages (`http.disconnect`) through."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
