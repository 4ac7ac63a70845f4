"""Conversations end to end: a real dev server, a real worker, the record log on disk."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from core.errors import ThreadlineError
from core.settings import Settings
from core.temporal import workflow_id
from store.folder import FolderStore
from store.log import Log
from tests.conftest import slow
from threadline.client import Threadline
from worker import build_worker


def records(folder: Path, conversation: str) -> list[dict[str, object]]:
    return FolderStore(folder).read(conversation)


async def test_turns_see_earlier_turns(tl: Threadline, worker: Worker) -> None:
    """Each turn continues the last and is shown every earlier turn of its branch."""
    chat = tl.conversation("tutor", id="alex")

    first = await chat.predict("Hi, I'm Alex.")
    second = await chat.predict("What is 1/2 + 1/3?")
    third = await chat.predict("Is it 2/5?")

    assert [None, first.id, second.id] == [first.parent, second.parent, third.parent]
    assert [[], [first.id], [first.id, second.id]] == [first.saw, second.saw, third.saw]
    assert "I was shown 2 earlier turn(s)." in third.result
    assert ["done"] * 3 == [t.state for t in await chat.turns()]
    assert "offline" == third.model
    assert third.usage["total_tokens"] > 0


async def test_continue_from_branches_and_head_moves(tl: Threadline, worker: Worker) -> None:
    """continue_from makes a branch beside the head; a head move makes every new view continue there."""
    chat = tl.conversation("tutor", id="branches")
    one = await chat.predict("one")
    two = await chat.predict("two")

    beside = await chat.continue_from(one.id).predict("beside two")
    await chat.head(two.id)
    after_head = await tl.conversation("tutor", id="branches").predict("after the head")

    assert one.id == beside.parent
    assert [one.id] == beside.saw
    assert two.id == after_head.parent
    assert [one.id, two.id] == after_head.saw
    assert 4 == len(await chat.turns(all=True))


async def test_queue_waits_for_the_running_turn(tl: Threadline, client: Client, settings: Settings) -> None:
    """With `queue`, a second send waits for the running head and continues from it."""
    async with build_worker(client, slow(settings, 1.0)):
        chat = tl.conversation("tutor", id="queue")
        first = await chat.send("first")
        second = await tl.conversation("tutor", id="queue").send("second")
        done = [await first.result(), await second.result()]

    assert ["done", "done"] == [t.state for t in done]
    assert first.id == second.parent


async def test_refuse_answers_busy_and_records_nothing(tl: Threadline, client: Client, settings: Settings) -> None:
    """With `refuse`, a send while the head runs is refused `conversation-busy`."""
    async with build_worker(client, slow(settings, 1.0)):
        first = await tl.conversation("tutor", id="refuse").send("first")
        count = len(records(settings.store_folder("default"), "refuse"))

        with pytest.raises(ThreadlineError) as refused:
            await tl.conversation("tutor", id="refuse", sends="refuse").send("second")
        await first.result()

    assert "conversation-busy" == refused.value.code
    log = Log(records(settings.store_folder("default"), "refuse"))
    assert [first.id] == log.order
    assert count + 1 == log.n  # only the first turn's ended record came after


async def test_branch_goes_beside_the_running_turn(tl: Threadline, client: Client, settings: Settings) -> None:
    """With `branch`, a send while the head runs continues the head's nearest done ancestor, at once."""
    async with build_worker(client, slow(settings, 1.5)):
        chat = tl.conversation("tutor", id="branch", sends="branch")
        base = await chat.predict("base")
        running = await chat.send("slow")
        beside = await tl.conversation("tutor", id="branch", sends="branch").send("beside")
        results = await asyncio.gather(running.result(), beside.result())

    assert [base.id, base.id] == [running.parent, beside.parent]
    assert ["done", "done"] == [t.state for t in results]


async def test_the_same_request_id_is_one_turn_across_continue_as_new(
    tl: Threadline, client: Client, worker: Worker, folder: Path
) -> None:
    """Sends repeat a request id: one turn each, also after the workflow continued as new."""
    chat = tl.conversation("tutor", id="dedupe")
    first = await chat.predict("first", request_id="r-0")
    run_id = (await client.get_workflow_handle(workflow_id("default", "dedupe")).describe()).run_id
    for k in range(1, 12):
        await chat.predict(f"turn {k}", request_id=f"r-{k}")
    count = Log(records(folder, "dedupe")).n

    again = [await chat.predict("first", request_id="r-0"), await chat.predict("turn 11", request_id="r-11")]

    description = await client.get_workflow_handle(workflow_id("default", "dedupe")).describe()
    assert run_id != description.run_id  # it continued as new at least once
    assert [first.id, (await chat.turns())[-1].id] == [t.id for t in again]
    assert count == Log(records(folder, "dedupe")).n
    assert 12 == len(Log(records(folder, "dedupe")).order)


async def test_idle_conversation_closes_and_reopens_from_the_log(
    tl: Threadline, client: Client, worker: Worker
) -> None:
    """After its idle time the workflow completes; the next send reopens it and continues the log."""
    chat = tl.conversation("tutor", id="idle", idle_timeout_s=0.5)
    first = await chat.predict("before", request_id="before")
    handle = client.get_workflow_handle(workflow_id("default", "idle"))
    assert "idle" == await asyncio.wait_for(handle.result(), timeout=20)

    again = await chat.predict("before", request_id="before")
    second = await chat.predict("after")

    assert first.id == again.id
    assert first.id == second.parent
    assert [first.id] == second.saw


async def test_search_attributes_catch_up_after_a_burst(
    tl: Threadline, client: Client, worker: Worker, cid: str
) -> None:
    """The UI's filters see the conversation, its program and store, and (within ten seconds of a
    burst of turns) its turn count and state, never content."""
    from workflows.attributes import CONVERSATION_KEY, PROGRAM_KEY, STATE_KEY, TURNS_KEY

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
