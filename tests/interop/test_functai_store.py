"""functai 1.2.0 on another host's terms: through `threadline.functai_store` to PostgreSQL directly or to
the HTTP service's record endpoints, continuing conversations a Threadline worker writes at the same time."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from functai.errors import ConversationError
from temporalio.client import Client

from core.errors import ThreadlineError
from core.settings import Settings
from store.backends.locate import postgres_url
from store.backends.postgres import PostgresStore
from store.log.state import Log
from tests.support.kit import slow
from tests.support.service_kit import bearer, serving
from tests.workflow.test_pg_conversation import pg_worker
from threadline.client import Threadline
from threadline.http import create_app
from threadline.remote import functai_store

ROOT = Path(__file__).resolve().parents[2]
KEY = "k-functai-3b7e"


@pytest.fixture(name="pg_settings")
def _pg_settings(settings: Settings, pg_spec: str, tmp_path: Path) -> Settings:
    return dataclasses.replace(settings, data=tmp_path / "no-folder", stores={"default": pg_spec})


@pytest_asyncio.fixture(name="pg_tl")
async def _pg_tl(client: Client, pg_settings: Settings) -> AsyncIterator[Threadline]:
    tl = Threadline(client, pg_settings)
    yield tl
    await tl.close()


@pytest.fixture(name="pg")
def _pg(pg_spec: str) -> Iterator[PostgresStore]:
    url, schema = postgres_url(pg_spec)
    with PostgresStore(url, schema=schema) as store:
        yield store


async def functai_process(url: str, conversation: str, count: int, *args: str) -> dict[str, Any]:
    """Run `tests.support.functai_proc` to its end; return what it printed."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.functai_proc",
        url,
        conversation,
        str(count),
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 90)
    assert 0 == process.returncode, err.decode()
    found: dict[str, Any] = json.loads(out)
    return found


def assert_whole(records: list[dict[str, Any]], turns: list[str]) -> None:
    """`seq` is every record's position; each of `turns` (and no other) is there, ended once, done."""
    log = Log(records)
    ended = Counter(str(r["turn"]) for r in records if r.get("kind") == "ended")
    assert list(range(1, len(records) + 1)) == [r["seq"] for r in records]
    assert sorted(turns) == sorted(log.order)
    assert dict.fromkeys(turns, 1) == dict(ended)
    assert {"done"} == {str(log.turns[t].ended["state"]) for t in turns}  # type: ignore[index]


async def threadline_turns(tl: Threadline, conversation: str, count: int) -> list[str]:
    chat = tl.conversation("tutor", id=conversation)
    return [(await chat.predict(f"threadline {i}")).id for i in range(count)]


def test_a_conflict_is_functai_s_error_and_ours(pg_spec: str, cid: str) -> None:
    """A stale `expect` raises an error functai retries on (ConversationError) that is still a ThreadlineError."""
    with functai_store(pg_spec) as store:
        store.append(cid, [{"kind": "entry"}], expect=0)
        with pytest.raises(ConversationError) as refused:
            store.append(cid, [{"kind": "entry"}], expect=0)

    assert "store-conflict" == refused.value.code
    assert isinstance(refused.value, ThreadlineError)


async def test_functai_and_a_worker_share_a_conversation_in_postgres(
    client: Client, pg_settings: Settings, pg_tl: Threadline, pg: PostgresStore, pg_spec: str, cid: str
) -> None:
    """Two functai processes (straight to the database) and Threadline's client take turns in one
    conversation at once: nothing lost, nothing duplicated, every seq its position."""
    async with pg_worker(client, slow(pg_settings, 0.2)):
        results = await asyncio.gather(
            functai_process(pg_spec, cid, 4, "--tag", "a", "--delay", "0.1"),
            functai_process(pg_spec, cid, 4, "--tag", "b", "--delay", "0.1"),
            threadline_turns(pg_tl, cid, 4),
        )

    first, second, ours = results
    assert_whole(pg.read(cid), [*first["turns"], *second["turns"], *ours])


async def test_functai_over_http_shares_a_conversation_with_a_worker(
    client: Client, pg_settings: Settings, pg_tl: Threadline, pg: PostgresStore, cid: str
) -> None:
    """functai through the HTTP service's record endpoints, with a bearer key, beside the worker's turns."""
    async with pg_worker(client, slow(pg_settings, 0.2)), serving(create_app(pg_tl, keys=[KEY])) as http:
        url = str(http.base_url)
        results = await asyncio.gather(
            functai_process(url, cid, 3, "--api-key", KEY, "--tag", "a", "--delay", "0.1"),
            functai_process(url, cid, 3, "--api-key", KEY, "--tag", "b", "--delay", "0.1"),
            threadline_turns(pg_tl, cid, 3),
        )

    first, second, ours = results
    assert_whole(pg.read(cid), [*first["turns"], *second["turns"], *ours])


async def test_the_record_endpoints_keep_the_store_contract(pg_tl: Threadline, cid: str) -> None:
    """Read after a seq, a conditional append (409 on a stale count), a long poll woken by an append,
    the conversation list, and keys scoped to other stores refused."""
    async with serving(create_app(pg_tl, keys=[KEY, "k-team:team"])) as http:
        records = f"/v1/conversations/{cid}/records"
        first = await http.post(records, json={"records": [{"a": 1}, {"b": 2}], "expect": 0}, headers=bearer(KEY))
        stale = await http.post(records, json={"records": [{"c": 3}], "expect": 1}, headers=bearer(KEY))
        waiting = asyncio.create_task(
            http.get(f"{records}/wait", params={"after": 2, "timeout": 10}, headers=bearer(KEY))
        )
        await asyncio.sleep(0.3)
        await http.post(records, json={"records": [{"c": 3}]}, headers=bearer(KEY))
        woken = await waiting
        idle = await http.get(f"{records}/wait", params={"after": 3, "timeout": 0.2}, headers=bearer(KEY))
        after = await http.get(records, params={"after": 1}, headers=bearer(KEY))
        listed = await http.get("/v1/conversations/records", headers=bearer(KEY))
        scoped = await http.get(records, headers=bearer("k-team"))

    assert (200, {"count": 2}) == (first.status_code, first.json())
    assert (409, "store-conflict") == (stale.status_code, stale.json()["error"]["code"])
    assert ({"more": True}, {"more": False}) == (woken.json(), idle.json())
    assert [{"b": 2, "seq": 2}, {"c": 3, "seq": 3}] == after.json()["records"]
    assert cid in listed.json()["conversations"]
    assert (403, "forbidden") == (scoped.status_code, scoped.json()["error"]["code"])


async def test_the_http_store_raises_functai_s_conflict(pg_tl: Threadline, cid: str) -> None:
    """A 409 from the service reaches functai as its ConversationError("store-conflict"); a wrong key is
    `unauthorized`."""
    async with serving(create_app(pg_tl, keys=[KEY])) as http:
        url = str(http.base_url)
        with functai_store(url, api_key=KEY) as store, functai_store(url, api_key="k-wrong") as stranger:
            await asyncio.to_thread(store.append, cid, [{"a": 1}], expect=0)
            with pytest.raises(ConversationError) as refused:
                await asyncio.to_thread(store.append, cid, [{"a": 2}], expect=0)
            with pytest.raises(ThreadlineError) as unknown:
                await asyncio.to_thread(stranger.read, cid)
            records = await asyncio.to_thread(store.read, cid)

    assert "store-conflict" == refused.value.code
    assert "unauthorized" == unknown.value.code
    assert [{"a": 1, "seq": 1}] == records
