"""The worker's heartbeat ticker (activities/heartbeats.py) on a real dev server: a try that says nothing
for longer than its heartbeat timeout is not given up on while its worker lives, and a retry that
has not yet said what its details are beats those the try before it left, never fewer: the next
retry reads them back (a turn's retry learns the log attempt an earlier try claimed that way).

A try handed to a frozen worker's waiting poll, which the worker reads only after the server gave up
on it and ran it again elsewhere, never runs its first line."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import PollerBehaviorSimpleMaximum, UnsandboxedWorkflowRunner, Worker

from activities.heartbeats import LATE_WAIT_S, Heartbeats, carry
from tests.support.processes import ROOT

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


def _mark(path: Path, line: str) -> None:
    with path.open("a") as out:
        out.write(line)


def _worker_process(client: Client, queue: str) -> subprocess.Popen[str]:
    """`_serve` in a process of its own, once it polls."""
    command = (
        "import asyncio, sys; from tests.workflow.test_heartbeats import _serve; asyncio.run(_serve(*sys.argv[1:]))"
    )
    target = client.service_client.config.target_host
    process = subprocess.Popen(
        [sys.executable, "-c", command, target, client.namespace, queue], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    assert "polling" == process.stdout.readline().strip()
    return process


@activity.defn(name="marked")
async def marked(path: str) -> str:
    """Write which process ran which attempt, then work (the ticker beating) for a second."""
    info = activity.info()
    _mark(Path(path), f"{info.attempt} {os.getpid()}\n")
    await asyncio.sleep(1.0)
    return f"attempt {info.attempt}"


@workflow.defn(name="Marked")
class Marked:
    @workflow.run
    async def run(self, queue: str, path: str) -> str:
        return await workflow.execute_activity(
            marked,
            path,
            task_queue=queue,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=1),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=5),
        )


async def _serve(address: str, namespace: str, queue: str) -> None:
    """An activity worker on `queue` alone, as the process a test freezes. It polls once at a time: each
    poll waiting when it is frozen would be handed a try of its own, so with the SDK's five a frozen
    worker could swallow every try the workflow allows (it did, once in a loaded suite)."""
    client = await Client.connect(address, namespace=namespace)
    one_poll = PollerBehaviorSimpleMaximum(maximum=1)
    beats = [Heartbeats()]
    async with Worker(
        client, task_queue=queue, activities=[marked], interceptors=beats, activity_task_poller_behavior=one_poll
    ):
        print("polling", flush=True)
        await asyncio.Event().wait()


async def _activity_pollers(client: Client, queue: str) -> Any:
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    )
    return await client.workflow_service.describe_task_queue(request)


async def test_a_try_a_frozen_worker_reads_late_never_runs(client: Client, tmp_path: Path) -> None:
    """A worker process is frozen while its poll waits; the first try goes to that poll and times out;
    the second runs on a live worker; the frozen one, thawed meanwhile, reads the first try's task
    3 s late: the server has given up on it, and it is cancelled before its first line."""
    activities, workflows = f"late-{uuid.uuid4()}", f"late-wf-{uuid.uuid4()}"
    marks = tmp_path / "marks"
    frozen = _worker_process(client, activities)
    try:
        deadline = time.monotonic() + 20
        while not (await _activity_pollers(client, activities)).pollers:  # its poll waits on the server
            assert time.monotonic() < deadline, "the worker never polled"
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        os.kill(frozen.pid, signal.SIGSTOP)
        async with Worker(
            client, task_queue=workflows, workflows=[Marked], workflow_runner=UnsandboxedWorkflowRunner()
        ):
            handle = await client.start_workflow(
                Marked.run, args=[activities, str(marks)], id=f"late-{uuid.uuid4()}", task_queue=workflows
            )
            await asyncio.sleep(3.0)  # the first try, handed to the frozen poll, timed out meanwhile
            async with Worker(client, task_queue=activities, activities=[marked], interceptors=[Heartbeats()]):
                deadline = time.monotonic() + 20
                while not marks.exists():  # the live worker runs a retry
                    assert time.monotonic() < deadline, "no retry ran"
                    await asyncio.sleep(0.05)
                os.kill(frozen.pid, signal.SIGCONT)
                answer = await handle.result()
                await asyncio.sleep(LATE_WAIT_S + 1.0)  # whatever the thawed worker does, it has done by now
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
        frozen.kill()
        frozen.wait()
        if frozen.stdout is not None:
            frozen.stdout.close()

    lines = marks.read_text().split()
    assert [str(os.getpid())] == lines[1::2], marks.read_text()  # no line from the frozen worker
    assert f"attempt {lines[0]}" == answer
