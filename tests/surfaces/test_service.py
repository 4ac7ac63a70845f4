"""The HTTP service's endpoints over real HTTP on loopback: uvicorn, a real dev server and worker, the log on disk."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest_asyncio
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Worker

from activities.language_model import OfflineModel
from core.settings import Settings
from core.temporal import workflow_id
from store.backends.folder import FolderStore
from tests.support.kit import slow
from tests.support.service_kit import read_events, recorded, send, serving, texts
from threadline.client import Threadline
from threadline.http import create_app
from worker import build_worker


@pytest_asyncio.fixture(name="http")
async def _http(tl: Threadline) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an open service (no keys) for this test's task queue and store."""
    async with serving(create_app(tl)) as http:
        yield http


# ----- probes


async def test_health_and_docs_answer_without_a_key(tl: Threadline) -> None:
    """`/health`, `/docs` and the OpenAPI document are open even when keys are set."""
    async with serving(create_app(tl, keys=["k-1"])) as http:
        health = await http.get("/health")
        docs = await http.get("/docs")
        spec = (await http.get("/openapi.json")).json()

    assert (200, {"status": "healthy"}) == (health.status_code, health.json())
    assert 200 == docs.status_code
    assert "/v1/conversations/{conversation_id}/turns/{turn}/events" in spec["paths"]


async def test_ready_when_a_worker_polls_the_task_queue(http: httpx.AsyncClient, worker: Worker) -> None:
    """`/ready` answers 200 once the worker polls (its first poll may take a moment to register)."""
    for _ in range(50):
        ready = await http.get("/ready")
        if ready.status_code == 200:
            break
        await asyncio.sleep(0.1)

    assert (200, {"status": "ready"}) == (ready.status_code, ready.json())


async def test_not_ready_when_no_worker_polls(http: httpx.AsyncClient) -> None:
    """A task queue nobody polls: 503 `server-unavailable`."""
    ready = await http.get("/ready")

    assert (503, "server-unavailable") == (ready.status_code, ready.json()["error"]["code"])


# ----- conversations and turns


async def test_creating_a_conversation_records_nothing(http: httpx.AsyncClient, folder: Path) -> None:
    """Creating with `program` alone only validates: a new UUIDv7 id, no workflow, no records, so reading
    it answers 404 until its first turn."""
    created = await http.post("/v1/conversations", json={"program": "tutor", "sends": "refuse"})
    body = created.json()
    state = await http.get(f"/v1/conversations/{body['conversation']}")

    assert 201 == created.status_code
    assert 7 == uuid.UUID(body["conversation"]).version
    assert ("tutor", "refuse", False) == (body["program"], body["sends"], body["started"])
    assert workflow_id("default", body["conversation"]) == body["workflow_id"]
    assert (404, "conversation-not-found") == (state.status_code, state.json()["error"]["code"])
    assert [] == recorded(folder)


async def test_a_turn_sent_with_wait_answers_its_outcome(http: httpx.AsyncClient, worker: Worker, cid: str) -> None:
    """`wait=true` answers 200 with the outcome; the conversation, its turns and history then show it."""
    answered = await send(http, cid, message="Hi, I'm Alex.", wait=True)
    outcome = answered.json()
    state = (await http.get(f"/v1/conversations/{cid}")).json()
    turns = (await http.get(f"/v1/conversations/{cid}/turns")).json()
    one = (await http.get(f"/v1/conversations/{cid}/turns/{outcome['turn']}")).json()
    history = (await http.get(f"/v1/conversations/{cid}/history")).json()

    assert (200, "done", None, "offline") == (
        answered.status_code,
        outcome["state"],
        outcome["parent"],
        outcome["model"],
    )
    assert "You said: Hi, I'm Alex." in outcome["result"]
    assert {
        "program": "tutor",
        "head": outcome["turn"],
        "turns": 1,
        "total": 1,
        "state": "idle",
    }.items() <= state.items()
    assert [outcome["turn"]] == [t["id"] for t in turns]
    assert (outcome["result"], {"message": "Hi, I'm Alex."}) == (one["result"], one["inputs"])
    assert (1, 1, [outcome["turn"]]) == (history["turns"], history["total"], [t["id"] for t in history["recent"]])


async def test_a_context_rule_limits_what_a_turn_is_shown(http: httpx.AsyncClient, worker: Worker, cid: str) -> None:
    """A turn sent with `context` is shown only the earlier turns its rule picks."""
    one = (await send(http, cid, message="one", wait=True)).json()["turn"]
    two = (await send(http, cid, message="two", wait=True)).json()["turn"]

    three = (await send(http, cid, message="three", context={"last": 1, "without": []}, wait=True)).json()["turn"]

    saw = {t["id"]: t["saw"] for t in (await http.get(f"/v1/conversations/{cid}/turns")).json()}
    assert ([one], [two]) == (saw[two], saw[three])


async def test_a_placed_turn_streams_its_text_then_ends(http: httpx.AsyncClient, worker: Worker, cid: str) -> None:
    """Without `wait`, 202 once placed; its events carry the text and end with the finished turn."""
    placed = await send(http, cid, inputs={"message": "stream me"}, request_id="r-1")
    turn = placed.json()["turn"]

    events = await read_events(http, f"/v1/conversations/{cid}/turns/{turn}/events")

    assert 202 == placed.status_code
    assert {"turn": turn, "parent": None, "request_id": "r-1", "state": "placed"} == placed.json()
    assert f"/v1/conversations/{cid}/turns/{turn}?store=default" == placed.headers["location"]
    assert ("end", "done") == (events[-1][0], events[-1][2]["state"])
    assert events[-1][2]["result"] == texts(events)


async def test_events_resume_from_last_event_id(tl: Threadline, client: Client, settings: Settings, cid: str) -> None:
    """A reader that disconnects reconnects with Last-Event-ID and gets the rest, nothing twice."""
    async with build_worker(client, slow(settings, 1.0)), serving(create_app(tl)) as http:
        turn = (await send(http, cid, message="tell me about one half and one third")).json()["turn"]
        url = f"/v1/conversations/{cid}/turns/{turn}/events"
        first = await read_events(http, url, limit=2)
        rest = await read_events(http, url, last=first[-1][1])

    assert ["text", "text"] == [name for name, _, _ in first]
    assert int(first[0][1] or 0) < int(first[1][1] or 0)
    assert len(rest) > 2
    assert ("end", "done") == (rest[-1][0], rest[-1][2]["state"])
    assert rest[-1][2]["result"] == texts(first) + texts(rest)


async def test_continue_from_branches_and_head_moves(http: httpx.AsyncClient, worker: Worker, cid: str) -> None:
    """`continue_from` goes beside the head; a head move changes which branch `turns` lists."""
    one = (await send(http, cid, message="one", wait=True)).json()["turn"]
    two = (await send(http, cid, message="two", wait=True)).json()["turn"]
    beside = (await send(http, cid, message="beside", continue_from=one, wait=True)).json()

    every = (await http.get(f"/v1/conversations/{cid}/turns", params={"all": "true"})).json()
    moved = await http.post(f"/v1/conversations/{cid}/head", json={"turn": two})
    branch = (await http.get(f"/v1/conversations/{cid}/turns")).json()

    assert one == beside["parent"]
    assert [one, two, beside["turn"]] == [t["id"] for t in every]
    assert (200, {"head": two}) == (moved.status_code, moved.json())
    assert [one, two] == [t["id"] for t in branch]


async def test_a_running_turn_is_stopped(tl: Threadline, client: Client, settings: Settings, cid: str) -> None:
    """Stopping one turn answers 202; the turn then ends `stopped`."""
    async with build_worker(client, slow(settings, 3.0)), serving(create_app(tl)) as http:
        turn = (await send(http, cid, message="a slow one")).json()["turn"]
        stopped = await http.post(f"/v1/conversations/{cid}/turns/{turn}/stop")
        events = await read_events(http, f"/v1/conversations/{cid}/turns/{turn}/events")

    assert (202, {"turn": turn, "requested": True}) == (stopped.status_code, stopped.json())
    assert ("end", "stopped") == (events[-1][0], events[-1][2]["state"])


async def test_stopping_everything_stops_the_running_turn(
    tl: Threadline, client: Client, settings: Settings, cid: str
) -> None:
    """`POST .../stop` stops whatever runs."""
    async with build_worker(client, slow(settings, 3.0)), serving(create_app(tl)) as http:
        turn = (await send(http, cid, message="a slow one")).json()["turn"]
        stopped = await http.post(f"/v1/conversations/{cid}/stop")
        events = await read_events(http, f"/v1/conversations/{cid}/turns/{turn}/events")

    assert (202, {"turn": None, "requested": True}) == (stopped.status_code, stopped.json())
    assert "stopped" == events[-1][2]["state"]


async def test_stopping_what_does_not_exist_is_not_found(http: httpx.AsyncClient, cid: str) -> None:
    """Stopping in a conversation with nothing at all, or one of its turns: 404 `conversation-not-found`."""
    everything = await http.post(f"/v1/conversations/{cid}/stop")
    one = await http.post(f"/v1/conversations/{cid}/turns/no-such-turn/stop")

    assert (404, "conversation-not-found") == (everything.status_code, everything.json()["error"]["code"])
    assert (404, "conversation-not-found") == (one.status_code, one.json()["error"]["code"])


async def test_a_send_while_a_turn_runs_is_refused_busy(
    tl: Threadline, client: Client, settings: Settings, cid: str
) -> None:
    """With `sends=refuse`, a send while the head runs answers 409 `conversation-busy` and records no turn."""
    async with build_worker(client, slow(settings, 1.0)), serving(create_app(tl)) as http:
        first = (await send(http, cid, message="first")).json()["turn"]
        busy = await send(http, cid, message="second", sends="refuse")
        await read_events(http, f"/v1/conversations/{cid}/turns/{first}/events")
        turns = (await http.get(f"/v1/conversations/{cid}/turns", params={"all": "true"})).json()

    assert (409, "conversation-busy") == (busy.status_code, busy.json()["error"]["code"])
    assert [first] == [t["id"] for t in turns]


async def test_closing_ends_the_workflow_and_keeps_the_records(
    http: httpx.AsyncClient, worker: Worker, client: Client, cid: str
) -> None:
    """DELETE closes the open workflow (it completes, not terminated); the turns stay, and the next
    turn reopens the conversation."""
    first = (await send(http, cid, message="before", wait=True)).json()["turn"]

    closed = await http.delete(f"/v1/conversations/{cid}")
    description = await client.get_workflow_handle(workflow_id("default", cid)).describe()
    after = (await send(http, cid, message="after", wait=True)).json()

    expected = {"conversation": cid, "closed": True, "records_kept": True, "was_open": True, "forced": False}
    assert (200, expected | {"answered": 0, "schedules": 0, "status": "deleted"}) == (closed.status_code, closed.json())
    assert WorkflowExecutionStatus.COMPLETED == description.status
    assert ("done", first) == (after["state"], after["parent"])


async def test_closing_answers_queued_sends_and_stops_the_running_turn(
    tl: Threadline, client: Client, settings: Settings, cid: str
) -> None:
    """Nothing queued vanishes: a send queued behind a running turn is answered 409
    `conversation-closed`, the running turn ends `stopped`, and the conversation takes the next send."""
    hold = asyncio.Event()
    async with (
        build_worker(client, settings, providers={"offline": OfflineModel(hold=hold)}),
        serving(create_app(tl)) as http,
    ):
        running = (await send(http, cid, message="held")).json()["turn"]
        queued = asyncio.create_task(send(http, cid, message="queued behind it", wait=True))
        await asyncio.sleep(0.5)  # the second send is signalled and queued

        closed = await http.delete(f"/v1/conversations/{cid}")
        answer = await queued
        events = await read_events(http, f"/v1/conversations/{cid}/turns/{running}/events")
        hold.set()
        after = (await send(http, cid, message="after", wait=True)).json()

    assert (200, 1) == (closed.status_code, closed.json()["answered"])
    assert (409, "conversation-closed") == (answer.status_code, answer.json()["error"]["code"])
    assert "stopped" == events[-1][2]["state"]
    assert "done" == after["state"]


async def test_closing_an_unknown_conversation_is_not_found(http: httpx.AsyncClient, cid: str) -> None:
    """No records and no workflow: 404 `conversation-not-found`."""
    closed = await http.delete(f"/v1/conversations/{cid}")

    assert (404, "conversation-not-found") == (closed.status_code, closed.json()["error"]["code"])


# ----- asking a turn again


async def test_a_turn_asked_again_over_http(http: httpx.AsyncClient, tl: Threadline, worker: Worker) -> None:
    """`POST .../turns/{turn}/ask-again` answers the turn's request again and records nothing; with `record`,
    a new turn beside it; an unknown turn is 404."""
    cid = f"c-{uuid.uuid4().hex[:16]}"
    chat = tl.conversation("tutor", cid)
    first, second = await chat.predict("one"), await chat.predict("two")
    folder = tl.settings.store_folder("default")
    before = FolderStore(folder).count(cid)

    asked = await http.post(f"/v1/conversations/{cid}/turns/{second.id}/ask-again", json={})
    after = FolderStore(folder).count(cid)
    kept = await http.post(f"/v1/conversations/{cid}/turns/{second.id}/ask-again", json={"record": True})
    unknown = await http.post(f"/v1/conversations/{cid}/turns/no-such-turn/ask-again", json={})

    assert (200, second.result, None) == (asked.status_code, asked.json()["result"], asked.json()["branch"])
    assert before == after
    assert first.id == (await chat.turn(kept.json()["branch"])).parent
    assert (404, "turn-unknown") == (unknown.status_code, unknown.json()["error"]["code"])
