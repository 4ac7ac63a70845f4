"""A try's heartbeat, beaten for as long as the try lives, whatever it waits for.

Temporal's heartbeat timeout is the lease inside Temporal (workflows/_calls.py): a worker silent
that long is presumed dead, and the step runs again elsewhere. It must tell a dead or frozen worker
from a busy one. A try that waits on its store (calls queued behind others on the store's threads
under load, a lock held in the database, a slow disk) is alive, and running it again would ask its
model again. So every try with a heartbeat timeout beats on a ticker of its own for its whole life,
every `BEAT_EVERY_S` from its start (`Heartbeats`, the worker's interceptor): on the worker's event
loop, so a worker that died or is frozen stops beating, and one whose store is slow does not.

The SDK sends the newest beat at most once a throttle interval (`worker.HEARTBEAT_THROTTLE`, 1 s),
and a cancel arrives with a heartbeat's answer. A beat carries the try's details as they stand
(`carry`); a retry reads the last ones back (`activity.info().heartbeat_details`), so until a try says
what its details are, its ticker beats those the try before it left, never fewer.

A try can also reach its worker late: the server hands a task to a worker's waiting poll and counts
it started then, but a worker frozen at that moment (SIGSTOP, a stalled VM) reads it only once it
wakes. If that is later than the heartbeat timeout, the server has given up on the try and run it
again elsewhere, where it may already have claimed the turn; the woken try, doing its work, would
take the turn back and ask the model again. So a try that starts later than its heartbeat timeout
after the server started it (`_late`) first beats and waits for the server's answer (`LATE_WAIT_S`):
a try given up on is cancelled there, before its first line; one the server still counts runs on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

logger = structlog.get_logger(__name__)

BEAT_EVERY_S = 0.5
"""Half the worker's heartbeat throttle: every heartbeat the SDK sends carries a beat this recent."""
LATE_WAIT_S = 2.0
"""How long a try that reached its worker late waits for the server's answer to its first beat (a
round trip, and the cancel it brings when the server gave up on the try)."""


class _Pulse:
    """What a try's beats carry: the details an earlier try left, until the try `carry`s its own."""

    def __init__(self, inherited: Sequence[Any]) -> None:
        inherited = tuple(inherited)
        self.details: Callable[[], Sequence[Any]] = lambda: inherited


_PULSE: ContextVar[_Pulse | None] = ContextVar("threadline_pulse", default=None)


def carry(details: Callable[[], Any]) -> None:
    """From now on every beat of this try carries `details()`: the try's details as they stand."""
    pulse = _PULSE.get()
    if pulse is None:  # a try run without the ticker (an activity tested alone): `beat` still carries them
        pulse = _Pulse(())
        _PULSE.set(pulse)
    pulse.details = lambda: (details(),)


def beat() -> None:
    """Beat now, not at the next tick (a retry must learn of a claim even if this try dies at once)."""
    pulse = _PULSE.get()
    activity.heartbeat(*(pulse.details() if pulse is not None else ()))


async def _tick(pulse: _Pulse) -> None:
    """Beat every `BEAT_EVERY_S`, the first after one interval: a try that ends sooner (most of them,
    with a quick model) costs the server no heartbeat at all."""
    while True:
        await asyncio.sleep(BEAT_EVERY_S)
        activity.heartbeat(*pulse.details())


async def _late(info: activity.Info, limit: timedelta, pulse: _Pulse) -> None:
    """If the try reached this worker later than its heartbeat timeout (`limit`) after the server started it, beat
    and wait `LATE_WAIT_S` for the server's answer: a try the server gave up on is cancelled here
    (`CancelledError`) before its first line. Clocks apart by more than the timeout only cost a wait."""
    late = (datetime.now(UTC) - info.started_time).total_seconds()
    if late <= limit.total_seconds():
        return
    logger.warning("activity.late", activity=info.activity_type, attempt=info.attempt, late_s=round(late, 3))
    activity.heartbeat(*pulse.details())
    await asyncio.sleep(LATE_WAIT_S)
    logger.info("activity.late_kept", activity=info.activity_type, attempt=info.attempt)


class _Beating(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        if info.is_local or info.heartbeat_timeout is None:  # nothing times it out for silence
            return await self.next.execute_activity(input)
        pulse = _Pulse(info.heartbeat_details)
        token = _PULSE.set(pulse)
        ticker = asyncio.create_task(_tick(pulse), name=f"heartbeat {info.activity_type} {info.activity_id}")
        try:
            await _late(info, info.heartbeat_timeout, pulse)
            return await self.next.execute_activity(input)
        finally:
            ticker.cancel()
            _PULSE.reset(token)


class Heartbeats(Interceptor):
    """The worker's interceptor that beats every try with a heartbeat timeout for its whole life."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Beating(next)
