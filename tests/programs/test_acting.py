"""Turns that act, end to end on a real dev server with the offline model: tool calls recorded as
functai records them, turns that wait for a person, and acting on them by hand."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.worker import Replayer

from core.errors import ErrorCode, ThreadlineError
from core.settings import Settings
from core.temporal import workflow_id
from store.backends.folder import FolderStore
from tests.support import acting_programs
from threadline.acting import Waiting
from threadline.client import Threadline, connect
from worker import build_worker
from workflows.conversation import ConversationWorkflow


@pytest_asyncio.fixture(name="shop")
async def _shop(client: Client, settings: Settings) -> AsyncIterator[Threadline]:
    """A worker that knows the shop's programs, and a client."""
    settings = dataclasses.replace(settings, programs=("tests.support.acting_programs",))
    async with build_worker(client, settings):
        yield await connect(settings, client=client)


def records(tl: Threadline, cid: str) -> list[dict[str, Any]]:
    return FolderStore(tl.settings.store_folder("default")).read(cid)


def kinds(tl: Threadline, cid: str, turn: str) -> list[tuple[str, Any]]:
    """The turn's records after its `turn` record: kind, and the tool state or attempt."""
    out = []
    for r in records(tl, cid):
        if r.get("turn") == turn and r["kind"] != "turn":
            out.append((r["kind"], r.get("state") if r["kind"] in ("tool", "ended") else r.get("attempt")))
    return out


async def test_a_turn_with_tools_records_them_as_functai_does(shop: Threadline, cid: str) -> None:
    """A reading tool gets a `done` record, a changing one `started` (with its input) then `done`; each
    model reply a `reply` record before it is used; the answer's outputs end with every call."""
    turn = await shop.conversation("shop", id=cid).predict("Where is order 7?")

    assert [
        ("lease", 1),
        ("reply", 1),
        ("tool", "done"),
        ("tool", "started"),
        ("tool", "done"),
        ("reply", 1),
        ("ended", "done"),
    ] == kinds(shop, cid, turn.id)
    tools = [r for r in records(shop, cid) if r["kind"] == "tool"]
    assert ["shop#1"] * 3 == [t["site"] for t in tools]
    assert [1, 2, 2] == [t["invocation"] for t in tools]
    assert {"amount": 0, "order": "Where is order 7?"} == tools[1]["input"]
    assert "changes" == tools[1]["effects"]
    assert ["order_status", "refund"] == [c["name"] for c in turn.outputs["calls"]]
    assert ["result", "calls"] == list(turn.outputs)
    ended = records(shop, cid)[-1]
    assert ["calls", "request", "tools"] == sorted({*ended["lmcc"]["inputs"], "calls"} - {"request"} | {"request"})
    assert ["assistant", "tool", "tool"] == [s["role"] for s in turn.steps]


async def test_a_turn_that_needs_a_person_waits_then_goes_on_when_approved(shop: Threadline, cid: str) -> None:
    """`approve="changes"`: the refund waits (`Waiting`, state `waiting`, the question listed); the reading
    tool ran; once approved, the turn goes on in a new attempt, the refund runs once, and it ends done."""
    chat = shop.conversation("careful_shop", id=cid)
    runs = len(acting_programs.RUNS)

    with pytest.raises(Waiting) as waiting:
        await chat("Refund order 7")

    turn = waiting.value.turn
    assert "waiting" == turn.state
    assert [("refund", 2, "changes")] == [(a["name"], a["invocation"], a["effects"]) for a in turn.approvals]
    assert ["order_status"] == acting_programs.RUNS[runs:]
    ended = await turn.approve(by="ann")
    assert ("done", 2) == (ended.state, ended.attempt)
    assert ["order_status", "refund"] == acting_programs.RUNS[runs:]
    approval = next(r for r in records(shop, cid) if r["kind"] == "approval")
    assert ("yes", "ann", "careful_shop#1", 2) == (
        approval["verdict"],
        approval["by"],
        approval["site"],
        approval["invocation"],
    )


async def test_a_denied_call_gets_the_denial_as_its_result(shop: Threadline, cid: str) -> None:
    """A denied refund never runs; the model is shown functai's denial and the reason."""
    chat = shop.conversation("careful_shop", id=cid)
    runs = len(acting_programs.RUNS)
    with pytest.raises(Waiting) as waiting:
        await chat("Refund order 8")

    ended = await waiting.value.turn.deny(reason="no receipt")

    assert "done" == ended.state
    assert "refund: The person did not allow this call. Reason: no receipt" in ended.result
    assert ["order_status"] == acting_programs.RUNS[runs:]


async def test_bad_answers_are_coded_and_record_nothing(shop: Threadline, cid: str) -> None:
    """Answering a turn that waits for nothing, a site or invocation it never asked, or one question twice:
    coded errors, and not one record more."""
    chat = shop.conversation("careful_shop", id=cid)
    done = await chat.predict("hello", approve=[])  # this turn asks about nothing
    with pytest.raises(Waiting) as waiting:
        await chat("Refund order 9", approve="all")  # both calls ask
    turn = waiting.value.turn
    assert [1, 2] == [a["invocation"] for a in turn.approvals]
    half = await turn.approve(1, wait=False)
    before = len(records(shop, cid))

    refused = [
        await _refused(done.approve()),
        await _refused(turn.approve(7)),
        await _refused(turn.approve(site="elsewhere#1")),
        await _refused(turn.approve(1)),
        await _refused(turn.deny(1)),
    ]

    assert [ErrorCode.TURN_STATE, ErrorCode.APPROVAL_UNKNOWN, ErrorCode.APPROVAL_UNKNOWN] == refused[:3]
    assert [ErrorCode.TURN_STATE, ErrorCode.TURN_STATE] == refused[3:]
    assert before == len(records(shop, cid))
    assert ("waiting", [2]) == (half.state, [a["invocation"] for a in half.approvals])


async def test_a_send_while_a_turn_waits_is_refused_unless_it_branches(shop: Threadline, cid: str) -> None:
    """`queue` and `refuse` are refused `conversation-busy` while the head waits; `branch` goes beside it."""
    chat = shop.conversation("careful_shop", id=cid)
    with pytest.raises(Waiting) as waiting:
        await chat("Refund order 10")

    with pytest.raises(ThreadlineError) as busy:
        await chat.send("and another", approve=[])
    beside = await shop.conversation("careful_shop", id=cid, sends="branch").send("beside", approve=[])

    assert ErrorCode.CONVERSATION_BUSY == busy.value.code
    assert waiting.value.turn.parent == beside.parent
    assert "done" == (await beside.result()).state


async def test_abandon_ends_a_waiting_turn_and_a_second_abandon_is_refused(shop: Threadline, cid: str) -> None:
    """`abandon` ends a waiting turn `abandoned`; it is then no longer waiting (`turn-state`)."""
    chat = shop.conversation("careful_shop", id=cid)
    with pytest.raises(Waiting) as waiting:
        await chat("Refund order 11")

    ended = await waiting.value.turn.abandon()
    with pytest.raises(ThreadlineError) as again:
        await ended.abandon()

    assert "abandoned" == ended.state
    assert ErrorCode.TURN_STATE == again.value.code
    assert ErrorCode.TURN_STATE == (await _refused(ended.approve()))


async def test_a_turn_nobody_answers_in_time_is_abandoned(shop: Threadline, cid: str) -> None:
    """With `approval_timeout_s`, a turn nobody answered is abandoned by the workflow's timer."""
    chat = shop.conversation("careful_shop", id=cid, approval_timeout_s=1.0)
    with pytest.raises(Waiting) as waiting:
        await chat("Refund order 12")

    for _ in range(100):
        turn = await chat.turn(waiting.value.turn.id)
        if turn.state != "waiting":
            break
        await asyncio.sleep(0.1)

    assert "abandoned" == turn.state


async def _refused(action: Any) -> str:
    try:
        await action
    except ThreadlineError as err:
        return str(err.code)
    return "accepted"


async def test_a_tool_that_fails_to_finish_is_reported_to_the_model(shop: Threadline, cid: str) -> None:
    """A tool past its own timeout fails its activity, not the turn: its result is recorded as the
    failure, the model is told, and the turn ends done."""
    turn = await shop.conversation("slow_shop", id=cid).predict("Where is order 7?")

    assert "done" == turn.state
    assert "slow_status: error: the tool failed" in turn.result
    done = [r for r in records(shop, cid) if r["kind"] == "tool"]
    assert [("done", "slow_status")] == [(r["state"], r["name"]) for r in done]


async def test_a_history_with_tool_rounds_waits_and_answers_replays(shop: Threadline, client: Client, cid: str) -> None:
    """Tool rounds, a wait, an answer, a resumed attempt and a turn that asks nothing replay deterministically."""
    chat = shop.conversation("careful_shop", id=cid)
    with pytest.raises(Waiting) as waiting:
        await chat("Refund order 13")
    await waiting.value.turn.approve()
    await chat.predict("Nothing to ask", approve=[])

    history = await client.get_workflow_handle(workflow_id("default", cid)).fetch_history()

    await Replayer(workflows=[ConversationWorkflow], data_converter=client.data_converter).replay_workflow(history)
