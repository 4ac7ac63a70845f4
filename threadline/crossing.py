"""The client's side of the Temporal boundary: every call the public face makes into Temporal runs
inside `crossing()`, which turns whatever the SDK raises into a `ThreadlineError` with a code of
docs/errors.md, so no raw SDK exception reaches a caller of the Python API, the CLI or the service.

    with crossing():
        await handle.signal("stop", StopSend())

`core.temporal` is the activity side (`coded`, `to_failure`) and reads failures that carry a code
(`from_failure`); this module adds what only a caller meets: a server that is down or restarting
(`tcp connect error`), a call that timed out, an update nobody accepted in time, a workflow run that
failed. Those are `Unreached`: Temporal did not answer, so the call may or may not have taken effect,
and a send can then be kept by another way (`threadline.delivery`).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Final, ParamSpec, TypeVar

from temporalio.client import (
    RPCTimeoutOrCancelledError,
    ScheduleAlreadyRunningError,
    WorkflowContinuedAsNewError,
    WorkflowFailureError,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import TemporalError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from core.errors import ErrorCode, ThreadlineError
from core.temporal import from_failure

P = ParamSpec("P")
R = TypeVar("R")

TIMED_OUT: Final = "TIMED_OUT"
"""`Unreached.status` of a call that got no answer in time (its own deadline, or the server's)."""
SDK_ERROR: Final = TemporalError
"""What every exception the SDK raises is (the service answers each as `error_of` reads it)."""
ASK_AGAIN: Final = frozenset({RPCStatusCode.FAILED_PRECONDITION.name, RPCStatusCode.RESOURCE_EXHAUSTED.name})
"""Refusals that pass: a workflow task failing for a while, or the 10 updates in flight that Temporal
allows per workflow (each ends with its turn)."""


_LATE = "Temporal did not answer in time; ask again (a send with the same request id)"


class Unreached(ThreadlineError):  # noqa: N818 - what happened, not a fault of the caller
    """Temporal did not answer (`server-unavailable`, retryable): it is down, restarting, overloaded, or
    the call ran out of time. What was asked may or may not have happened: ask again with the same ids.

    `status` names what happened (an RPC status name, or `TIMED_OUT`) for the callers that decide by it.
    """

    def __init__(self, message: str, *, status: str) -> None:
        super().__init__(ErrorCode.SERVER_UNAVAILABLE, message, retryable=True)
        self.status = status


def error_of(err: BaseException) -> ThreadlineError:
    """The `ThreadlineError` a caller sees for `err`, raised by a call into Temporal."""
    if isinstance(err, ThreadlineError):
        return err
    if isinstance(err, RPCTimeoutOrCancelledError | TimeoutError):
        return Unreached(_LATE, status=TIMED_OUT)
    if isinstance(err, RPCError):
        return _rpc(err)
    if isinstance(err, WorkflowAlreadyStartedError):
        return ThreadlineError(ErrorCode.INVALID_REQUEST, "a workflow with that id runs already; choose another id")
    if isinstance(err, WorkflowFailureError):
        return from_failure(err.cause)
    if isinstance(err, WorkflowContinuedAsNewError | WorkflowQueryRejectedError):
        return ThreadlineError(ErrorCode.TURN_STATE, "the workflow moved on before it answered; ask again")
    if isinstance(err, WorkflowQueryFailedError):
        return ThreadlineError(ErrorCode.INTERNAL, "the workflow's query failed; the worker log has the details")
    if isinstance(err, ConnectionError):
        return Unreached("Temporal cannot be reached; retry when it is back", status=RPCStatusCode.UNAVAILABLE.name)
    if isinstance(err, WorkflowUpdateFailedError | TemporalError):
        return from_failure(err)  # a coded refusal, or `internal` naming only the exception's type
    # The message of an unexpected error may quote values; only its type leaves the process.
    return ThreadlineError(ErrorCode.INTERNAL, f"an unexpected {type(err).__name__}; the log has the details")


def _rpc(err: RPCError) -> ThreadlineError:
    if err.status == RPCStatusCode.NOT_FOUND:
        return ThreadlineError(ErrorCode.CONVERSATION_NOT_FOUND, "no such conversation is open: send a turn first")
    if err.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):  # the SDK's reading too
        return Unreached(_LATE, status=TIMED_OUT)
    if err.status in _REFUSED:
        code, why = _REFUSED[err.status]
        return ThreadlineError(code, f"Temporal refused the call ({err.status.name}): {why}")
    # UNAVAILABLE is also a server that was killed or restarts (`tcp connect error`); the SDK has
    # retried it for seconds already.
    message = f"Temporal did not answer ({err.status.name}); retry when it is back"
    return Unreached(message, status=err.status.name)


_REFUSED: Final = {
    RPCStatusCode.UNIMPLEMENTED: (ErrorCode.INTERNAL, "this Temporal server does not offer it"),
    RPCStatusCode.INVALID_ARGUMENT: (ErrorCode.INVALID_REQUEST, "it was malformed"),
    RPCStatusCode.PERMISSION_DENIED: (ErrorCode.FORBIDDEN, "the connection may not do this"),
    RPCStatusCode.UNAUTHENTICATED: (ErrorCode.UNAUTHORIZED, "the connection's credentials were refused"),
}
"""Refusals that asking again would not change (answered, not `Unreached`)."""


Refusal = Callable[[str, str], "ThreadlineError | None"]
"""How a caller words Temporal's refusal of its own kind of call: given the RPC status name (or
`ALREADY_EXISTS`) and Temporal's message, its coded error, or None to leave it to `error_of`."""


def _status(err: BaseException) -> tuple[str, str] | None:
    if isinstance(err, ScheduleAlreadyRunningError):
        return RPCStatusCode.ALREADY_EXISTS.name, str(err)
    if isinstance(err, RPCError):
        return err.status.name, err.message
    return None


class crossing:  # noqa: N801 - used as a statement, like contextlib's `suppress`
    """A block of calls into Temporal: any exception it raises leaves as `error_of(exc)` (cancellation
    passes untouched: it is no `Exception`), or as what `refusal` makes of a refusal it words itself
    (a schedule that is not there is `schedule-unknown`, not a conversation not found)."""

    def __init__(self, refusal: Refusal | None = None) -> None:
        self._refusal = refusal

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None
    ) -> None:
        if isinstance(exc, Exception) and not isinstance(exc, ThreadlineError):
            status = _status(exc)
            if self._refusal is not None and status is not None and (worded := self._refusal(*status)) is not None:
                raise worded from None
            raise error_of(exc) from None


def crossed(call: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """`call`, run inside `crossing()`."""

    @functools.wraps(call)
    async def crossed_call(*args: P.args, **kwargs: P.kwargs) -> R:
        with crossing():
            return await call(*args, **kwargs)

    return crossed_call
