"""The ScheduledTurn workflow: one firing of a conversation's schedule, delivered as a normal turn.

A Temporal Schedule can only start a workflow, so each firing starts this one. It names the turn by
the schedule and the firing's scheduled time (`firing_request_id`), so a firing run again sends the
same request id and the conversation records one turn; it delivers the send as the `turn` signal
(signal-with-start, in an activity) and does not wait for the answer: firings that overlap a running
turn meet the conversation's own `sends` rule like any send. A conversation closed after its
schedule was made gets nothing, and the schedule is deleted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.scheduling import ScheduleActivities
    from core.schedules import Firing, ScheduledSend, firing_request_id
    from core.temporal import SCHEDULED_TURN_WORKFLOW, from_failure, to_failure

R = TypeVar("R")
SCHEDULED_AT = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")
"""Set by Temporal on every run a schedule starts: the firing's nominal time."""
DELIVER_TIMEOUT = timedelta(seconds=30)
DELIVER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10), maximum_attempts=30
)
"""A firing keeps trying for about four minutes while Temporal refuses it, then fails (the schedule goes on)."""


@workflow.defn(name=SCHEDULED_TURN_WORKFLOW)
class ScheduledTurnWorkflow:
    """One firing of a schedule: the turn it sends, by a request id of its own."""

    @workflow.run
    async def run(self, firing: ScheduledSend) -> Firing:
        """Deliver the firing's turn; end the schedule instead when its conversation was closed."""
        at = firing.at or workflow.info().typed_search_attributes.get(SCHEDULED_AT) or workflow.info().start_time
        request_id = firing_request_id(firing.schedule, at)
        send = firing.send.model_copy(update={"request_id": request_id})
        firing = firing.model_copy(update={"send": send, "at": at})
        delivered = await _step(ScheduleActivities.deliver_firing, firing, f"turn {request_id}")
        if not delivered:
            await _step(ScheduleActivities.end_schedule, firing, "the conversation was closed: end the schedule")
        return Firing(request_id=request_id, delivered=delivered)


async def _step(step: Callable[[Any, ScheduledSend], Awaitable[R]], firing: ScheduledSend, summary: str) -> R:
    """A local activity (the firing ends in one workflow task); its failure as a coded `ApplicationError`."""
    try:
        return await workflow.execute_local_activity_method(
            step, firing, start_to_close_timeout=DELIVER_TIMEOUT, retry_policy=DELIVER_RETRY, summary=summary
        )
    except ActivityError as err:
        raise to_failure(from_failure(err)) from None
