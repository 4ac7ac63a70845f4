"""What a schedule's firing does outside its workflow: deliver its turn, or end a schedule whose
conversation was closed. Both talk to Temporal with the worker's own client.

The turn goes as the `turn` signal with signal-with-start (docs/workflow.md): durable at once, and a
conversation that closed while idle reopens for it. A conversation closed on purpose (the `close`
update, or terminated) after its schedule was made gets no more turns: its schedule is deleted.
"""

from __future__ import annotations

from datetime import datetime

import structlog
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from core.models import ConversationState
from core.schedules import ScheduledSend, schedule_id
from core.temporal import coded, from_failure, workflow_id

logger = structlog.get_logger(__name__)

CONVERSATION_WORKFLOW = "Conversation"
"""The conversation's workflow type (docs/workflow.md): named, not imported, as any client does."""


class ScheduleActivities:
    """Deliver a firing's turn; end a schedule."""

    @activity.defn(name="deliver_firing")
    @coded
    async def deliver_firing(self, firing: ScheduledSend) -> bool:
        """Send `firing.send` to its conversation as the `turn` signal (signal-with-start).

        Returns False, sending nothing, when the conversation was closed after its schedule was made
        (or the schedule is gone): the workflow then ends the schedule.
        """
        client, config = activity.client(), firing.config
        try:
            if await _closed_since_made(client, firing):
                logger.info("schedule.ended", conversation=config.conversation, schedule=firing.schedule)
                return False
            await client.start_workflow(
                CONVERSATION_WORKFLOW,
                ConversationState(config=config),
                id=workflow_id(config.store, config.conversation),
                task_queue=activity.info().task_queue,
                start_signal="turn",
                start_signal_args=[firing.send],
                static_summary=f"{config.program} conversation {config.conversation} (store {config.store})",
            )
        except RPCError as err:
            raise from_failure(err) from None
        logger.info("schedule.fired", conversation=config.conversation, schedule=firing.schedule)
        return True

    @activity.defn(name="end_schedule")
    @coded
    async def end_schedule(self, firing: ScheduledSend) -> None:
        """Delete the schedule that made `firing` (nothing when it is gone already)."""
        config = firing.config
        handle = activity.client().get_schedule_handle(schedule_id(config.store, config.conversation, firing.schedule))
        try:
            await handle.delete()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise from_failure(err) from None


async def _closed_since_made(client: Client, firing: ScheduledSend) -> bool:
    """Whether the conversation's newest run was closed (not idle) after the schedule was made."""
    config = firing.config
    try:
        described = await client.get_workflow_handle(workflow_id(config.store, config.conversation)).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False  # never started, or past retention: the firing starts it
        raise
    if not await _closed(client, described) or described.close_time is None:
        return False
    made = await _made_at(client, firing)
    return made is None or described.close_time > made


async def _closed(client: Client, described: WorkflowExecutionDescription) -> bool:
    """Whether a run ended closed: terminated, or completed `"closed"` (not `"idle"`)."""
    if described.status == WorkflowExecutionStatus.TERMINATED:
        return True
    if described.status != WorkflowExecutionStatus.COMPLETED:
        return False
    handle = client.get_workflow_handle(described.id, run_id=described.run_id, result_type=str)
    ending = await handle.result(follow_runs=False)
    return bool(ending == "closed")


async def _made_at(client: Client, firing: ScheduledSend) -> datetime | None:
    """When the firing's schedule was made (the server's clock); None when it is gone."""
    config = firing.config
    handle = client.get_schedule_handle(schedule_id(config.store, config.conversation, firing.schedule))
    try:
        return (await handle.describe()).info.created_at
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
