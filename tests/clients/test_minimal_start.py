"""A conversation started by a client that knows only docs/workflow.md (the workflow type, its id,
the task queue and the minimal input) runs with the worker's settings and is listed like any
other; its history replays."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import Replayer, Worker

from core.settings import Settings
from core.temporal import workflow_id
from tests.support.client_kit import listed_idle
from threadline.client import Threadline
from worker import build_worker
from workflows.conversation import ConversationWorkflow


async def start_bare(client: Client, settings: Settings, cid: str) -> WorkflowHandle[Any, Any]:
    """Start with the input docs/workflow.md names: the identity and the program, by plain JSON."""
    return await client.start_workflow(
        "Conversation",
        {"config": {"store": "default", "conversation": cid, "program": "tutor"}},
        id=workflow_id("default", cid),
        task_queue=settings.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )


async def test_a_bare_start_is_listed_and_replays(
    tl: Threadline, client: Client, settings: Settings, worker: Worker, cid: str
) -> None:
    """No search attributes and no settings at start: the workflow sets its own attributes, so the
    listing finds it with its program and turns; the new start path replays."""
    handle = await start_bare(client, settings, cid)

    answer = await handle.execute_update("send", {"request_id": "r-1", "inputs": {"message": "Hello"}})
    info = await listed_idle(tl, cid, turns=1)
    history = await handle.fetch_history()

    assert "done" == answer["state"]
    assert ("tutor", "default", workflow_id("default", cid)) == (info.program, info.store, info.workflow_id)
    await Replayer(workflows=[ConversationWorkflow], data_converter=client.data_converter).replay_workflow(history)


async def test_a_bare_start_idles_out_after_the_workers_timeout(
    tl: Threadline, client: Client, settings: Settings, cid: str
) -> None:
    """The idle timeout a bare start leaves out is the worker's (`THREADLINE_IDLE_TIMEOUT_S`), not the
    model's day: the run closes after it."""
    quick = dataclasses.replace(settings, idle_timeout_s=1.0)

    async with build_worker(client, quick):
        handle = await start_bare(client, quick, cid)
        await handle.execute_update("send", {"request_id": "r-1", "inputs": {"message": "Hello"}})
        ended = await asyncio.wait_for(handle.result(), timeout=30)

    assert "idle" == ended
