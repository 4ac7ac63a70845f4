"""One error type with stable codes.

Every failure Threadline reports to a caller is a `ThreadlineError` carrying a kebab-case
`code` from `ErrorCode`. Codes are API: they are added, never renamed, and listed in
docs/errors.md. The type knows nothing of Temporal: `core.temporal` carries it across the wire
and back.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    """The stable codes of `ThreadlineError`."""

    CONVERSATION_ID = "conversation-id"
    CONVERSATION_BUSY = "conversation-busy"
    CONVERSATION_SIGNATURE = "conversation-signature"
    CONVERSATION_NOT_FOUND = "conversation-not-found"
    CONVERSATION_CLOSED = "conversation-closed"
    CONVERSATION_RUNNING = "conversation-running"
    CONVERSATION_NESTED = "conversation-nested"
    CONVERSATION_OPAQUE = "conversation-opaque"
    CONVERSATION_CONTENT = "conversation-content"
    STORE_CONFLICT = "store-conflict"
    STORE_UNKNOWN = "store-unknown"
    STORE_UNAVAILABLE = "store-unavailable"
    STORE_INVALID = "store-invalid"
    STORE_MISMATCH = "store-mismatch"
    STORE_KIND = "store-kind"
    RECORD_INVALID = "record-invalid"
    TURN_STATE = "turn-state"
    TURN_UNKNOWN = "turn-unknown"
    PROGRAM_UNKNOWN = "program-unknown"
    PROGRAM_INVALID = "program-invalid"
    PROGRAM_FAILED = "program-failed"
    INPUTS_INVALID = "inputs-invalid"
    INPUT_TOO_LARGE = "input-too-large"
    REQUEST_TIMEOUT = "request-timeout"
    TOO_MANY_REQUESTS = "too-many-requests"
    PROVIDER_UNCONFIGURED = "provider-unconfigured"
    PROVIDER_REJECTED = "provider-rejected"
    PROVIDER_UNAVAILABLE = "provider-unavailable"
    PARSE_FAILED = "parse-failed"
    TOOL_INPUT_INVALID = "tool-input-invalid"
    SERVER_UNAVAILABLE = "server-unavailable"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    INVALID_REQUEST = "invalid-request"
    FLOW_UNKNOWN = "flow-unknown"
    FLOW_INVALID = "flow-invalid"
    RATING_INVALID = "rating-invalid"
    METRIC_UNKNOWN = "metric-unknown"
    APPROVAL_UNKNOWN = "approval-unknown"
    TURN_UNFINISHED = "turn-unfinished"
    TURN_WAITING = "turn-waiting"
    CANCELLED = "cancelled"
    STEP_LIMIT = "step-limit"
    PAYLOAD_KEY_UNKNOWN = "payload-key-unknown"
    SCHEDULE_UNKNOWN = "schedule-unknown"
    SCHEDULE_INVALID = "schedule-invalid"
    SCHEDULE_EXISTS = "schedule-exists"
    BUDGET_EXCEEDED = "budget-exceeded"
    INTERNAL = "internal"

    @classmethod
    def parse(cls, value: object) -> ErrorCode:
        """The code named `value`, or `internal` for anything that is not a code (never raises).

        Checked against the values, not with `in`: `"x" in ErrorCode` warns on Python 3.11.
        """
        return cls(value) if isinstance(value, str) and value in _CODES else cls.INTERNAL


_CODES = frozenset(code.value for code in ErrorCode)


class ThreadlineError(Exception):
    """A failure with a stable code, a one-sentence message and optional details.

    Args:
        code: One of `ErrorCode`.
        message: What was wrong and what to do, in one sentence, with no prompt text or secrets.
        retryable: Whether trying the same thing again later may succeed.
        details: Small JSON-able facts for machines (a turn id, a length), never content.
    """

    def __init__(self, code: ErrorCode, message: str, *, retryable: bool = False, **details: Any) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.retryable = retryable
        self.details = details

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"ThreadlineError({str(self.code)!r}, {self.message!r})"

    def to_dict(self) -> dict[str, Any]:
        """The error as the `{"code", "message"}` body the CLI and HTTP service print."""
        out: dict[str, Any] = {"code": str(self.code), "message": self.message}
        if self.details:
            out["details"] = self.details
        return out


def is_code(value: object) -> bool:
    """Whether `value` is one of the stable codes."""
    return isinstance(value, str) and value in _CODES
