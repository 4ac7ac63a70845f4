"""A history an operator reads without expanding JSON: each turn's events say what was sent and how it
ended, no timer is started and cancelled around every turn, and turns in a row do not each write the
search attributes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from core.models import TurnSend
from core.settings import Settings
from core.temporal import workflow_id
from threadline.client import connect
from worker import build_worker
from workflows._details import first_words, said
from workflows._patches import OPENS
from workflows.attributes import STATE_KEY, TURNS_KEY

MESSAGES = (
    "Where do the tides of the North Sea come from?",
    "And why are there two high tides a day, not one?",
    "Which coast has the highest tides in the world?",
    "Thank you, that is all for today.",
)
STEADY_EVENTS_PER_TURN = 11
"""A turn in a row: two workflow tasks (6), the update accepted and completed (2), and the one activity
that places the send and asks the model scheduled, started and completed (3)."""


async def events_of(client: Client, cid: str) -> list[HistoryEvent]:
    return list((await client.get_workflow_handle(workflow_id("default", cid)).fetch_history()).events)


def summary(event: HistoryEvent) -> str:
    return str(json.loads(event.user_metadata.summary.data)) if event.HasField("user_metadata") else ""


def outcome_json(event: HistoryEvent) -> str:
    return event.workflow_execution_update_completed_event_attributes.outcome.success.payloads[0].data.decode()


async def test_each_turn_says_what_was_sent_and_how_it_ended(client: Client, settings: Settings, cid: str) -> None:
    """The model call's summary quotes the message's first words, and each send's outcome starts with
    its state and its answer, which it carries once."""
    async with build_worker(client, settings):
        chat = (await connect(settings, client=client)).conversation("tutor", id=cid)
        answers = [(await chat.predict(message)).result for message in MESSAGES[:3]]
        events = await events_of(client, cid)

    calls = [summary(e) for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    completed = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED
    outcomes = [outcome_json(e) for e in events if e.event_type == completed]
    assert [f"turn {k + 1}: «{first_words(m)}»" for k, m in enumerate(MESSAGES[:3])] == calls
    assert all(o.startswith('{"outputs":{"result":"(offline) You said: ') for o in outcomes)
    assert all('"state":"done"' in o for o in outcomes)
    assert [1, 1, 1] == [o.count(json.dumps(a)[1:-1]) for o, a in zip(outcomes, answers, strict=True)]


async def test_turns_in_a_row_write_the_attributes_once_per_interval(
    client: Client, settings: Settings, cid: str
) -> None:
    """Turns in a row within the attribute interval: the first turn writes the attributes as it ends,
    the later ones leave them to one timer at the interval's end (no write, no timer of their own), and
    the listing then shows the last turn."""
    mine = dataclasses.replace(settings, attributes_every_s=2.0)
    async with build_worker(client, mine):
        chat = (await connect(mine, client=client)).conversation("tutor", id=cid)
        for message in MESSAGES[:2]:
            await chat.predict(message)
        after_second = len(await events_of(client, cid))
        for message in MESSAGES[2:]:
            await chat.predict(message)
        events = await events_of(client, cid)
        attributes = await listed(client, cid, turns=len(MESSAGES), patience_s=6.0)

    timers = [summary(e) for e in events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]
    assert ["idle close", "attributes"] == timers
    assert 1 == len(written(events))
    assert ("idle", len(MESSAGES)) == attributes
    assert STEADY_EVENTS_PER_TURN * (len(MESSAGES) - 2) == len(events) - after_second


async def test_each_turn_writes_the_attributes_as_it_ends_by_default(
    client: Client, settings: Settings, cid: str
) -> None:
    """With no attribute interval (the default), each turn writes the attributes as it ends, so the
    listing is current at once, and no timer waits to write them (nor fires, a workflow task of its own)."""
    assert 0.0 == Settings.from_env({}).attributes_every_s == settings.attributes_every_s
    async with build_worker(client, settings):
        chat = (await connect(settings, client=client)).conversation("tutor", id=cid)
        for message in MESSAGES:
            await chat.predict(message)
            assert ("idle", MESSAGES.index(message) + 1) == await listed(client, cid, turns=MESSAGES.index(message) + 1)
        events = await events_of(client, cid)

    timers = [summary(e) for e in events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]
    assert ["idle close"] == timers
    assert len(MESSAGES) == len(written(events))


async def test_each_run_holds_one_patch_marker(client: Client, settings: Settings, cid: str) -> None:
    """A run asks its patches through one (`workflows._patches`): the first run and the run it continued
    as each hold one patch marker, not one for each patch they took (attributes, flows, lost turns)."""
    mine = dataclasses.replace(settings, turns_per_run=2)
    async with build_worker(client, mine):
        chat = (await connect(mine, client=client)).conversation("tutor", id=cid)
        for message in MESSAGES[:3]:
            await chat.predict(message)
        handle = client.get_workflow_handle(workflow_id("default", cid))
        newest = await handle.fetch_history()
        first_run = newest.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
        first = await client.get_workflow_handle(workflow_id("default", cid), run_id=first_run).fetch_history()

    assert [[OPENS], [OPENS]] == [patches(list(h.events)) for h in (first, newest)]


async def test_a_turn_writes_only_the_attributes_that_changed(client: Client, settings: Settings, cid: str) -> None:
    """Turns each writing the attributes as it ends: the first write shows the state, every later one
    only the turn count and the time (the state is `idle` still), and the listing shows both."""
    mine = dataclasses.replace(settings, attributes_every_s=0.0)
    async with build_worker(client, mine):
        chat = (await connect(mine, client=client)).conversation("tutor", id=cid)
        for message in MESSAGES:
            await chat.predict(message)
        events = await events_of(client, cid)
        attributes = await listed(client, cid, turns=len(MESSAGES))

    later = ["ThreadlineTurns", "ThreadlineUpdated"]
    assert [["ThreadlineState", *later]] + [later] * (len(MESSAGES) - 1) == written(events)
    assert ("idle", len(MESSAGES)) == attributes


async def test_a_run_hands_its_attributes_to_the_next_in_its_continue_as_new(
    client: Client, settings: Settings, cid: str
) -> None:
    """Runs of two turns, turns in a row within the attribute interval: a run that began with the
    attributes of the run before writes none (its continue-as-new carries them on), and the run after
    begins with every turn counted."""
    mine = dataclasses.replace(settings, turns_per_run=2, attributes_every_s=10.0)
    async with build_worker(client, mine):
        chat = (await connect(mine, client=client)).conversation("tutor", id=cid)
        for message in MESSAGES:
            await chat.predict(message)
        await listed(client, cid, turns=len(MESSAGES))
        newest = await client.get_workflow_handle(workflow_id("default", cid)).fetch_history()
        before = newest.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
        second = await client.get_workflow_handle(workflow_id("default", cid), run_id=before).fetch_history()

    begun = newest.events[0].workflow_execution_started_event_attributes.search_attributes.indexed_fields
    assert 2 == sum(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED for e in second.events)
    assert [] == written(list(second.events))
    assert b"4" == begun["ThreadlineTurns"].data


def written(events: list[HistoryEvent]) -> list[list[str]]:
    """The Threadline attributes each write of `events` set (a patch's own write left out)."""
    upserts = [e.upsert_workflow_search_attributes_event_attributes.search_attributes for e in events]
    return [sorted(a.indexed_fields) for a in upserts if "ThreadlineTurns" in a.indexed_fields]


def patches(events: list[HistoryEvent]) -> list[str]:
    """The patch ids of a run's patch markers, in order."""
    markers = [e.marker_recorded_event_attributes for e in events if e.HasField("marker_recorded_event_attributes")]
    found = [m.details["patch-data"].payloads[0].data for m in markers if m.marker_name == "core_patch"]
    return [json.loads(data)["id"] for data in found]


async def listed(client: Client, cid: str, *, turns: int, patience_s: float = 3.0) -> tuple[Any, Any]:
    """The state and turn count the search attributes show, once they show `turns` (or after `patience_s`)."""
    handle = client.get_workflow_handle(workflow_id("default", cid))
    for _ in range(int(patience_s * 10)):
        found = (await handle.describe()).typed_search_attributes
        if found.get(TURNS_KEY) == turns:
            break
        await asyncio.sleep(0.1)
    return found.get(STATE_KEY), found.get(TURNS_KEY)


class TestFirstWords:
    def test_a_short_text_is_shown_whole_on_one_line(self) -> None:
        """Whitespace collapses; nothing is cut."""
        assert "Hi, I am Sam." == first_words("Hi,\n  I am Sam.")

    def test_a_long_text_is_cut_at_a_word(self) -> None:
        """The cut ends at a word's end, without trailing punctuation, with an ellipsis."""
        assert "Where do the tides of the North Sea come…" == first_words(MESSAGES[0] + " And more.", 44)

    def test_a_send_without_a_message_shows_its_first_text_or_its_input_names(self) -> None:
        """A program's other inputs stand in for the message."""
        assert "«refund»" == said(TurnSend(request_id="r", inputs={"n": 3, "reason": "refund"}))
        assert "(n)" == said(TurnSend(request_id="r", inputs={"n": 3}))
