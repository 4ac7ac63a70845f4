"""Workflow code stays deterministic: real histories replay without a non-determinism error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.worker import Replayer, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from core.temporal import DATA_CONVERTER, workflow_id
from threadline.client import Threadline
from worker import workflow_runner
from workflows.conversation import ConversationWorkflow

HISTORIES = Path(__file__).parent.parent / "histories"


def replayer(converter: DataConverter = DATA_CONVERTER, *, sandbox: bool = False) -> Replayer:
    """A replayer running the workflow as workers do (`workflow_runner`), or in the SDK's own sandbox."""
    runner = SandboxedWorkflowRunner() if sandbox else workflow_runner(converter)
    return Replayer(workflows=[ConversationWorkflow], data_converter=converter, workflow_runner=runner)


async def test_a_fresh_history_replays(tl: Threadline, client: Client, worker: Worker, cid: str) -> None:
    """Turns, a branch, a head move, a refusal and a stop, replayed from their history."""
    chat = tl.conversation("tutor", id=cid)
    first = await chat.predict("one")
    await chat.predict("two")
    await chat.continue_from(first.id).predict("beside")
    await chat.head(first.id)
    await chat.stop()
    with pytest.raises(Exception, match="inputs"):
        await chat.send(wrong="input")

    history = await client.get_workflow_handle(workflow_id("default", cid)).fetch_history()

    await replayer(client.data_converter).replay_workflow(history)
    await replayer(client.data_converter, sandbox=True).replay_workflow(history)


def kept() -> list[WorkflowHistory]:
    return [WorkflowHistory.from_json(p.stem, json.loads(p.read_text())) for p in sorted(HISTORIES.glob("*.json"))]


@pytest.mark.parametrize("history", kept(), ids=lambda h: h.workflow_id)
async def test_a_kept_history_replays(history: WorkflowHistory) -> None:
    """Histories kept from earlier versions still replay: a change that breaks them needs `patched`;
    in the workers' sandbox and in the SDK's own. Each run of a conversation that continued as new is
    kept on its own, by the release whose workers recorded it (`tests.make_histories`)."""
    await replayer().replay_workflow(history)
    await replayer(sandbox=True).replay_workflow(history)
