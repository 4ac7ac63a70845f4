"""The worker's heartbeat ticker (activities/heartbeats.py) on a real dev server: a try that says nothing
for longer than its heartbeat timeout is not given up on while its worker lives, and a retry that
has not yet said what its details are beats those the try before it left, never fewer: the next
retry reads them back (a turn's retry learns the log attempt an earlier try claimed that way)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.heartbeats import Heartbeats, carry

HEARTBEAT_TIMEOUT = timedelta(seconds=2)
SILENT_S = 2 * HEARTBEAT_TIMEOUT.total_seconds()
"""How long a try says nothing itself: twice its heartbeat timeout."""
CLAIMED = {"attempt": 7, "streamed": 3}


@activity.defn(name="silent_tries")
async def silent_tries() -> list[Any]:
    """The first try carries details and fails; the second says nothing for `SILENT_S` and fails; the
    third returns the details it was started with."""
    info = activity.info()
    if info.attempt == 1:
        carry(lambda: CLAIMED)
        await asyncio.sleep(1.5)  # the beat reaches the server (one a second)
        raise ApplicationError("first try fails")
    if info.attempt == 2:
        await asyncio.sleep(SILENT_S)
        raise ApplicationError("second try fails")
    return list(info.heartbeat_details)


@workflow.defn(name="SilentTries")
class SilentTries:
    @workflow.run
    async def run(self) -> list[Any]:
        return await workflow.execute_activity(
            silent_tries,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=3),
        )


async def test_a_silent_try_is_kept_and_its_details_carried_over(client: Client) -> None:
    """The second try, silent past its heartbeat timeout, fails by itself rather than timing out, and
    the third is started with the details the first carried."""
    queue = f"beats-{uuid.uuid4()}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[SilentTries],
        activities=[silent_tries],
        interceptors=[Heartbeats()],
        max_heartbeat_throttle_interval=timedelta(seconds=1),
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await client.start_workflow(SilentTries.run, id=f"beats-{uuid.uuid4()}", task_queue=queue)
        details = await handle.result()
        history = await handle.fetch_history()

    started = [
        e.activity_task_started_event_attributes
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    ]
    assert [3] == [attributes.attempt for attributes in started]
    assert "second try fails" == started[0].last_failure.message  # not a heartbeat timeout
    assert [CLAIMED] == details
