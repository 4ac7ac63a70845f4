"""The worker's activity slots (activities/intake.py) on a real dev server: a worker whose event loop is
held takes no more tasks than it began, plus a few, where the SDK's fixed slots take every task the
server has while the loop cannot begin any; and a worker still runs many long tries at once."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.intake import Intake
from core.settings import Settings
from worker import MOST_ACTIVITIES, build_worker

TASKS = 40
AHEAD = 5
STALL_S = 4.0
"""How long the first try holds its worker's event loop."""


def _mark(path: Path, line: str) -> None:
    with path.open("a") as out:
        out.write(line)


@activity.defn(name="intake_task")
async def intake_task(folder: str) -> None:
    """Write when the server handed this try out; the first try to begin holds the event loop first."""
    marks = Path(folder)
    try:
        (marks / "stall").touch(exist_ok=False)
    except FileExistsError:
        pass
    else:
        time.sleep(STALL_S)  # noqa: ASYNC251 - on purpose: nothing else in this process runs meanwhile
        (marks / "woke").write_text(str(time.time()))
    _mark(marks / "handed", f"{activity.info().started_time.timestamp()}\n")


@activity.defn(name="intake_wait")
async def intake_wait(folder: str) -> None:
    """Count the tries running at once (the most is kept), for a second."""
    marks = Path(folder)
    _mark(marks / "began", "+\n")
    _mark(marks / "most", f"{len((marks / 'began').read_text().split()) - _ended(marks)}\n")
    await asyncio.sleep(1.0)
    _mark(marks / "ended", "-\n")


def _ended(marks: Path) -> int:
    return len((marks / "ended").read_text().split()) if (marks / "ended").exists() else 0


@workflow.defn(name="IntakeTasks")
class IntakeTasks:
    @workflow.run
    async def run(self, name: str, queue: str, folder: str, count: int) -> None:
        await asyncio.gather(
            *(
                workflow.execute_activity(name, folder, task_queue=queue, start_to_close_timeout=timedelta(seconds=60))
                for _ in range(count)
            )
        )


async def _scheduled(handle: WorkflowHandle[Any, Any], count: int) -> None:
    """Wait until the workflow has scheduled `count` activities (no worker polls their queue yet)."""
    deadline = time.monotonic() + 20
    while True:
        history = await handle.fetch_history()
        kinds = [e.event_type for e in history.events]
        if kinds.count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED) >= count:
            return
        assert time.monotonic() < deadline, "the activities were never scheduled"
        await asyncio.sleep(0.1)


def _slots(kind: str) -> dict[str, Any]:
    if kind == "fixed":
        return {"max_concurrent_activities": 200}
    intake = Intake(200, AHEAD)
    return {"tuner": intake.tuner(), "interceptors": [intake]}


async def _run(client: Client, folder: Path, name: str, task: Any, slots: dict[str, Any]) -> None:
    """`TASKS` tries of `task` (activity `name`) scheduled while no worker polls their queue; then a
    worker with `slots` runs them."""
    queue, workflows = f"intake-{uuid.uuid4()}", f"intake-wf-{uuid.uuid4()}"
    async with Worker(
        client, task_queue=workflows, workflows=[IntakeTasks], workflow_runner=UnsandboxedWorkflowRunner()
    ):
        handle = await client.start_workflow(
            IntakeTasks.run,
            args=[name, queue, str(folder), TASKS],
            id=f"intake-{uuid.uuid4()}",
            task_queue=workflows,
        )
        await _scheduled(handle, TASKS)
        async with Worker(client, task_queue=queue, activities=[task], **slots):
            await handle.result()


@pytest.mark.parametrize("kind", ["intake", "fixed"])
async def test_a_worker_whose_loop_is_held_takes_few_tasks(client: Client, tmp_path: Path, kind: str) -> None:
    """`TASKS` tries wait in the queue; a worker starts, and its first try holds the event loop for
    `STALL_S`. With `Intake` the tries the server handed to the worker meanwhile are a few; with the
    fixed slots (the control, which shows the test can fail) they are all of them."""
    await _run(client, tmp_path, "intake_task", intake_task, _slots(kind))
    woke = float((tmp_path / "woke").read_text())
    handed = [float(line) for line in (tmp_path / "handed").read_text().split()]
    assert TASKS == len(handed)
    held = sum(at < woke for at in handed)  # handed out before the loop could begin them
    if kind == "intake":
        assert held <= 2 * AHEAD, handed
    else:
        assert held == TASKS, handed


async def test_a_worker_runs_many_long_tries_at_once(client: Client, tmp_path: Path) -> None:
    """`AHEAD` bounds the tries taken and not yet begun, not the tries running: all `TASKS` run at once."""
    await _run(client, tmp_path, "intake_wait", intake_wait, _slots("intake"))
    assert TASKS == max(int(n) for n in (tmp_path / "most").read_text().split())


async def test_a_threadline_worker_takes_its_activity_tasks_through_intake(client: Client, settings: Settings) -> None:
    """The worker `build_worker` makes counts the tries it begins and takes its activity slots from them."""
    async with build_worker(client, settings) as worker:
        config = worker.config()
    intakes = [i for i in config.get("interceptors", []) if isinstance(i, Intake)]
    assert 1 == len(intakes)
    assert config.get("tuner") is not None
    assert config.get("max_concurrent_activities") is None  # the tuner's slots, not the SDK's fixed ones
    assert MOST_ACTIVITIES == intakes[0].most
