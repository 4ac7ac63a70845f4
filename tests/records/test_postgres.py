"""The PostgreSQL store on a real server: crashes mid-transaction, concurrent appenders as threads
and processes (beside the folder store), LISTEN/NOTIFY waits, stored lines read as a folder reads
them, migrations, the async twin, and functai 1.2.0 using it as its store."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.errors import ThreadlineError
from store.backends.folder import FolderStore
from store.backends.locate import open_store, postgres_url
from store.backends.migrate import migrate, migrations
from store.backends.pgstreams import PostgresStreams
from store.backends.postgres import AsyncPostgresStore, PostgresStore
from store.backends.transfer import copy_conversations
from tests.support.functai_kit import offline, reply, tutor
from tests.support.pg_kit import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(name="pg")
def _pg(pg_spec: str) -> Iterator[PostgresStore]:
    url, schema = postgres_url(pg_spec)
    with PostgresStore(url, schema=schema) as store:
        yield store


@pytest.fixture(name="spec", params=["folder", "postgres"])
def _spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where separate processes find one store: a folder path or a PostgreSQL URL."""
    return str(tmp_path / "store") if request.param == "folder" else str(request.getfixturevalue("pg_spec"))


def procs(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.store_procs", *args], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )


def assert_whole(records: list[dict[str, object]], writers: list[str], count: int) -> None:
    """`seq` runs 1..n once each, every writer's records are all there once, in its own order."""
    assert list(range(1, len(writers) * count + 1)) == [r["seq"] for r in records]
    for writer in writers:
        assert list(range(count)) == [r["i"] for r in records if r["writer"] == writer]


def test_a_writer_killed_mid_transaction_leaves_nothing(pg: PostgresStore, pg_spec: str) -> None:
    """SIGKILL between a batch's insert and its commit: nothing of it is kept, and the next append is 3."""
    pg.append("torn", [{"a": 1}, {"b": 2}])
    holder = procs("hold", pg_spec, "torn", "50")
    assert holder.stdout is not None
    assert "inside" == holder.stdout.readline().strip()
    waiting: list[int] = []
    blocked = threading.Thread(target=lambda: waiting.append(pg.append("torn", [{"c": 3}])))
    blocked.start()

    holder.send_signal(signal.SIGKILL)
    holder.communicate(timeout=10)
    blocked.join(timeout=30)

    assert [3] == waiting
    assert [{"a": 1, "seq": 1}, {"b": 2, "seq": 2}, {"c": 3, "seq": 3}] == pg.read("torn")


def test_appenders_in_threads_never_share_a_seq(spec: str) -> None:
    """Eight threads on one store object append 25 records each: 200 records, numbered once each."""
    store = open_store(spec)
    writers = [f"t{i}" for i in range(8)]

    def write(writer: str) -> None:
        for i in range(25):
            store.append("shared", [{"writer": writer, "i": i}])

    threads = [threading.Thread(target=write, args=(w,)) for w in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert_whole(store.read("shared"), writers, 25)
    getattr(store, "close", lambda: None)()


@pytest.mark.parametrize("conditional", [False, True], ids=["plain", "expect"])
def test_appenders_in_processes_never_share_a_seq(spec: str, conditional: bool) -> None:
    """Four processes append 25 records each, plainly or conditionally retrying conflicts: none lost."""
    writers = [f"p{i}" for i in range(4)]
    flag = ["--expect"] if conditional else []
    started = [procs("append", spec, "shared", writer, "25", *flag) for writer in writers]

    codes = [process.communicate(timeout=90) and process.returncode for process in started]

    assert [0] * 4 == codes
    store = open_store(spec)
    assert_whole(store.read("shared"), writers, 25)
    getattr(store, "close", lambda: None)()


def test_a_conditional_append_on_a_stale_count_conflicts(pg: PostgresStore) -> None:
    """Two writers decide on the same count: the first wins, the second gets `store-conflict` with the counts."""
    pg.append("race", [{"a": 1}])
    seen = pg.count("race")
    pg.append("race", [{"first": True}], expect=seen)

    with pytest.raises(ThreadlineError) as caught:
        pg.append("race", [{"second": True}], expect=seen)

    assert ("store-conflict", {"expected": 1, "found": 2}) == (caught.value.code, caught.value.details)
    assert 2 == pg.count("race")


def test_wait_wakes_when_another_process_appends(pg: PostgresStore, pg_spec: str) -> None:
    """A waiter with a long timeout returns True once another process's append commits."""
    pg.append("waited", [{"a": 1}])
    writer = procs("append", pg_spec, "waited", "w", "1")

    woke = pg.wait("waited", 1, timeout=60)

    assert woke
    writer.communicate(timeout=30)
    assert 0 == writer.returncode
    assert 2 == pg.count("waited")


def test_stored_lines_read_as_a_folder_reads_them(pg: PostgresStore, tmp_path: Path) -> None:
    """Lines that are not records (torn, not UTF-8, NUL, a list, a BOM) read back exactly, as a folder reads them."""
    lines = [
        b'{"a":1,"seq":1}',
        b'{"kind":"turn","tu',
        b'{"bad":"\xff\xfe"}',
        b'{"nul":"a\x00b"}',
        b"[1,2]",
        b'\xef\xbb\xbf{"bom":true,"seq":6}',
        b"null",
        b'  {"spaced":true}\r',
    ]
    folder = FolderStore(tmp_path)
    folder.path("odd").write_bytes(b"".join(line + b"\n" for line in lines))

    assert len(lines) == pg.append_lines("odd", lines, expect=0)

    assert lines == pg.read_lines("odd")
    assert folder.read("odd") == pg.read("odd")
    assert {"unreadable": True} == pg.read("odd")[1]


def test_migrations_apply_once_and_a_newer_schema_is_refused(pg: PostgresStore, pg_spec: str) -> None:
    """Migrating again changes nothing (same id); a schema at an unknown version is not written to."""
    url, schema = postgres_url(pg_spec)
    before = pg.identity()
    latest = migrations()[-1].version

    assert latest == migrate(url, schema=schema)
    assert before == pg.identity()
    with pg.connection() as conn:
        conn.execute(f"INSERT INTO {schema}.migrations (version, name) VALUES (9999, 'future')".encode())
    with pytest.raises(ThreadlineError) as caught:
        migrate(url, schema=schema)

    assert "store-invalid" == caught.value.code


def test_racing_migrations_make_one_store(postgres_url: str) -> None:
    """Threads opening a new schema at once all succeed and see one identity."""
    ids: list[str] = []

    def open_one() -> None:
        with PostgresStore(postgres_url, schema="raced_migrations") as store:
            ids.append(store.identity())

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert 6 == len(ids)
    assert 1 == len(set(ids))


def test_an_unreachable_database_is_store_unavailable() -> None:
    """Nothing listening on the port: a retryable `store-unavailable` that does not show the URL."""
    url = f"postgresql://someone:secret@127.0.0.1:{free_port()}/nowhere"

    with pytest.raises(ThreadlineError) as caught:
        PostgresStore(url, timeout=2)

    assert ("store-unavailable", True) == (caught.value.code, caught.value.retryable)
    assert "secret" not in str(caught.value)


async def test_the_async_store_keeps_the_same_contract(pg: PostgresStore, pg_spec: str) -> None:
    """AsyncPostgresStore appends, conflicts, reads, counts, lists and waits as the sync store does."""
    url, schema = postgres_url(pg_spec)
    async with AsyncPostgresStore(url, schema=schema) as store:
        assert 2 == await store.append("c1", [{"a": 1}, {"seq": 7, "b": 2}], expect=0)
        with pytest.raises(ThreadlineError) as caught:
            await store.append("c1", [{"c": 3}], expect=0)
        assert "store-conflict" == caught.value.code
        assert [{"seq": 2, "b": 2}] == await store.read("c1", after=1)
        assert pg.read_lines("c1") == await store.read_lines("c1")
        assert (2, ["c1"], pg.identity()) == (
            await store.count("c1"),
            await store.conversations(),
            await store.identity(),
        )
        assert not await store.wait("c1", 2, timeout=0.05)

        later = asyncio.create_task(asyncio.to_thread(pg.append, "c1", [{"c": 3}], expect=2))
        assert await store.wait("c1", 2, timeout=60)
        await later
        assert 3 == await store.count("c1")


def test_functai_uses_a_postgres_store_and_a_folder_reads_the_copy(pg: PostgresStore, tmp_path: Path) -> None:
    """functai 1.2.0 holds a conversation in a PostgresStore (`store=`); copied to a folder, functai reads it whole."""
    with offline([reply("A1"), reply("A2"), reply("A3")]):
        chat = tutor.conversation("kept-in-pg", store=pg)
        chat("one")
        chat("two")
        branch = chat.continue_from(chat.turns[0])
        branch("three")

    copy_conversations(pg, FolderStore(tmp_path), "kept-in-pg")

    assert pg.read("kept-in-pg") == FolderStore(tmp_path).read("kept-in-pg")
    with offline([]):
        view = tutor.conversation("kept-in-pg", store=str(tmp_path))
        assert ["A1", "A2", "A3"] == sorted(t.result for t in view.all_turns())
        assert "A3" == view.head.result


async def test_a_queued_stream_is_written_before_its_try_answers(pg: PostgresStore, pg_spec: str) -> None:
    """A PostgreSQL stream's events go through a thread of their own; `written()` returns only once that
    thread has stored them, so a turn answered after it never has stream rows still on their way (a purge
    right after the answer once left one behind). The sending thread is held here by a lock on the table."""
    url, schema = postgres_url(pg_spec)
    streams = PostgresStreams(url, schema=schema)
    try:
        streams.opened()  # the table exists before it is locked
        writer = streams.writer("t-queued-1", 1)
        writer.text("an answer")
        assert streams.flush(timeout=10.0)
        with pg.connection() as conn, conn.transaction():
            conn.execute(f"LOCK TABLE {schema}.streams IN ACCESS EXCLUSIVE MODE")
            writer.end("done")
            waiting = asyncio.ensure_future(writer.written())
            await asyncio.sleep(0.5)
            assert not waiting.done()
        await asyncio.wait_for(waiting, timeout=10.0)
        events = [event for _, event in await asyncio.to_thread(streams.read, "t-queued-1")]
        assert [{"text": "an answer"}, {"end": "done"}] == [
            {k: v for k, v in e.items() if k in ("text", "end")} for e in events if "start" not in e
        ]
    finally:
        await asyncio.to_thread(streams.close)
