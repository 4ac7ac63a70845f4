"""How the workflow calls its activities: their kinds, timeouts and retry policies, in one place.

Quick store steps run as local activities (on this worker, within the workflow task: placing a
turn costs no extra task); steps that wait on another writer or call a model are regular
activities with a heartbeat timeout, so a worker that dies is noticed in seconds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from core.errors import ErrorCode
    from core.temporal import RETRY_WAIT_MOST_SECONDS, from_failure, to_failure

A = TypeVar("A")
R = TypeVar("R")
Step = Callable[[Any, A], Awaitable[R]]

STORE_TIMEOUT = timedelta(seconds=30)
STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    maximum_interval=timedelta(seconds=5),
    maximum_attempts=10,
    non_retryable_error_types=[ErrorCode.STORE_MISMATCH],
)
"""A store step retries a passing I/O failure for about half a minute, then the send fails with its code."""
END_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=[ErrorCode.STORE_MISMATCH],
)
END_DEADLINE = timedelta(hours=2)
"""Ending a turn whose runner gave up outlasts a store outage of minutes: it retries for two hours."""
MODEL_CALL_TIMEOUT = timedelta(minutes=10)
"""The longest a model call may take; longer than any provider timeout."""
MODEL_HEARTBEAT_TIMEOUT = timedelta(seconds=3)
"""The lease inside Temporal: a worker silent this long is presumed dead and the turn runs elsewhere."""
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    maximum_interval=timedelta(seconds=RETRY_WAIT_MOST_SECONDS),
    maximum_attempts=8,
)
"""A model step's tries: the wait between two stays inside the turn's lease, which the try before it
renewed, so the turn reads `running` throughout (eight tries take about 52 s)."""
FOLLOW_TIMEOUT = timedelta(hours=2)


class WrongStoreError(RuntimeError):
    """This worker's store is not the conversation's. Raised out of workflow code on purpose: it fails
    the workflow task, which Temporal then gives to a worker again (evicted here, not sticky), until
    one with the right store takes it; nothing is written meanwhile."""


FOLLOW_HEARTBEAT_TIMEOUT = timedelta(seconds=10)


async def quick(step: Step[A, R], arg: A, *, summary: str | None = None, retry: RetryPolicy = STORE_RETRY) -> R:
    """A store step as a local activity; its failure raised as a coded `ApplicationError`.

    Coded and an `ApplicationError`: escaping an update handler it fails that update with its
    code, where any other exception would fail the workflow task again and again.
    """
    deadline = END_DEADLINE if retry is END_RETRY else None
    try:
        return await workflow.execute_local_activity_method(
            step,
            arg,
            start_to_close_timeout=STORE_TIMEOUT,
            schedule_to_close_timeout=deadline,
            retry_policy=retry,
            summary=summary,
        )
    except (ActivityError, ApplicationError) as err:  # a local activity's failure comes unwrapped
        failure = from_failure(err)
        if failure.code == ErrorCode.STORE_MISMATCH:
            workflow.logger.error("store mismatch: handing the conversation to another worker")
            raise WrongStoreError(failure.message) from None
        raise to_failure(failure) from None


async def follow(step: Step[A, R], arg: A) -> R:
    """A step that waits on another writer: a heartbeating activity; its failure as a coded `ApplicationError`."""
    try:
        return await workflow.execute_activity_method(
            step,
            arg,
            start_to_close_timeout=FOLLOW_TIMEOUT,
            heartbeat_timeout=FOLLOW_HEARTBEAT_TIMEOUT,
            retry_policy=STORE_RETRY,
        )
    except ActivityError as err:
        raise to_failure(from_failure(err)) from None


async def model(step: Step[A, R], arg: A, *, summary: str) -> R:
    """A step that asks a model: a regular activity, heartbeating; its failure as a coded `ApplicationError`."""
    try:
        return await workflow.execute_activity_method(
            step,
            arg,
            start_to_close_timeout=MODEL_CALL_TIMEOUT,
            heartbeat_timeout=MODEL_HEARTBEAT_TIMEOUT,
            retry_policy=MODEL_RETRY,
            summary=summary,
        )
    except ActivityError as err:
        raise to_failure(from_failure(err)) from None


TOOL_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
"""A tool's activity heartbeats every quarter second while it runs; silent this long, its worker is gone."""


async def tool(step: Step[A, R], arg: A, *, timeout_s: float, attempts: int, summary: str) -> R:
    """A tool call: its own activity, with the tool's own timeout and number of tries (a tool that may
    change things is tried once unless it says otherwise); its failure as a coded `ApplicationError`."""
    retry = RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=10),
        maximum_attempts=attempts,
        non_retryable_error_types=[ErrorCode.TURN_UNFINISHED],
    )
    try:
        return await workflow.execute_activity_method(
            step,
            arg,
            start_to_close_timeout=timedelta(seconds=timeout_s),
            heartbeat_timeout=TOOL_HEARTBEAT_TIMEOUT,
            retry_policy=retry,
            summary=summary,
        )
    except ActivityError as err:
        raise to_failure(from_failure(err)) from None
