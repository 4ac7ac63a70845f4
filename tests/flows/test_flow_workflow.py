"""Guided flows in the conversation workflow, through the Python API on a real dev server: what it
counts (a query and search attributes), a flow carried across continue-as-new, stops, refusals, a
send that names its own place, and a history that replays."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer, Worker

from core.errors import ThreadlineError
from core.models import FlowStatus
from core.temporal import workflow_id
from store.backends.folder import FolderStore
from threadline.client import Threadline
from workflows.attributes import FLOW_KEY, FLOW_STATE_KEY
from workflows.conversation import ConversationWorkflow


async def test_the_workflow_counts_starts_ends_and_invalid_answers(
    tl: Threadline, worker: Worker, client: Client, cid: str
) -> None:
    """The `flows` query counts what the article asks to monitor; the search attributes show the latest flow."""
    chat = tl.conversation("chat", id=cid)
    await chat.start_flow("checkout")
    for text in ("A pie.", "lots", "none", "2"):
        await chat.message(text)
    await chat.start_flow("checkout")  # replaces the active one: abandoned `replaced`

    handle = client.get_workflow_handle(workflow_id("default", cid))
    status = await handle.query("flows", result_type=FlowStatus)
    attributes = (await handle.describe()).typed_search_attributes

    count = status.counts["checkout"]
    assert (2, 0, 1, {"quantity": 2}) == (count.started, count.completed, count.abandoned, count.invalid)
    assert ("active", "greeting") == (status.current.state, status.current.step)
    assert ("checkout", "active") == (attributes.get(FLOW_KEY), attributes.get(FLOW_STATE_KEY))


async def test_a_flow_goes_on_across_continue_as_new(tl: Threadline, worker: Worker, client: Client, cid: str) -> None:
    """Invalid answers until the run continues as new: the new run reads the flow back from the log and
    takes the next answer at the same step, with the counts it had."""
    chat = tl.conversation("chat", id=cid)
    await chat.start_flow("checkout")
    await chat.message("A pie.")
    handle = client.get_workflow_handle(workflow_id("default", cid))
    first = (await handle.describe()).run_id
    tries = 0
    while (await handle.describe()).run_id == first:
        assert "Please enter a valid number." == (await chat.message("lots")).response
        tries += 1
        assert tries < 60, "the run never continued as new"

    after = await chat.message("4")
    status = await handle.query("flows", result_type=FlowStatus)

    assert "What e-mail address should the confirmation go to?" == after.response
    assert {"quantity": tries} == status.counts["checkout"].invalid


async def test_a_message_that_reopens_a_conversation_answers_its_flow(
    tl: Threadline, worker: Worker, client: Client, cid: str
) -> None:
    """The workflow ended (terminated) while a flow asked: the next message begins a new one, whose first
    send's step finds the flow in the log and hands the message back; the flow, read back, takes it."""
    chat = tl.conversation("chat", id=cid)
    await chat.start_flow("checkout")
    await chat.message("A pie.")
    await client.get_workflow_handle(workflow_id("default", cid)).terminate("the workflow is lost")

    reply = await chat.message("lots")
    status = await client.get_workflow_handle(workflow_id("default", cid)).query("flows", result_type=FlowStatus)

    assert (True, "Please enter a valid number.") == (reply.in_flow, reply.response)
    assert ("active", "quantity", {"quantity": 1}) == (
        status.current.state,
        status.current.step,
        status.counts["checkout"].invalid,
    )


async def test_a_stopped_flow_lets_messages_go_to_the_program(tl: Threadline, worker: Worker, cid: str) -> None:
    """`stop_flow` abandons the flow (`stopped`); the next message is an ordinary turn."""
    chat = tl.conversation("chat", id=cid)
    await chat.start_flow("checkout")

    await chat.stop_flow()
    reply = await chat.message("Hello?")
    view = await chat.flow()

    assert (False, "abandoned") == (reply.in_flow, view.state)
    assert str(reply.response).startswith("(offline) You said: Hello?")


async def test_an_unknown_flow_is_refused_and_records_nothing(
    tl: Threadline, worker: Worker, folder: Path, cid: str
) -> None:
    """Starting a flow the worker does not have raises `flow-unknown`; the conversation's log stays empty."""
    chat = tl.conversation("chat", id=cid)

    with pytest.raises(ThreadlineError) as caught:
        await chat.start_flow("nope")

    assert "flow-unknown" == caught.value.code
    assert [] == FolderStore(folder).read(cid)


async def test_a_send_that_names_its_place_is_never_a_flows_answer(tl: Threadline, worker: Worker, cid: str) -> None:
    """`continue_from` places a turn where the caller says: the active flow does not take it."""
    chat = tl.conversation("chat", id=cid)
    first = await chat.start_flow("checkout")

    beside = await chat.continue_from(first.turn).predict("Not an answer.")
    view = await chat.flow()

    assert ("offline", first.turn) == (beside.model, beside.parent)
    assert ("active", "greeting") == (view.state, view.step)


async def test_a_flow_conversation_history_replays(tl: Threadline, worker: Worker, client: Client, cid: str) -> None:
    """Setup, an import, a flow with an invalid answer, a stop and a free turn, replayed from history."""
    chat = tl.conversation("chat", id=cid)
    await chat.setup("Be brief.", metadata={"n": 1})
    await chat.add_messages([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}])
    await chat.start_flow("checkout")
    for text in ("Soup.", "many", "2"):
        await chat.message(text)
    await chat.stop_flow()
    await chat.message("Thanks")

    runs = await closed_runs(client, workflow_id("default", cid))

    for history in runs:
        await Replayer(workflows=[ConversationWorkflow], data_converter=client.data_converter).replay_workflow(history)


async def closed_runs(client: Client, wid: str) -> list[WorkflowHistory]:
    """Every run of `wid` that continued as new, oldest first (the newest, begun by the last turn, is
    left out); the newest alone when none did."""
    newest = await client.get_workflow_handle(wid).fetch_history()
    runs: list[WorkflowHistory] = []
    run_id = newest.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
    while run_id:
        history = await client.get_workflow_handle(wid, run_id=run_id).fetch_history()
        runs.insert(0, history)
        run_id = history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
    return runs or [newest]
