"""What a run that continued as new does in its first task: a run handed over clean (no turn left open
that it knew of, the flow as the log says it) neither looks for lost turns nor reads the flow back; a
run after one that may have left a turn open still looks; a turn lost where no run could know of it
is found by the next send."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Worker

from core.errors import ThreadlineError
from core.models import ConversationState, FlowStatus
from core.settings import Settings
from core.temporal import workflow_id
from tests.chaos.invariants import Ledger
from tests.chaos.test_orphaned_turns import PATIENCE_S, check_owned, place_lost
from tests.workflow.test_replay import replayer
from threadline.client import connect

FIRST_TASK_READS = {"owned_turns", "read_flow"}


def local_activities(events: list[HistoryEvent]) -> list[str]:
    """The activity types of a run's local activity markers, in order."""
    found = []
    for event in events:
        if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
            continue
        marker = event.marker_recorded_event_attributes
        if marker.marker_name == "core_local_activity":
            found.append(json.loads(marker.details["data"].payloads[0].data)["activity_type"])
    return found


async def runs(client: Client, cid: str) -> list[WorkflowHistory]:
    """Every run of the conversation's workflow, oldest first."""
    handle = client.get_workflow_handle(workflow_id("default", cid))
    newest = await handle.fetch_history()
    found = [newest]
    while previous := found[0].events[0].workflow_execution_started_event_attributes.continued_execution_run_id:
        found.insert(0, await client.get_workflow_handle(workflow_id("default", cid), run_id=previous).fetch_history())
    return found


async def carried(client: Client, history: WorkflowHistory) -> ConversationState:
    """The input a run started from (what the run before it carried)."""
    payloads = history.events[0].workflow_execution_started_event_attributes.input.payloads
    (state,) = await client.data_converter.decode(payloads, [ConversationState])
    assert isinstance(state, ConversationState)
    return state


async def test_continued_runs_read_neither_lost_turns_nor_the_flow(
    client: Client, settings: Settings, worker: Worker, cid: str
) -> None:
    """Five turns, two to a run: the second and third runs start from what the first and second handed
    over, with no `owned_turns` or `read_flow` marker of their own; the first, begun by its first send,
    left both to that send's step; their histories replay."""
    tl = await connect(dataclasses.replace(settings, turns_per_run=2), client=client)
    chat = tl.conversation("tutor", id=cid)
    for message in ("one", "two", "three", "four", "five"):
        await chat.predict(message)

    first, *continued = await runs(client, cid)
    inputs = [await carried(client, run) for run in continued]

    assert 2 == len(continued)
    assert [set()] * 3 == [FIRST_TASK_READS & set(local_activities(list(run.events))) for run in (first, *continued)]
    assert [(True, FlowStatus(current={}))] * 2 == [(state.accounted, state.flow) for state in inputs]
    for run in continued:
        await replayer(client.data_converter).replay_workflow(run)


async def test_a_flow_carried_across_continue_as_new_is_not_read_back(
    client: Client, settings: Settings, worker: Worker, cid: str
) -> None:
    """A flow active when the run continues as new crosses in its input as `read_flow` would read it
    back (where it stands, not the last answer's text), with its counts; the next run takes the answer."""
    tl = await connect(dataclasses.replace(settings, turns_per_run=2), client=client)
    chat = tl.conversation("chat", id=cid)
    await chat.start_flow("checkout")
    await chat.message("A pie.")  # the second turn: the run continues as new
    after = await chat.message("lots")

    (continued,) = (await runs(client, cid))[1:]
    handed = (await carried(client, continued)).flow
    status = await client.get_workflow_handle(workflow_id("default", cid)).query("flows", result_type=FlowStatus)

    assert set() == FIRST_TASK_READS & set(local_activities(list(continued.events)))
    assert handed is not None
    assert ("active", "quantity", None) == (handed.current.state, handed.current.step, handed.current.response)
    assert (1, {}) == (handed.counts["checkout"].started, handed.counts["checkout"].invalid)
    assert "Please enter a valid number." == after.response
    assert (1, {"quantity": 1}) == (status.counts["checkout"].started, status.counts["checkout"].invalid)
    await replayer(client.data_converter).replay_workflow(continued)


async def test_a_run_that_refused_a_send_has_the_next_run_look_for_lost_turns(
    client: Client, settings: Settings, worker: Worker, cid: str
) -> None:
    """A placing refused (its records may have landed before it gave up): the run hands over unsure, and
    the run it continued as looks for lost turns at its start, as every run did before."""
    tl = await connect(dataclasses.replace(settings, turns_per_run=2), client=client)
    chat = tl.conversation("tutor", id=cid)
    await chat.predict("one")
    with pytest.raises(ThreadlineError):
        await chat.send(wrong="input")
    await chat.predict("two")
    await chat.predict("three")

    _, second = await runs(client, cid)

    assert False is (await carried(client, second)).accounted
    assert "owned_turns" in local_activities(list(second.events))
    assert "read_flow" not in local_activities(list(second.events))


async def test_a_lost_turn_before_continuing_is_run_by_the_next_send(
    client: Client, settings: Settings, worker: Worker, folder: Path, cid: str
) -> None:
    """A turn lost just before the run continued as new (nothing in that run can know of it): the next
    run, handed over clean, does not look at its start; its first send finds the lost turn, which runs
    first, and continues from it."""
    tl, ledger = await connect(dataclasses.replace(settings, turns_per_run=2), client=client), Ledger()
    chat = tl.conversation("tutor", id=cid)
    for message in ("one", "two"):
        await ledger.predict(chat, message)
    rid, lost = place_lost(folder, cid, "lost on the way")
    ledger.answers[rid] = lost
    after = await asyncio.wait_for(ledger.predict(chat, "three"), PATIENCE_S)

    log = check_owned(folder, cid, ledger)
    assert (lost, after) == (log.turns[after].parent, log.head)
    assert 4 == len(log.turns)
