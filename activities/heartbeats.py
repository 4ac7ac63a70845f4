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
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

BEAT_EVERY_S = 0.5
"""Half the worker's heartbeat throttle: every heartbeat the SDK sends carries a beat this recent."""


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


class _Beating(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        if info.is_local or info.heartbeat_timeout is None:  # nothing times it out for silence
            return await self.next.execute_activity(input)
        pulse = _Pulse(info.heartbeat_details)
        token = _PULSE.set(pulse)
        ticker = asyncio.create_task(_tick(pulse), name=f"heartbeat {info.activity_type} {info.activity_id}")
        try:
            return await self.next.execute_activity(input)
        finally:
            ticker.cancel()
            _PULSE.reset(token)


class Heartbeats(Interceptor):
    """The worker's interceptor that beats every try with a heartbeat timeout for its whole life."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Beating(next)
