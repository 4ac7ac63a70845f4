"""A worker that starts reads the logs of the conversations appended to last (`LogCache.warm`): which
ones a folder and a PostgreSQL store name, the bounds the reading keeps, a failing store, and the
worker's own warming, logged, on a real server."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs
from temporalio.client import Client

from activities.plan import prepare_next, request_of
from core.settings import Settings
from store.backends.folder import FolderStore
from store.backends.locate import postgres_url
from store.backends.memory import MemoryStore
from store.backends.opening import StoreSet
from store.backends.postgres import AsyncPostgresStore, PostgresStore
from store.backends.reader import LogCache, Stores, Threaded
from store.log.memo import KEPT_FROM
from store.log.rules import shown
from store.log.state import Log
from store.programs.program import load_programs
from threadline.client import Threadline
from worker import build_worker

DAY_NS = 86_400 * 10**9


def folder_with(tmp_path: Path, sizes: dict[str, int]) -> FolderStore:
    """A folder store holding `sizes` (id: records), each appended a day after the one before."""
    store = FolderStore(tmp_path / "store")
    for k, (conversation, n) in enumerate(sizes.items()):
        store.append(conversation, [{"kind": "note", "n": i} for i in range(n)])
        at = (k + 1) * DAY_NS
        os.utime(store.path(conversation), ns=(at, at))
    return store


def cache_of(stores: dict[str, FolderStore | MemoryStore], **bounds: int) -> LogCache:
    return LogCache(Stores({name: functools.partial(Threaded, store) for name, store in stores.items()}), **bounds)


def test_a_folder_names_the_conversations_appended_to_last_first(tmp_path: Path) -> None:
    store = folder_with(tmp_path, {"w-old": 1, "w-mid": 1, "w-new": 1})
    assert ["w-new", "w-mid"] == store.recent(2)
    assert ["w-new", "w-mid", "w-old"] == store.recent(10)
    assert [] == store.recent(0)
    store.append("w-old", [{"kind": "note"}])  # appended to now: the latest
    assert ["w-old", "w-new"] == store.recent(2)


def test_warming_reads_folders_that_hold_conversations_and_makes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    folder_with(tmp_path, {"w-one": 1})  # tmp_path / "store", written as "~/store" below
    specs = {"held": "~/store", "absent": str(tmp_path / "absent")}
    assert ["held"] == StoreSet(specs).existing()
    assert not (tmp_path / "absent").exists()


async def test_warming_reads_the_latest_logs_whole(tmp_path: Path) -> None:
    store = folder_with(tmp_path, {"w-a": 3, "w-b": 700, "w-c": 2})
    logs = cache_of({"default": store})
    warmed = await logs.warm(["default"], 2)
    assert (2, 702, {}) == (warmed.conversations, warmed.records, warmed.failed)
    assert (2, 700, 0) == tuple(logs.get("default", c).log.n for c in ("w-c", "w-b", "w-a"))


async def test_warming_stays_within_half_of_what_the_cache_keeps(tmp_path: Path) -> None:
    store = folder_with(tmp_path, {f"w-{k}": 6 for k in range(6)})
    by_records = await cache_of({"default": store}, records=20).warm(["default"], 100)
    assert (2, 12) == (by_records.conversations, by_records.records)  # stops once 10 records are read
    by_logs = await cache_of({"default": store}, logs=6).warm(["default"], 100)
    assert 3 == by_logs.conversations
    by_most = await cache_of({"default": store}).warm(["default"], 100, most_records=13)
    assert (3, 18) == (by_most.conversations, by_most.records)  # stops once 13 records are read
    assert 0 == (await cache_of({"default": store}).warm(["default"], 0)).conversations


async def test_a_failing_store_is_named_and_the_others_are_read(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, {"w-one": 2})
    memory = MemoryStore()
    memory.append("w-mem", [{"kind": "note"}])
    logs = cache_of({"default": folder, "memory": memory})
    warmed = await logs.warm(["gone", "memory", "default"], 10)
    # an unknown store fails by its code; a memory store lists nothing a new process could find warm
    assert (1, 2, {"gone": "store-unknown"}) == (warmed.conversations, warmed.records, warmed.failed)
    broken = FolderStore(tmp_path / "broken")
    shutil.rmtree(broken.folder / "conversations")
    (broken.folder / "conversations").write_text("not a folder")  # listing it fails, as root too
    unreadable = await cache_of({"default": broken}).warm(["default"], 10)
    assert {"default": "ENOTDIR"} == unreadable.failed


async def test_postgres_names_the_conversations_appended_to_last_first(pg_spec: str) -> None:
    url, schema = postgres_url(pg_spec)
    with PostgresStore(url, schema=schema) as store:
        for conversation in ("w-old", "w-new", "w-empty-after"):
            store.append(conversation, [{"kind": "note"}])
        store.purge("w-empty-after")
        store.append("w-old", [{"kind": "note"}])
        assert ["w-old", "w-new"] == store.recent(5)
        assert ["w-old"] == store.recent(1)
        async with AsyncPostgresStore(url, schema=schema) as same:
            assert ["w-old", "w-new"] == await same.recent(5)
            logs = LogCache(Stores({"pg": lambda: same}))
            warmed = await logs.warm(["pg"], 5)
            assert (2, 3) == (warmed.conversations, warmed.records)


async def test_a_worker_that_starts_reads_the_latest_logs(
    client: Client, settings: Settings, tl: Threadline, cid: str
) -> None:
    """The new worker reads the conversation's log and keeps what its next turn is shown (a branch of
    `KEPT_FROM` turns keeps it), and that turn's request is the one a log read afresh builds."""
    async with build_worker(client, settings):
        chat = tl.conversation("tutor", id=cid)
        for k in range(KEPT_FROM):
            await chat.predict(f"turn {k}")
    folder = FolderStore(settings.store_folder("default"))
    held = folder.count(cid)
    with capture_logs() as events:
        async with build_worker(client, settings):
            for _ in range(200):
                if warmed := [e for e in events if e["event"] == "logs.warmed"]:
                    break
                await asyncio.sleep(0.05)
    assert [(1, held, 1)] == [(e["conversations"], e["records"], e["prepared"]) for e in warmed]

    programs = load_programs(())
    prepared, fresh = Log(folder.read(cid)), Log(folder.read(cid))
    assert prepare_next(prepared, programs, now=time.time())
    assert prepared.shown_memo is not None
    assert KEPT_FROM == len(prepared.shown_memo.renders)
    requests = []
    for log in (prepared, fresh):
        assert log.head is not None
        seen = shown(
            log,
            log.head,
            fields=programs["tutor"].field_records(),
            signature=programs["tutor"].signature,
            now=time.time(),
        )
        requests.append(request_of(programs["tutor"], seen, {"message": "next"}, model="offline"))
    assert requests[0] == requests[1]
    assert 2 * KEPT_FROM + 1 == len(requests[0].messages)
    assert not prepare_next(Log(folder.read(cid)[:-40]), programs, now=time.time())  # a short branch: nothing kept
