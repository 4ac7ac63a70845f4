"""Errors of the OpenAI protocol (`/openai/v1`): `{"error": {"message", "type", "param", "code"}}`.

The official client raises its exception class by status alone (400 `BadRequestError`, 401
`AuthenticationError`, 403 `PermissionDeniedError`, 404 `NotFoundError`, 409 `ConflictError`, 429
`RateLimitError`, 5xx `InternalServerError`), so each Threadline code is given the status the
protocol uses for the same failure: bad input is 400 there (422 on the native routes).
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from core.errors import ErrorCode, ThreadlineError

from .status import STATUS

PREFIX = "/openai/v1"
"""Where the protocol is served."""
RETRY_AFTER_S = 1
"""What a 429 of the protocol asks the client to wait (the official client waits so before its retry)."""

_PROTOCOL: dict[str, tuple[int, str]] = {
    ErrorCode.UNAUTHORIZED: (401, "invalid_api_key"),
    ErrorCode.FORBIDDEN: (403, "permission_denied"),
    ErrorCode.CONVERSATION_NOT_FOUND: (404, "not_found"),
    ErrorCode.TURN_UNKNOWN: (404, "not_found"),
    ErrorCode.CONVERSATION_BUSY: (409, "conversation_locked"),
    ErrorCode.TURN_STATE: (409, "response_state"),
    ErrorCode.TOO_MANY_REQUESTS: (429, "rate_limit_exceeded"),
}
"""Codes whose protocol status or code is not simply the native one."""


def protocol_status(err: ThreadlineError) -> tuple[int, str]:
    """The status and the protocol's `code` for `err`."""
    if isinstance(err.details.get("protocol_code"), str):
        status, _ = protocol_status(ThreadlineError(err.code, err.message))
        return status, str(err.details["protocol_code"])
    if err.code == ErrorCode.PROVIDER_UNAVAILABLE and err.details.get("status") == 429:
        return 429, "rate_limit_exceeded"  # the provider kept refusing for its rate limit
    if str(err.code) in _PROTOCOL:
        return _PROTOCOL[str(err.code)]
    status = STATUS.get(str(err.code), 500)
    return (400 if status == 422 else status), str(err.code).replace("-", "_")


def _kind(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 429:
        return "rate_limit_error"
    return "server_error" if status >= 500 else "invalid_request_error"


def protocol_error(err: ThreadlineError) -> JSONResponse:
    """The protocol's answer for `err`."""
    status, _ = protocol_status(err)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if status == 429:
        headers = {"Retry-After": str(RETRY_AFTER_S)}
    return JSONResponse(protocol_body(err, status), status_code=status, headers=headers)


def protocol_body(err: ThreadlineError, status: int | None = None) -> dict[str, Any]:
    """`{"error": {"message", "type", "param", "code"}}` for `err` (answered with `status`, default its own)."""
    own, code = protocol_status(err)
    status = own if status is None else status
    return {"error": {"message": err.message, "type": _kind(status), "param": err.details.get("param"), "code": code}}


def is_protocol(path: str) -> bool:
    """Whether `path` is one of the protocol's."""
    return path == PREFIX or path.startswith(PREFIX + "/")


def bad_request(message: str, param: str | None = None) -> ThreadlineError:
    """A 400 for input the protocol allows but this service does not take, or takes otherwise."""
    return ThreadlineError(ErrorCode.INVALID_REQUEST, message, param=param)
