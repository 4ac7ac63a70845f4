"""How many activity tasks a worker takes: no more than it has begun, plus a few.

Temporal counts an activity task started when it hands the task to a worker's poll, and its
heartbeat timeout runs from then. The SDK polls for a task whenever it holds a free slot, and the
fixed supplier gives up to `most` slots: a worker whose event loop is saturated (a burst of a
thousand conversations on one process) keeps taking tasks it will only begin seconds later. A task
begun later than its heartbeat timeout was given up on by the server and runs again elsewhere
(`activities.heartbeats`), which is what a burst spent its time on.

`Intake` is the worker's activity slot supplier and an interceptor: a slot is reserved only while
the tasks taken and not yet begun on the event loop (`taken - running`, the slots of polls waiting
included) are fewer than `ahead`. A try that has begun holds its slot as long as it runs, so a
worker still runs up to `most` model calls at once; a saturated one stops taking tasks it cannot
begin, and they wait in Temporal's queue, where no heartbeat timeout runs, for the first worker
that can. Reserving runs on the event loop too, so a loop that lags reserves late as well.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from temporalio import activity
from temporalio.worker import (
    ActivityInboundInterceptor,
    CustomSlotSupplier,
    ExecuteActivityInput,
    FixedSizeSlotSupplier,
    Interceptor,
    SlotMarkUsedContext,
    SlotPermit,
    SlotReleaseContext,
    SlotReserveContext,
    WorkerTuner,
)

AHEAD = 30
"""Slots a worker may hold beyond its running tries: its polls (5 by default) and the tasks they
brought that the event loop has not begun yet. A burst of 1,000 conversations on one process took
as few tries again with 10 as with 30; more leaves a busy worker's queue of tasks deeper."""
OTHER_SLOTS = 100
"""Workflow tasks, local activities and Nexus tasks a worker runs at once: the SDK's defaults."""


class Intake(CustomSlotSupplier, Interceptor):
    """The worker's activity slots: at most `most`, and at most `ahead` beyond the tries it runs.

    The SDK calls `try_reserve_slot`, `mark_slot_used` and `release_slot` from its own threads, and
    `reserve_slot` and the interceptor on the worker's event loop: the counts are kept under a lock,
    and a waiting reservation is woken on the loop."""

    def __init__(self, most: int, ahead: int = AHEAD) -> None:
        self.most, self.ahead = most, ahead
        self.taken = 0
        """Slots reserved and not released: polls waiting, tasks received, tries running."""
        self.running = 0
        """Tries of regular activities begun on the event loop and not ended."""
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None

    def _take(self) -> bool:
        with self._lock:
            free = self.taken < self.most and self.taken - self.running < self.ahead
            self.taken += free
            return free

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _wake_from_any_thread(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake)

    async def reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit:
        if self._changed is None:  # the worker's loop, at its first reservation
            self._loop, self._changed = asyncio.get_running_loop(), asyncio.Event()
        while True:
            self._changed.clear()  # before looking: a change after the look wakes the wait below
            if self._take():
                return SlotPermit()
            await self._changed.wait()

    def try_reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit | None:
        """An eager task (handed back with a workflow task's completion): taken on the same terms."""
        return SlotPermit() if self._take() else None

    def mark_slot_used(self, ctx: SlotMarkUsedContext) -> None:
        pass

    def release_slot(self, ctx: SlotReleaseContext) -> None:
        with self._lock:
            self.taken -= 1
        self._wake_from_any_thread()

    def begun(self) -> None:
        with self._lock:
            self.running += 1
        self._wake()

    def ended(self) -> None:
        with self._lock:
            self.running -= 1
        self._wake()

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Counted(next, self)

    def tuner(self) -> WorkerTuner:
        """The worker's slots: this for activities, the SDK's fixed defaults for the rest."""
        fixed = FixedSizeSlotSupplier(OTHER_SLOTS)
        return WorkerTuner.create_composite(
            workflow_supplier=fixed, activity_supplier=self, local_activity_supplier=fixed, nexus_supplier=fixed
        )


class _Counted(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, intake: Intake) -> None:
        super().__init__(next)
        self.intake = intake

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        if activity.info().is_local:  # local activities have slots of their own
            return await self.next.execute_activity(input)
        self.intake.begun()
        try:
            return await self.next.execute_activity(input)
        finally:
            self.intake.ended()
