"""Conversations end to end: a real dev server, a real worker, the record log on disk."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.worker import Worker

from activities.language_model import OfflineModel
from core.errors import ThreadlineError
from core.models import StopSend, TurnSend
from core.settings import Settings
from core.temporal import workflow_id
from store.backends.folder import FolderStore
from store.log.state import Log
from threadline.client import Conversation, Threadline, connect
from threadline.options import SendOptions
from worker import build_worker


def records(folder: Path, conversation: str) -> list[dict[str, object]]:
    return FolderStore(folder).read(conversation)


async def test_turns_see_earlier_turns(tl: Threadline, worker: Worker, cid: str) -> None:
    """Each turn continues the last and is shown every earlier turn of its branch."""
    chat = tl.conversation("tutor", id=cid)

    first = await chat.predict("Hi, I'm Alex.")
    second = await chat.predict("What is 1/2 + 1/3?")
    third = await chat.predict("Is it 2/5?")

    assert [None, first.id, second.id] == [first.parent, second.parent, third.parent]
    assert [[], [first.id], [first.id, second.id]] == [first.saw, second.saw, third.saw]
    assert "I was shown 2 earlier turn(s)." in third.result
    assert ["done"] * 3 == [t.state for t in await chat.turns()]
    assert "offline" == third.model
    assert third.usage["total_tokens"] > 0


async def test_continue_from_branches_and_head_moves(tl: Threadline, worker: Worker, cid: str) -> None:
    """continue_from makes a branch beside the head; a head move makes every new view continue there."""
    chat = tl.conversation("tutor", id=cid)
    one = await chat.predict("one")
    two = await chat.predict("two")

    beside = await chat.continue_from(one.id).predict("beside two")
    await chat.head(two.id)
    after_head = await tl.conversation("tutor", id=cid).predict("after the head")

    assert one.id == beside.parent
    assert [one.id] == beside.saw
    assert two.id == after_head.parent
    assert [one.id, two.id] == after_head.saw
    assert 4 == len(await chat.turns(all=True))


def held(hold: asyncio.Event) -> dict[str, OfflineModel]:
    """An offline model whose replies wait after their first word until `hold` is set."""
    return {"offline": OfflineModel(hold=hold)}


async def running(chat: Conversation, turn: str) -> None:
    """Wait until `turn` reads `running` in the log."""
    for _ in range(500):
        if (await chat.turn(turn)).state == "running":
            return
        await asyncio.sleep(0.01)
    raise TimeoutError(f"turn {turn} never ran")


async def test_queue_waits_for_the_running_turn(tl: Threadline, client: Client, settings: Settings, cid: str) -> None:
    """With `queue`, a second send waits for the running head and continues from it."""
    hold = asyncio.Event()
    async with build_worker(client, settings, providers=held(hold)):
        chat = tl.conversation("tutor", id=cid)
        first = await chat.send("first")
        assert first.id is not None
        await running(chat, first.id)
        second = tl.conversation("tutor", id=cid).send("second")
        waiting = asyncio.ensure_future(second)
        await asyncio.sleep(0.3)
        placed_while_running = waiting.done()
        hold.set()
        done = [await first.result(), await (await waiting).result()]

    assert not placed_while_running
    assert ["done", "done"] == [t.state for t in done]
    assert first.id == done[1].parent


async def test_more_callers_than_updates_in_flight_all_get_their_answer(
    tl: Threadline, client: Client, settings: Settings, cid: str
) -> None:
    """Temporal lets 10 updates be in flight per workflow; 14 callers of one conversation at once each
    get their own answer (the 4 without a slot wait for one), and no send is placed twice."""
    hold = asyncio.Event()
    async with build_worker(client, settings, providers=held(hold)):
        chat = tl.conversation("tutor", id=cid)
        first = await chat.send("first")
        callers = [asyncio.ensure_future(tl.conversation("tutor", id=cid).predict(f"q{i}")) for i in range(14)]
        await asyncio.sleep(1.0)
        hold.set()
        answered = await asyncio.gather(*callers)
        await first.result()

    assert 14 == len({turn.id for turn in answered})
    assert [f"q{i}" for i in range(14)] == [turn.inputs["message"] for turn in answered]
    assert 15 == len(await chat.turns(all=True))


async def test_refuse_answers_busy_and_records_nothing(
    tl: Threadline, client: Client, settings: Settings, cid: str
) -> None:
    """With `refuse`, a send while the head runs is refused `conversation-busy`."""
    hold = asyncio.Event()
    async with build_worker(client, settings, providers=held(hold)):
        first = await tl.conversation("tutor", id=cid).send("first")
        assert first.id is not None
        await running(tl.conversation("tutor", id=cid), first.id)
        count = len(records(settings.store_folder("default"), cid))

        with pytest.raises(ThreadlineError) as refused:
            await tl.conversation("tutor", id=cid, sends="refuse").send("second")
        hold.set()
        await first.result()

    assert "conversation-busy" == refused.value.code
    log = Log(records(settings.store_folder("default"), cid))
    assert [first.id] == log.order
    assert count + 1 == log.n  # only the first turn's ended record came after


async def test_branch_goes_beside_the_running_turn(
    tl: Threadline, client: Client, settings: Settings, cid: str
) -> None:
    """With `branch`, a send while the head runs continues the head's nearest done ancestor, at once."""
    hold = asyncio.Event()
    hold.set()
    async with build_worker(client, settings, providers=held(hold)):
        chat = tl.conversation("tutor", id=cid, sends="branch")
        base = await chat.predict("base")
        hold.clear()
        slow = await chat.send("slow")
        assert slow.id is not None
        await running(chat, slow.id)
        beside = await tl.conversation("tutor", id=cid, sends="branch").send("beside")
        placed_while_running = (await chat.turn(slow.id)).state
        hold.set()
        results = await asyncio.gather(slow.result(), beside.result())

    assert "running" == placed_while_running
    assert [base.id, base.id] == [slow.parent, beside.parent]
    assert ["done", "done"] == [t.state for t in results]


async def test_the_same_request_id_is_one_turn_across_continue_as_new(
    tl: Threadline, client: Client, worker: Worker, folder: Path, cid: str
) -> None:
    """Sends repeat a request id: one turn each, also after the workflow continued as new."""
    chat = tl.conversation("tutor", id=cid)
    first = await chat.predict("first", request_id="r-0")
    run_id = (await client.get_workflow_handle(workflow_id("default", cid)).describe()).run_id
    for k in range(1, 12):
        await chat.predict(f"turn {k}", request_id=f"r-{k}")
    count = Log(records(folder, cid)).n

    again = [await chat.predict("first", request_id="r-0"), await chat.predict("turn 11", request_id="r-11")]

    description = await client.get_workflow_handle(workflow_id("default", cid)).describe()
    assert run_id != description.run_id  # it continued as new at least once
    assert [first.id, (await chat.turns())[-1].id] == [t.id for t in again]
    assert count == Log(records(folder, cid)).n
    assert 12 == len(Log(records(folder, cid)).order)


async def test_idle_conversation_closes_and_reopens_from_the_log(
    tl: Threadline, client: Client, worker: Worker, cid: str
) -> None:
    """After its idle time the workflow completes; the next send reopens it and continues the log."""
    chat = tl.conversation("tutor", id=cid, idle_timeout_s=0.5)
    first = await chat.predict("before", request_id="before")
    handle = client.get_workflow_handle(workflow_id("default", cid))
    assert "idle" == await asyncio.wait_for(handle.result(), timeout=20)

    again = await chat.predict("before", request_id="before")
    second = await chat.predict("after")

    assert first.id == again.id
    assert first.id == second.parent
    assert [first.id] == second.saw


async def test_search_attributes_catch_up_after_a_burst(
    client: Client, settings: Settings, worker: Worker, cid: str
) -> None:
    """The UI's filters see the conversation, its program and store, and (within the attribute
    interval after a burst of turns) its turn count and state, never content."""
    from workflows.attributes import CONVERSATION_KEY, PROGRAM_KEY, STATE_KEY, TURNS_KEY

    tl = await connect(dataclasses.replace(settings, attributes_every_s=0.2), client=client)
    chat = tl.conversation("tutor", id=cid)
    for text in ("one", "two", "three"):
        await chat.predict(text)
    handle = client.get_workflow_handle(workflow_id("default", cid))

    for _ in range(150):
        attributes = (await handle.describe()).typed_search_attributes
        if attributes.get(TURNS_KEY) == 3:
            break
        await asyncio.sleep(0.1)

    assert (cid, "tutor", "idle", 3) == tuple(
        attributes.get(key) for key in (CONVERSATION_KEY, PROGRAM_KEY, STATE_KEY, TURNS_KEY)
    )


async def test_a_stop_drops_only_the_sends_queued_before_it(
    tl: Threadline, client: Client, settings: Settings, cid: str
) -> None:
    """A send, a stop, a send, all signalled before any worker runs (one workflow task sees them all):
    the stop drops the first send only; the one signalled after it is answered."""
    chat = tl.conversation("tutor", id=cid)
    await chat.signal(TurnSend(request_id="early", inputs={"message": "before the stop"}, program="tutor"))
    await chat.signal(StopSend())
    await chat.signal(TurnSend(request_id="late", inputs={"message": "after the stop"}, program="tutor"))

    async with build_worker(client, settings):
        early, late = await chat.outcome("early"), await chat.outcome("late")

    assert ("stopped", "done") == (early.state, late.state)


@pytest.mark.parametrize("method", ["send", "predict"])
async def test_a_send_with_no_worker_answers_unavailable_and_is_kept(
    tl: Threadline, client: Client, settings: Settings, cid: str, method: str
) -> None:
    """No worker polls: the caller hears `server-unavailable` within seconds instead of hanging, and the
    send, already durable, runs once a worker starts (the same request id gets its answer, one turn)."""
    chat = tl.conversation("tutor", id=cid)
    started = asyncio.get_running_loop().time()

    with pytest.raises(ThreadlineError) as refused:
        await getattr(chat, method)("while nobody works", request_id="kept")
    waited = asyncio.get_running_loop().time() - started

    assert ("server-unavailable", True) == (refused.value.code, refused.value.retryable)
    assert waited < 10
    async with build_worker(client, settings):
        outcome = await chat.outcome("kept")
        again = await chat.predict("while nobody works", request_id="kept")
    assert ("done", outcome.turn) == (outcome.state, again.id)
    assert 1 == len(await chat.turns())


async def test_deliver_answers_the_outcome_in_one_call_and_a_request_id_once(
    tl: Threadline, worker: Worker, cid: str
) -> None:
    """`deliver` returns the outcome (state, outputs, result) as the workflow tells it; asked again with
    its request id it answers the same turn, and no second turn is made."""
    chat = tl.conversation("tutor", id=cid)

    first = await chat.deliver("hello", request_id="once")
    again = await chat.deliver("hello", request_id="once")

    assert ("done", first.outputs["result"]) == (first.state, first.result)  # type: ignore[index]
    assert first.turn == again.turn is not None
    assert [first.turn] == [t.id for t in await chat.turns(all=True)]


@pytest.mark.parametrize("update", ["send", "place"])
async def test_the_sending_updates_queue_a_request_id_once(
    tl: Threadline, client: Client, worker: Worker, cid: str, update: str
) -> None:
    """`send` and `place` (signal and wait in one update) place a request id once however often they are
    asked, and refuse an id over 200 characters with `invalid-request`, queueing nothing."""
    chat = tl.conversation("tutor", id=cid)
    await chat.predict("hello")
    handle = client.get_workflow_handle(workflow_id("default", cid))
    send = chat.sent({"message": "twice"}, SendOptions(request_id="once"))

    first, second = await asyncio.gather(*(handle.execute_update(update, send, result_type=dict) for _ in "ab"))
    with pytest.raises(WorkflowUpdateFailedError) as too_long:
        await handle.execute_update(update, send.model_copy(update={"request_id": "x" * 201}))

    assert first["turn"] == second["turn"] is not None
    assert "invalid-request" == getattr(too_long.value.cause, "type", None)
    assert 2 == len(await chat.turns())


@pytest.mark.parametrize("update", ["wait", "begun"])
async def test_asking_about_a_send_nobody_made_is_turn_unknown(
    tl: Threadline, client: Client, worker: Worker, cid: str, update: str
) -> None:
    """`wait` and `begun` refuse a request id the conversation never saw (and one over 200 characters)."""
    chat = tl.conversation("tutor", id=cid)
    await chat.predict("hello")
    handle = client.get_workflow_handle(workflow_id("default", cid))

    with pytest.raises(WorkflowUpdateFailedError) as unknown:
        await handle.execute_update(update, "never-sent")
    with pytest.raises(WorkflowUpdateFailedError) as too_long:
        await handle.execute_update(update, "x" * 201)

    assert "turn-unknown" == getattr(unknown.value.cause, "type", None)
    assert "invalid-request" == getattr(too_long.value.cause, "type", None)
