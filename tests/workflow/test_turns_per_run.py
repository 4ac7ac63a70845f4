"""THREADLINE_TURNS_PER_RUN: the turns a conversation's workflow run serves before it continues as new."""

from __future__ import annotations

import dataclasses

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from core.errors import ErrorCode, ThreadlineError
from core.models import Begun, ConversationState
from core.settings import DEFAULT_TURNS_PER_RUN, Settings
from core.temporal import workflow_id
from threadline.client import connect


def test_the_turns_per_run_are_read_from_the_environment() -> None:
    assert 7 == Settings.from_env({"THREADLINE_TURNS_PER_RUN": "7"}).turns_per_run
    assert DEFAULT_TURNS_PER_RUN == Settings.from_env({}).turns_per_run


@pytest.mark.parametrize("raw", ["0", "-1", "many", "2.5"])
def test_turns_per_run_below_one_or_not_whole_are_refused(raw: str) -> None:
    """A run of no turns would continue as new for ever: `invalid-request`."""
    with pytest.raises(ThreadlineError) as raised:
        Settings.from_env({"THREADLINE_TURNS_PER_RUN": raw})

    assert ErrorCode.INVALID_REQUEST == raised.value.code


async def test_a_run_continues_as_new_after_the_clients_turns_per_run(
    client: Client, settings: Settings, worker: Worker, cid: str
) -> None:
    """The client that starts the conversation sets its runs' length: after 2 turns, a new run holds the third."""
    tl = await connect(dataclasses.replace(settings, turns_per_run=2), client=client)
    chat = tl.conversation("tutor", id=cid)
    handle = client.get_workflow_handle(workflow_id("default", cid))
    first = await chat.predict("one")
    first_run = (await handle.describe()).run_id
    await chat.predict("two")
    third = await chat.predict("three")

    history = await client.get_workflow_handle(workflow_id("default", cid)).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    assert first_run != (await handle.describe()).run_id
    assert started.continued_execution_run_id  # the run holding the third turn was continued
    assert [first.id, third.parent] == third.saw  # carried on: it was shown both earlier turns
    assert 3 == len(await chat.turns(all=True))


async def test_a_continued_run_carries_what_a_late_caller_needs(
    client: Client, settings: Settings, worker: Worker, cid: str
) -> None:
    """The next run carries the newest outcome (its request id, turn, parent, state, model and usage,
    for `status`), not the done ones before it: a caller that asks about a send of the run before
    hears how it ended from the record log, answer included; an id never sent is still unknown."""
    tl = await connect(dataclasses.replace(settings, turns_per_run=3), client=client)
    chat = tl.conversation("tutor", id=cid)
    sent = [await chat.predict(message, request_id=f"r-{message}") for message in ("one", "two", "three")]
    await chat.predict("four")

    history = await client.get_workflow_handle(workflow_id("default", cid)).fetch_history()
    carried = history.events[0].workflow_execution_started_event_attributes.input
    (state,) = await client.data_converter.decode(carried.payloads, [ConversationState])
    late = await chat.outcome("r-two")
    newest = {"request_id", "turn", "state", "parent", "model", "usage", "seconds"}
    assert [newest] == [o.model_fields_set for o in state.outcomes]
    assert [(sent[2].id, "done")] == [(o.turn, o.state) for o in state.outcomes]
    assert (sent[1].id, sent[0].id, "done") == (late.turn, late.parent, late.state)
    assert "two" in str((late.outputs or {}).get("result"))
    with pytest.raises(ThreadlineError) as never:
        await chat.outcome("r-never-sent")
    assert never.value.code == ErrorCode.TURN_UNKNOWN
    begun = await client.get_workflow_handle(workflow_id("default", cid)).execute_update(
        "begun", "r-one", result_type=Begun
    )
    assert (sent[0].id, None, True) == (begun.turn, begun.parent, begun.existing)


async def test_a_caller_asking_after_the_run_continued_hears_the_answer(
    client: Client, settings: Settings, worker: Worker, cid: str
) -> None:
    """The newest outcome crosses continue-as-new without its answer; a `wait` for it (as `threadline send`
    asks after its send) still hears the answer, from the log: before, it heard `result: null`."""
    tl = await connect(dataclasses.replace(settings, turns_per_run=2), client=client)
    chat = tl.conversation("tutor", id=cid)
    await chat.predict("one")
    last = await chat.predict("two", request_id="r-two")

    late = await chat.outcome("r-two")

    assert (last.id, "done") == (late.turn, late.state)
    assert "two" in str(late.result)
