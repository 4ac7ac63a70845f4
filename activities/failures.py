"""Crossing Temporal with coded errors: `ThreadlineError` <-> `ApplicationError(type=code)`."""

from __future__ import annotations

from datetime import timedelta

from temporalio.exceptions import ActivityError, ApplicationError, ApplicationErrorCategory, CancelledError

from core.errors import ThreadlineError, is_code
from core.models import TurnError


def to_failure(err: ThreadlineError, *, retry_after: float | None = None) -> ApplicationError:
    """The `ApplicationError` that carries `err` across Temporal (its `type` is the code).

    The retry delay is `retry_after`, else the provider's Retry-After kept in `err.details`.
    """
    seconds = retry_after if retry_after is not None else err.details.get("retry_after")
    delay = timedelta(seconds=float(seconds)) if seconds else None
    # A refusal is an answer, not an incident: BENIGN keeps it out of the worker's warning logs.
    category = ApplicationErrorCategory.UNSPECIFIED if err.retryable else ApplicationErrorCategory.BENIGN
    return ApplicationError(
        err.message, type=str(err.code), non_retryable=not err.retryable, next_retry_delay=delay, category=category
    )


def turn_error(err: BaseException) -> TurnError:
    """A `TurnError` for any failure: its code when it has one, `internal` otherwise."""
    if isinstance(err, ThreadlineError):
        return TurnError(code=str(err.code), message=err.message)
    cause = err.cause if isinstance(err, ActivityError) and err.cause is not None else err
    if isinstance(cause, CancelledError):
        return TurnError(code="turn-state", message="the turn was stopped")
    if isinstance(cause, ApplicationError) and is_code(cause.type):
        return TurnError(code=str(cause.type), message=cause.message)
    return TurnError(code="internal", message=f"{type(cause).__name__}: {cause}"[:300])
