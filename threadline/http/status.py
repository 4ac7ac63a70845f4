"""The HTTP status of each error code, in one table the native routes and the OpenAI protocol share."""

from __future__ import annotations

from core.errors import ErrorCode

STATUS: dict[str, int] = {
    ErrorCode.FLOW_UNKNOWN: 400,  # the article's service answers 400 for an unknown flow
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.CONVERSATION_NOT_FOUND: 404,
    ErrorCode.TURN_UNKNOWN: 404,
    ErrorCode.CONVERSATION_BUSY: 409,
    ErrorCode.CONVERSATION_CLOSED: 409,
    ErrorCode.CONVERSATION_RUNNING: 409,
    ErrorCode.STORE_CONFLICT: 409,
    ErrorCode.TURN_STATE: 409,
    ErrorCode.TURN_UNFINISHED: 409,
    ErrorCode.TURN_WAITING: 409,
    ErrorCode.CANCELLED: 409,
    ErrorCode.BUDGET_EXCEEDED: 409,  # the conversation's state refuses it (as `conversation-closed`)
    ErrorCode.APPROVAL_UNKNOWN: 404,
    ErrorCode.SCHEDULE_UNKNOWN: 404,
    ErrorCode.SCHEDULE_EXISTS: 409,
    ErrorCode.SCHEDULE_INVALID: 422,
    ErrorCode.INPUT_TOO_LARGE: 413,
    ErrorCode.REQUEST_TIMEOUT: 408,
    ErrorCode.TOO_MANY_REQUESTS: 429,
    ErrorCode.CONVERSATION_ID: 422,
    ErrorCode.CONVERSATION_SIGNATURE: 422,
    ErrorCode.CONVERSATION_NESTED: 422,
    ErrorCode.CONVERSATION_OPAQUE: 422,
    ErrorCode.CONVERSATION_CONTENT: 422,
    ErrorCode.INPUTS_INVALID: 422,
    ErrorCode.INVALID_REQUEST: 422,
    ErrorCode.PROGRAM_UNKNOWN: 422,
    ErrorCode.PROGRAM_INVALID: 422,
    ErrorCode.PROVIDER_UNCONFIGURED: 422,  # the request named a model (`lm`) whose provider the worker lacks
    ErrorCode.RECORD_INVALID: 422,
    ErrorCode.STORE_UNKNOWN: 422,
    ErrorCode.TOOL_INPUT_INVALID: 422,
    ErrorCode.RATING_INVALID: 422,
    ErrorCode.PAYLOAD_KEY_UNKNOWN: 422,
    ErrorCode.METRIC_UNKNOWN: 422,
    ErrorCode.PROVIDER_UNAVAILABLE: 503,
    ErrorCode.SERVER_UNAVAILABLE: 503,
    ErrorCode.STORE_UNAVAILABLE: 503,
    ErrorCode.STORE_MISMATCH: 503,
}
"""The HTTP status of each error code; any other code answers 500."""
