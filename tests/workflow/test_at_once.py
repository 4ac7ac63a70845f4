"""A send that meets nothing running is placed and run in one activity (`place_and_run`): no local
activity and no second workflow task before its model is asked. What needs its turn before that
activity answers (the next send, a `begun` caller, a stop) pins it first, in the log."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from core.models import Begun, StopSend, TurnOutcome, TurnSend
from core.settings import Settings
from store.backends.folder import FolderStore
from store.log.state import Log
from store.records import uuid7
from threadline.client import Threadline
from worker import build_worker

SLOW_S = 1.5
"""How long the offline model takes to answer in the tests that act while it does."""


def _scheduled(events: list[HistoryEvent]) -> list[str]:
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def test_a_sequential_turn_is_one_activity_scheduled_by_the_task_that_took_its_send(
    tl: Threadline, client: Client, settings: Settings, cid: str
) -> None:
    """The second turn of a conversation: no marker (no local activity), one activity (`place_and_run`),
    scheduled by the first workflow task after the send's update; the log holds the turn once, done."""
    chat = tl.conversation("tutor", id=cid)
    async with build_worker(client, settings):
        first = await chat.deliver("The first turn starts the conversation.")
        second = await chat.deliver("How far away is the moon?")
    assert ("done", "done") == (first.state, second.state)

    events = list((await chat.handle.fetch_history()).events)
    answered = [
        i for i, e in enumerate(events) if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED
    ]
    turn = events[answered[0] + 1 : answered[1] + 1]  # the second turn's events
    assert [] == [e for e in turn if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
    assert ["place_and_run"] == _scheduled(turn)
    kinds = [e.event_type for e in turn]
    scheduled = kinds.index(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    assert 1 == kinds[:scheduled].count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    log = Log(FolderStore(settings.store_folder("default")).read(cid))
    assert [first.turn, second.turn] == log.order
    assert ["done", "done"] == [t.state(time.time()) for t in log.turns.values()]


async def test_sends_while_a_turn_runs_at_once_queue_behind_it_and_learn_its_turn(
    tl: Threadline, client: Client, settings: Settings, cid: str
) -> None:
    """While the first send's one activity runs: `begun` answers its turn (in the log already), and a
    second send waits behind it (`queue`), placed after it; each turn is recorded and answered once."""
    slow = dataclasses.replace(settings, offline_delay_s=SLOW_S)
    chat = tl.conversation("tutor", id=cid)
    first, second = uuid7(), uuid7()
    async with build_worker(client, slow):
        await chat.deliver("The first turn starts the conversation.")
        await chat.delivery.signal(TurnSend(request_id=first, inputs={"message": "A slow question."}))
        await asyncio.sleep(0.3)  # its activity runs
        begun = await chat.handle.execute_update("begun", first, result_type=Begun)
        log = Log(FolderStore(settings.store_folder("default")).read(cid))
        assert begun.turn == log.request_ids[first]
        assert log.turns[begun.turn].ended is None  # known before its answer
        answered = await chat.deliver("And another one.", request_id=second)
        outcome = await chat.handle.execute_update("wait", first, result_type=TurnOutcome)
    assert "done" == answered.state
    assert "done" == outcome.state
    log = Log(FolderStore(settings.store_folder("default")).read(cid))
    assert begun.turn == log.turns[log.request_ids[second]].parent
    assert 3 == len(log.order)
    assert ["done"] * 3 == [t.state(time.time()) for t in log.turns.values()]


async def test_a_stop_while_a_turn_runs_at_once_stops_it_within_a_second(
    tl: Threadline, client: Client, settings: Settings, cid: str
) -> None:
    """A stop of every turn, signalled while the first send's one activity runs: its turn ends `stopped`
    well before its model would have answered."""
    slow = dataclasses.replace(settings, offline_delay_s=30.0)
    chat = tl.conversation("tutor", id=cid)
    rid = uuid7()
    async with build_worker(client, slow):
        await chat.delivery.signal(TurnSend(request_id=rid, inputs={"message": "A very slow question."}))
        await asyncio.sleep(0.5)  # its activity runs
        stopped_at = time.monotonic()
        await chat.delivery.signal(StopSend())
        outcome = await chat.handle.execute_update("wait", rid, result_type=TurnOutcome)
        took = time.monotonic() - stopped_at
    assert "stopped" == outcome.state
    assert took < 5.0, took
    log = Log(FolderStore(settings.store_folder("default")).read(cid))
    assert ["stopped"] == [t.state(time.time()) for t in log.turns.values()]
