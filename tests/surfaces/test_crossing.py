"""What Temporal's SDK raises becomes a coded error at the client's boundary (`threadline.crossing`),
and nothing else is touched: our own errors pass as they are, a cancellation stays a cancellation."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import (
    WorkflowFailureError,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from core.errors import ErrorCode, ThreadlineError
from threadline.crossing import TIMED_OUT, Unreached, crossing, error_of


def rpc(status: RPCStatusCode, message: str = "tcp connect error") -> RPCError:
    return RPCError(message, status, b"")


@pytest.mark.parametrize(
    ("raised", "code", "status"),
    [
        (rpc(RPCStatusCode.UNAVAILABLE), ErrorCode.SERVER_UNAVAILABLE, "UNAVAILABLE"),
        (rpc(RPCStatusCode.DEADLINE_EXCEEDED), ErrorCode.SERVER_UNAVAILABLE, TIMED_OUT),
        (rpc(RPCStatusCode.FAILED_PRECONDITION), ErrorCode.SERVER_UNAVAILABLE, "FAILED_PRECONDITION"),
        (WorkflowUpdateRPCTimeoutOrCancelledError(), ErrorCode.SERVER_UNAVAILABLE, TIMED_OUT),
        (TimeoutError(), ErrorCode.SERVER_UNAVAILABLE, TIMED_OUT),
        (ConnectionRefusedError(), ErrorCode.SERVER_UNAVAILABLE, "UNAVAILABLE"),
    ],
)
def test_temporal_not_answering_is_unreached(raised: Exception, code: ErrorCode, status: str) -> None:
    """A server that is down or restarting, or a call out of time: `server-unavailable`, retryable,
    with the status the callers decide by."""
    err = error_of(raised)

    assert (Unreached, code, True, status) == (type(err), err.code, err.retryable, getattr(err, "status", None))


@pytest.mark.parametrize(
    ("raised", "code"),
    [
        (rpc(RPCStatusCode.NOT_FOUND, "workflow not found"), ErrorCode.CONVERSATION_NOT_FOUND),
        (rpc(RPCStatusCode.UNIMPLEMENTED, "the test server has no such method"), ErrorCode.INTERNAL),
        (rpc(RPCStatusCode.INVALID_ARGUMENT, "bad query"), ErrorCode.INVALID_REQUEST),
        (rpc(RPCStatusCode.PERMISSION_DENIED, "no"), ErrorCode.FORBIDDEN),
        (WorkflowUpdateFailedError(ApplicationError("busy", type="conversation-busy")), ErrorCode.CONVERSATION_BUSY),
        (WorkflowFailureError(cause=ApplicationError("no rows", type="invalid-request")), ErrorCode.INVALID_REQUEST),
        (WorkflowUpdateFailedError(ApplicationError("x", type="NotACode")), ErrorCode.INTERNAL),
        (WorkflowQueryFailedError("query raised"), ErrorCode.INTERNAL),
        (KeyError("secret value"), ErrorCode.INTERNAL),
    ],
)
def test_answers_of_temporal_keep_their_codes(raised: Exception, code: ErrorCode) -> None:
    """A coded failure keeps its code; anything unexpected is `internal`, naming only its type."""
    err = error_of(raised)

    assert code == err.code
    assert "secret value" not in err.message


def test_a_block_crossing_raises_only_coded_errors() -> None:
    """`crossing()` turns what the SDK raised into a `ThreadlineError`, leaves ours and a cancellation alone."""
    ours = ThreadlineError(ErrorCode.TURN_UNKNOWN, "no such turn")

    with pytest.raises(Unreached), crossing():
        raise rpc(RPCStatusCode.UNAVAILABLE)
    with pytest.raises(ThreadlineError) as passed, crossing():
        raise ours
    with pytest.raises(asyncio.CancelledError), crossing():
        raise asyncio.CancelledError

    assert ours is passed.value
