"""Scheduled turns on a real dev server: each firing is one turn of its conversation, a firing run again
is the same turn, a paused schedule fires nothing, and a schedule ends with its closed conversation.

Temporal's time-skipping test server has no Schedules, so these run on the session's dev server with
intervals of a second, or fire a schedule at once with the SDK's `trigger`."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.client import Client, Schedule, ScheduleActionStartWorkflow, ScheduleSpec
from temporalio.worker import Worker
from temporalio.workflow import _Definition

from core.errors import ErrorCode, ThreadlineError
from core.models import MAX_REQUEST_ID
from core.schedules import Firing, ScheduledSend, firing_request_id
from core.settings import Settings
from core.temporal import workflow_id
from tests.support.kit import slow
from threadline import contract
from threadline.client import Conversation, Threadline
from threadline.reading import Turn
from worker import build_worker
from workflows.scheduled import ScheduledTurnWorkflow

FAR_CRON = "0 0 1 1 *"
"""Once a year at New Year: a schedule the tests fire with `trigger` alone."""


async def eventually(check: Callable[[], Awaitable[bool]], *, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, "not within the time given"
        await asyncio.sleep(0.1)


async def turns_of(chat: Conversation) -> list[Turn]:
    return list(await chat.turns(all=True))


async def count_is(chat: Conversation, n: int) -> bool:
    return len(await turns_of(chat)) >= n


async def firing_of(client: Client, chat: Conversation, name: str) -> ScheduledSend:
    """The input the schedule starts each firing with (what a firing run again by hand is given)."""
    described = await client.get_schedule_handle(f"{workflow_id('default', chat.id)}/schedule/{name}").describe()
    action = described.schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    [firing] = await client.data_converter.decode(action.args, [ScheduledSend])
    assert isinstance(firing, ScheduledSend)
    return firing


async def test_a_schedule_firing_three_times_makes_three_turns(worker: Worker, tl: Threadline, cid: str) -> None:
    """Each firing is one turn, with a request id of its own, answered as any turn."""
    chat = tl.conversation("tutor", id=cid)
    await chat.schedule("Good morning", every=1, id="tick")

    await eventually(lambda: count_is(chat, 3))
    paused = await chat.pause_schedule("tick")
    await eventually(lambda: count_is(chat, paused.fired))
    turns = await turns_of(chat)

    assert paused.fired == len(turns) >= 3
    assert len({t.request_id for t in turns}) == len(turns)
    assert all((t.request_id or "").startswith("schedule/tick/") for t in turns)
    assert {"done"} == {t.state for t in turns}
    assert all(t.inputs == {"message": "Good morning"} for t in turns)


async def test_a_firing_run_again_is_one_turn(
    worker: Worker, tl: Threadline, client: Client, settings: Settings, cid: str
) -> None:
    """The same schedule and scheduled time make the same request id: the conversation records one turn."""
    chat = tl.conversation("tutor", id=cid)
    await chat.schedule("Once", cron=FAR_CRON, id="once")
    await client.get_schedule_handle(f"{workflow_id('default', cid)}/schedule/once").trigger()
    await eventually(lambda: count_is(chat, 1))
    [first] = await turns_of(chat)
    at = (await chat.get_schedule("once")).recent[0]
    firing = (await firing_of(client, chat, "once")).model_copy(update={"at": at})

    again = await client.execute_workflow(
        "ScheduledTurn", firing, id=f"again-{uuid.uuid4()}", task_queue=settings.task_queue, result_type=Firing
    )
    await asyncio.sleep(1.0)  # time for a second turn, were there one

    assert again.delivered
    assert first.request_id == again.request_id == firing_request_id("once", at)
    assert [first.id] == [t.id for t in await turns_of(chat)]


async def test_a_paused_schedule_fires_nothing(worker: Worker, tl: Threadline, cid: str) -> None:
    """Made paused with a one-second interval: nothing for three seconds; resumed, it fires."""
    chat = tl.conversation("tutor", id=cid)
    made = await chat.schedule("Tick", every=1, id="held", paused=True)
    await asyncio.sleep(3.0)
    held = await chat.get_schedule("held")

    assert made.paused
    assert held.paused
    assert 0 == held.fired
    assert [] == await turns_of(chat)
    assert () == held.next

    resumed = await chat.resume_schedule("held", note="back")
    await eventually(lambda: count_is(chat, 1))
    await chat.delete_schedule("held")

    assert not resumed.paused
    assert "back" == resumed.note


async def test_schedules_are_listed_described_and_deleted(worker: Worker, tl: Threadline, cid: str) -> None:
    """`schedules()` lists a conversation's own; a deleted one is `schedule-unknown`."""
    chat = tl.conversation("tutor", id=cid)
    other = tl.conversation("tutor", id=f"{cid}-other")
    start = datetime.now(UTC) + timedelta(days=1)
    daily = await chat.schedule(
        {"message": "Summarise"}, cron="0 9 * * *", timezone="Europe/Paris", start=start, id="daily"
    )
    await chat.schedule("Tick", every="PT1H", id="hourly")
    await other.schedule("Elsewhere", every=3600, id="daily")

    async def both_listed() -> bool:
        return ["daily", "hourly"] == [s.id for s in await chat.schedules()]

    await eventually(both_listed)
    await chat.delete_schedule("daily")
    with pytest.raises(ThreadlineError) as unknown:
        await chat.get_schedule("daily")
    with pytest.raises(ThreadlineError) as again:
        await chat.delete_schedule("daily")
    left = await chat.get_schedule("hourly")
    await chat.delete_schedule("hourly")
    await other.delete_schedule("daily")

    assert ("0 9 * * *", "Europe/Paris", None) == (daily.cron, daily.timezone, daily.every)
    assert {"message": "Summarise"} == daily.inputs
    assert daily.start == start
    assert daily.next
    assert daily.next[0] >= start
    assert daily.next[0].astimezone(UTC).hour in (7, 8)  # 9:00 in Paris
    assert 3600.0 == left.every
    assert ErrorCode.SCHEDULE_UNKNOWN == unknown.value.code == again.value.code


@pytest.mark.parametrize(
    "given",
    [
        {"cron": "0 9 * * *", "every": 60},
        {},
        {"every": 0.5},
        {"every": float("nan")},
        {"every": float("inf")},
        {"every": 1e300},
        {"every": "soon"},
        {"cron": "0 9 * * *", "timezone": "Mars/Olympus"},
        {"cron": "not a cron"},
        {"every": 60, "start": datetime(2030, 1, 2, tzinfo=UTC), "end": datetime(2030, 1, 1, tzinfo=UTC)},
        {"every": 60, "id": "../x"},
    ],
)
async def test_a_schedule_that_cannot_fire_is_refused(tl: Threadline, cid: str, given: dict[str, object]) -> None:
    """Neither or both timings, a short or unreadable interval, an unknown zone or cron, end before
    start, a name that is a path: `schedule-invalid`, and nothing is made."""
    chat = tl.conversation("tutor", id=cid)

    with pytest.raises(ThreadlineError) as refused:
        await chat.schedule("x", **given)  # type: ignore[arg-type]

    assert ErrorCode.SCHEDULE_INVALID == refused.value.code
    assert [] == await chat.schedules()


async def test_a_second_schedule_of_the_same_name_is_refused(tl: Threadline, cid: str) -> None:
    chat = tl.conversation("tutor", id=cid)
    await chat.schedule("x", cron=FAR_CRON, id="same")

    with pytest.raises(ThreadlineError) as refused:
        await chat.schedule("y", every=60, id="same")
    await chat.delete_schedule("same")

    assert ErrorCode.SCHEDULE_EXISTS == refused.value.code


async def test_closing_a_conversation_deletes_its_schedules(worker: Worker, tl: Threadline, cid: str) -> None:
    chat = tl.conversation("tutor", id=cid)
    await chat("Hello")
    await chat.schedule("Tick", cron=FAR_CRON, id="a")
    await chat.schedule("Tock", every=3600, id="b")
    await eventually(lambda: _listed(chat, 2))

    closing = await chat.close()

    assert 2 == closing.schedules
    for name in ("a", "b"):
        with pytest.raises(ThreadlineError) as gone:
            await chat.get_schedule(name)
        assert ErrorCode.SCHEDULE_UNKNOWN == gone.value.code


async def test_a_firing_after_another_client_closed_the_conversation_ends_its_schedule(
    worker: Worker, tl: Threadline, client: Client, cid: str
) -> None:
    """Closed with the `close` update alone (as any client may): the next firing sends nothing and deletes it."""
    chat = tl.conversation("tutor", id=cid)
    await chat("Hello")
    await chat.schedule("Tick", cron=FAR_CRON, id="left")
    await chat.handle.execute_update("close", result_type=int)
    await client.get_schedule_handle(f"{workflow_id('default', cid)}/schedule/left").trigger()

    async def gone() -> bool:
        try:
            await chat.get_schedule("left")
        except ThreadlineError as err:
            return err.code == ErrorCode.SCHEDULE_UNKNOWN
        return False

    await eventually(gone)

    assert 1 == len(await turns_of(chat))


async def test_a_schedule_made_after_a_close_or_an_idle_close_fires(
    worker: Worker, tl: Threadline, client: Client, cid: str
) -> None:
    """A conversation closed before its schedule was made is not ended by it: the firing reopens it."""
    chat = tl.conversation("tutor", id=cid)
    await chat("Hello")
    await chat.close()
    await chat.schedule("Again", cron=FAR_CRON, id="later")
    await client.get_schedule_handle(f"{workflow_id('default', cid)}/schedule/later").trigger()

    await eventually(lambda: count_is(chat, 2))
    info = await chat.get_schedule("later")
    await chat.delete_schedule("later")

    assert 1 == info.fired


async def _listed(chat: Conversation, n: int) -> bool:
    return len(await chat.schedules()) == n


def test_a_firing_request_id_fits_whatever_the_name() -> None:
    at = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)

    short, long = firing_request_id("daily", at), firing_request_id("d" * 200, at)

    assert "schedule/daily/2026-12-02T09:00:00Z" == short
    assert len(long) <= MAX_REQUEST_ID
    assert long != firing_request_id("e" * 200, at)


def test_the_contract_names_the_firing_workflow_with_its_types() -> None:
    """docs/schemas' `scheduled_turn` is the `ScheduledTurn` workflow as it is: its type, input and result."""
    defn = _Definition.must_from_class(ScheduledTurnWorkflow)

    assert contract.SCHEDULED["workflow_type"] == defn.name
    assert [ScheduledSend] == defn.arg_types
    assert Firing is defn.ret_type
    assert {ScheduledSend: False, Firing: True}.items() <= contract.payload_models().items()


async def test_overlapping_firings_follow_the_conversations_sends_rule(
    client: Client, settings: Settings, tl: Threadline, cid: str
) -> None:
    """Firings every second, turns of 2.5 s, `sends="refuse"`: a firing that meets a running turn is
    refused `conversation-busy` (recorded nowhere), as any send would be."""
    async with build_worker(client, slow(settings, 2.5)):
        chat = tl.conversation("tutor", id=cid, sends="refuse")
        await chat.schedule("Tick", every=1, id="busy")
        await asyncio.sleep(4.5)
        held = await chat.pause_schedule("busy")
        await eventually(lambda: _settled(chat))
        turns = await turns_of(chat)
        codes = []
        for at in held.recent:
            try:
                await chat.outcome(firing_request_id("busy", at))
            except ThreadlineError as err:
                codes.append(err.code)
        await chat.delete_schedule("busy")

    assert held.fired > len(turns) >= 1
    assert {ErrorCode.CONVERSATION_BUSY} == set(codes)
    assert len(codes) == held.fired - len(turns)


async def _settled(chat: Conversation) -> bool:
    return all(t.state != "running" for t in await turns_of(chat))


async def test_a_foreign_schedule_under_the_conversations_id_is_no_schedule_of_it(
    tl: Threadline, client: Client, settings: Settings, cid: str
) -> None:
    """A schedule another client made under the conversation's schedule ids, starting something else,
    is `schedule-unknown` to it (not an internal error)."""
    chat = tl.conversation("tutor", id=cid)
    foreign = f"{workflow_id('default', cid)}/schedule/foreign"
    action = ScheduleActionStartWorkflow("Other", "x", id=f"other-{cid}", task_queue=settings.task_queue)
    spec = ScheduleSpec(cron_expressions=[FAR_CRON])
    await client.create_schedule(foreign, Schedule(action=action, spec=spec))

    await eventually(lambda: _listed_by_temporal(client, foreign))

    with pytest.raises(ThreadlineError) as refused:
        await chat.get_schedule("foreign")
    listed = await chat.schedules()
    await client.get_schedule_handle(foreign).delete()

    assert ErrorCode.SCHEDULE_UNKNOWN == refused.value.code
    assert [] == listed


async def _listed_by_temporal(client: Client, schedule: str) -> bool:
    return schedule in [entry.id async for entry in await client.list_schedules()]
