"""A store that answers slowly, not a dead worker: another session holds PostgreSQL's records table
locked for longer than the turn's heartbeat timeout, so every store call of the turn's activity waits.

The fault: the activity heartbeated only between its store reads, so an attempt whose worker was
alive and merely waiting went silent past the 3 s timeout; Temporal gave up on it and ran the turn
again (the scale benchmark's "activity runs again" under load). Now a try beats for as long as it
lives, whatever its store calls wait for: one attempt, one model call, one `ended` record.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from structlog.testing import capture_logs
from temporalio.client import Client, WorkflowHandle

from core.settings import Settings
from store.backends.locate import postgres_url
from store.backends.opening import StoreSet
from tests.support.kit import slow
from threadline.client import Conversation, Threadline
from worker import build_worker
from workflows._calls import MODEL_HEARTBEAT_TIMEOUT

LOCKED_S = MODEL_HEARTBEAT_TIMEOUT.total_seconds() + 3.0
"""How long the records table stays locked: well past the heartbeat timeout."""


@asynccontextmanager
async def pg_worker(client: Client, settings: Settings) -> AsyncIterator[None]:
    stores = StoreSet(settings.named_stores())
    try:
        async with build_worker(client, settings, stores=stores):
            yield
    finally:
        await stores.close()


@asynccontextmanager
async def records_locked(pg_spec: str) -> AsyncIterator[None]:
    """Another session holding the store's records table in an open transaction: every read and append waits."""
    url, schema = postgres_url(pg_spec)
    async with await psycopg.AsyncConnection.connect(url) as conn, conn.transaction():
        await conn.execute(sql.SQL("LOCK TABLE {}.records IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(schema)))
        yield


async def runs_again(handle: WorkflowHandle[Any, Any]) -> int:
    """Activity attempts after the first in the workflow's history (as bench/_scale_load.py counts them)."""
    history = await handle.fetch_history()
    started = [
        e.activity_task_started_event_attributes
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    ]
    return sum(attributes.attempt - 1 for attributes in started)


def asked(logs: list[MutableMapping[str, Any]]) -> Counter[str]:
    """How often the model was asked, by turn."""
    return Counter(str(e["turn"]) for e in logs if e.get("event") == "model.requested")


async def until_running(chat: Conversation, turn: str) -> None:
    for _ in range(200):
        if (await chat.turn(turn)).state == "running":
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"turn {turn} never ran")


@pytest.fixture(name="pg_settings")
def _pg_settings(settings: Settings, pg_spec: str, tmp_path: Path) -> Settings:
    return dataclasses.replace(settings, data=tmp_path / "no-folder", stores={"default": pg_spec})


@pytest.mark.timeout(90)
async def test_a_turn_placed_while_the_store_waits_runs_once(
    client: Client, pg_settings: Settings, pg_spec: str, cid: str
) -> None:
    """The records table is locked as the send is placed (and its turn run in the same activity):
    the activity waits on the store past the heartbeat timeout, and is not run again."""
    tl = Threadline(client, pg_settings)
    try:
        async with pg_worker(client, pg_settings):
            chat = tl.conversation("tutor", id=cid)
            await chat.predict("Hi, I'm Alex.")  # the workflow and its log are open and warm
            with capture_logs() as logs:
                async with records_locked(pg_spec):
                    second = asyncio.create_task(chat.predict("What is 1/2 + 1/3?"))
                    await asyncio.sleep(LOCKED_S)
                    assert not second.done()
                turn = await second
            again = await runs_again(chat.handle)
    finally:
        await tl.close()

    assert ("done", 1) == (turn.state, turn.attempt)
    assert {turn.id: 1} == asked(logs)
    assert 0 == again


@pytest.mark.timeout(90)
async def test_a_running_turn_whose_store_waits_runs_once(
    client: Client, pg_settings: Settings, pg_spec: str, cid: str
) -> None:
    """The records table is locked while the turn's model call runs: the try's looks at the log wait
    past the heartbeat timeout, and the turn is not run again."""
    tl = Threadline(client, pg_settings)
    try:
        async with pg_worker(client, slow(pg_settings, 2.0)):
            chat = tl.conversation("tutor", id=cid)
            with capture_logs() as logs:
                placed = await chat.send("Take your time.")
                assert placed.id is not None
                await until_running(chat, placed.id)
                async with records_locked(pg_spec):
                    await asyncio.sleep(LOCKED_S)
                turn = await placed.result()
            again = await runs_again(chat.handle)
    finally:
        await tl.close()

    assert ("done", 1) == (turn.state, turn.attempt)
    assert {turn.id: 1} == asked(logs)
    assert 0 == again
