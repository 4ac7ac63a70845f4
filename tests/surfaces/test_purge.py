"""Removing a conversation for good: `DELETE /v1/conversations/{id}?purge=true` and `chat.purge()`, on a
folder store (functai's view included) and a PostgreSQL one, with a real dev server and worker."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from functai import calllog
from temporalio.client import Client
from temporalio.worker import Worker

from activities.language_model import OfflineModel
from core.settings import Settings
from store.backends.folder import FolderStore
from store.backends.locate import postgres_url
from store.backends.memory import MemoryStore
from store.backends.postgres import PostgresStore
from store.backends.reader import ConversationLog, Threaded
from store.backends.streams import StreamLog
from store.records import Record, turn_record
from tests.support.functai_kit import tutor
from tests.support.service_kit import send, serving
from tests.surfaces.test_cli import threadline, threadline_json
from tests.surfaces.test_remote_cli import _remote_env  # noqa: F401  # the fixture `remote_env`
from tests.surfaces.test_store_kinds import OFFLINE
from threadline.client import Threadline, connect
from threadline.http import create_app
from worker import build_worker


@pytest_asyncio.fixture(name="http")
async def _http(tl: Threadline) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(create_app(tl)) as http:
        yield http


def call_ids(folder: Path) -> set[str]:
    """The call ids functai reads in the store's call log."""
    calls, ratings = calllog.read(folder / "calls")
    return {str(c.get("id")) for c in calls} | {str(r.get("call")) for r in ratings}


async def test_a_purge_removes_every_trace_and_the_id_begins_again(
    http: httpx.AsyncClient, worker: Worker, folder: Path, cid: str
) -> None:
    """Records, streams and call-log lines go (functai finds nothing either); a later GET is 404; the
    same id then starts a new conversation whose records are numbered from 1."""
    turns = [(await send(http, cid, message=m, wait=True)).json()["turn"] for m in ("one", "two")]
    other = f"{cid}-other"
    kept = (await send(http, other, message="kept", wait=True)).json()["turn"]
    assert set(turns) <= call_ids(folder)

    purged = await http.delete(f"/v1/conversations/{cid}", params={"purge": "true"})
    gone = await http.get(f"/v1/conversations/{cid}")
    functai_turns = tutor.conversation(cid, store=str(folder)).turns
    streams = [t for t in turns if StreamLog(folder).path(t).exists()]
    again = (await send(http, cid, message="anew", wait=True)).json()
    state = (await http.get(f"/v1/conversations/{cid}")).json()

    body = purged.json()
    assert (200, False) == (purged.status_code, body["records_kept"])
    assert body["removed"]["records"] > 0
    assert body["removed"]["calls"] >= 2
    assert (404, "conversation-not-found") == (gone.status_code, gone.json()["error"]["code"])
    assert ([], []) == (list(functai_turns), streams)
    assert not set(turns) & call_ids(folder)
    assert kept in call_ids(folder)
    assert "done" == again["state"]
    assert 1 == state["turn_count"]
    assert 1 == FolderStore(folder).read(cid)[0]["seq"]
    assert [kept] == [r["turn"] for r in FolderStore(folder).read(other) if r.get("kind") == "turn"]


async def test_a_purge_is_refused_while_a_turn_runs_unless_forced(
    tl: Threadline, client: Client, settings: Settings, folder: Path, cid: str
) -> None:
    """A running turn: 409 `conversation-running` and nothing removed; with `force`, the turn is
    stopped and everything goes."""
    hold = asyncio.Event()
    async with (
        build_worker(client, settings, providers={"offline": OfflineModel(hold=hold)}),
        serving(create_app(tl)) as http,
    ):
        await send(http, cid, message="held")
        for _ in range(100):
            if any(r.get("kind") == "lease" for r in FolderStore(folder).read(cid)):
                break
            await asyncio.sleep(0.05)

        refused = await http.delete(f"/v1/conversations/{cid}", params={"purge": "true"})
        still = FolderStore(folder).count(cid)
        forced = await http.delete(f"/v1/conversations/{cid}", params={"purge": "true", "force": "true"})
        hold.set()
        gone = await http.get(f"/v1/conversations/{cid}")

    assert (409, "conversation-running") == (refused.status_code, refused.json()["error"]["code"])
    assert still > 0
    assert (200, False) == (forced.status_code, forced.json()["records_kept"])
    assert 404 == gone.status_code
    assert cid not in FolderStore(folder).conversations()


async def test_purging_nothing_is_not_found(http: httpx.AsyncClient, cid: str) -> None:
    """No records and no workflow: 404 `conversation-not-found`, as a close answers."""
    purged = await http.delete(f"/v1/conversations/{cid}", params={"purge": "true"})

    assert (404, "conversation-not-found") == (purged.status_code, purged.json()["error"]["code"])


@pytest.fixture(name="pg_settings")
def _pg_settings(settings: Settings, pg_spec: str, tmp_path: Path) -> Settings:
    return dataclasses.replace(settings, data=tmp_path / "no-folder", stores={"default": pg_spec})


async def test_a_purge_in_postgresql_removes_records_streams_and_call_rows(
    client: Client, pg_settings: Settings, pg_spec: str, cid: str
) -> None:
    """`chat.purge()` on a PostgreSQL store: no record, stream or call-log row of its turns stays; the
    id then begins again from record 1."""
    url, schema = postgres_url(pg_spec)
    tl = Threadline(client, pg_settings)
    try:
        async with build_worker(client, pg_settings):
            chat = tl.conversation("tutor", cid)
            turns = [(await chat.predict(m)).id for m in ("one", "two")]
            purged = await chat.purge()
            again = await tl.conversation("tutor", cid).predict("anew")
        with PostgresStore(url, schema=schema) as store, store.connection() as conn:
            left = {
                table: conn.execute(
                    f"SELECT count(*) FROM {schema}.{table} WHERE {column} = ANY(%s)", [turns]
                ).fetchone()
                for table, column in (("streams", "turn"), ("call_log", "call"))
            }
            records = store.read(cid)
    finally:
        await tl.close()

    assert purged.records > 0
    assert purged.calls >= 2
    assert {"streams": (0,), "call_log": (0,)} == left
    assert 1 == records[0]["seq"]
    assert [again.id] == [r["turn"] for r in records if r.get("kind") == "turn"]
    assert again.id not in turns


def turns_of(*ids: str) -> list[Record]:
    return [turn_record(t, parent=None, program="tutor", inputs={"message": t}) for t in ids]


@pytest.mark.parametrize("kind", ["folder", "memory"])
async def test_a_log_cached_elsewhere_reads_the_new_conversation_after_a_purge(kind: str, tmp_path: Path) -> None:
    """Another process's cached log of a purged id, begun again with more records than it held, reads
    the new conversation from its first record, not the old one's turns with the new one's end."""
    store = FolderStore(tmp_path) if kind == "folder" else MemoryStore()
    elsewhere = FolderStore(tmp_path) if kind == "folder" else store
    log = ConversationLog(Threaded(elsewhere), "c-1")
    store.append("c-1", turns_of("old-1", "old-2"))
    await log.read()

    store.purge("c-1")
    store.append("c-1", turns_of("new-1", "new-2", "new-3"))
    read = await log.read()

    assert ["new-1", "new-2", "new-3"] == sorted(read.turns)


async def test_a_memory_conversation_purged_begins_again_in_its_embedded_worker(
    client: Client, settings: Settings, cid: str
) -> None:
    """`connect(embedded=True)`: a purge empties the memory store's conversation, and the embedded worker,
    which read it before, shows the next turn none of the old ones."""
    tl = await connect(settings, client=client, embedded=True)
    try:
        await tl.conversation("tutor", id=cid)("Hi")
        await tl.conversation("tutor", id=cid)("Again")
        purged = await tl.conversation("tutor", id=cid).purge()
        anew = await tl.conversation("tutor", id=cid)("Anew")
        turns = await tl.conversation("tutor", id=cid).turns()
    finally:
        await tl.close()

    assert purged.records > 0
    assert OFFLINE.format("Anew", 0) == anew
    assert ["Anew"] == [t.inputs["message"] for t in turns]


async def test_the_cli_purges_through_the_service(remote_env: dict[str, str], cid: str) -> None:
    """`threadline close ID --purge` over HTTP removes the conversation (records gone, 404 since);
    `close` alone keeps the records."""
    await threadline_json(remote_env, "send", cid, "Hi")
    closed = await threadline_json(remote_env, "close", cid)
    purged = await threadline_json(remote_env, "close", cid, "--purge")
    again = await threadline(remote_env, "turns", cid)

    assert (True, False) == (closed["records_kept"], purged["records_kept"])
    assert purged["removed"]["records"] > 0
    assert 1 == again.returncode
    assert "conversation-not-found" in again.stderr
