"""What a worker, a client and the HTTP service open on a PostgreSQL store, they close when they stop:
opened and closed 20 times each, against a database of the test's own, they leave the server with
as many connections to it as before (`pg_stat_activity`)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql
from temporalio.client import Client

from core.settings import Settings
from tests.support.service_kit import serving
from threadline.client import connect
from threadline.http import create_app
from worker import build_worker

TIMES = 20
SETTLE_S = 5.0
"""How long a closed connection may take to leave `pg_stat_activity` (the server ends its backend then)."""


@pytest.fixture(name="database")
def _database(postgres_url: str) -> Iterator[str]:
    """The URL of a database no other test connects to, so that its connections are this test's."""
    name = f"r_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield urlunsplit(urlsplit(postgres_url)._replace(path=f"/{name}"))
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(name="pg_settings")
def _pg_settings(settings: Settings, database: str, tmp_path: Path) -> Settings:
    """Settings whose one store (and payload store) is that database, and whose data folder never exists."""
    return dataclasses.replace(settings, data=tmp_path / "no-folder", stores={"default": database}, payloads=database)


def connections(database: str) -> int:
    """How many connections the server holds to `database` (counted from a connection to another one)."""
    name = urlsplit(database).path.lstrip("/")
    other = urlunsplit(urlsplit(database)._replace(path="/postgres"))
    with psycopg.connect(other, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)).fetchone()
    assert row is not None
    return int(row[0])


async def settled(database: str, expected: int) -> int:
    """The count of `connections`, once it is `expected` or `SETTLE_S` has passed."""
    deadline = time.monotonic() + SETTLE_S
    found = await asyncio.to_thread(connections, database)
    for _ in range(int(SETTLE_S / 0.05)):
        if found == expected or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
        found = await asyncio.to_thread(connections, database)
    return found


async def test_a_worker_closes_what_it_opened(client: Client, pg_settings: Settings, database: str, cid: str) -> None:
    """A worker made by `build_worker(client, settings)` that ran a turn (its record log, stream and
    call log opened) holds no connection once it stopped."""
    before = connections(database)
    async with build_worker(client, pg_settings):  # the first one migrates the schema
        pass
    for i in range(TIMES):
        async with build_worker(client, pg_settings):
            tl = await connect(pg_settings, client=client)
            try:
                await tl.conversation("tutor", cid, lm="offline")(f"turn {i}")
            finally:
                await tl.close()
    assert before == await settled(database, before)


async def test_a_client_closes_what_it_opened(pg_settings: Settings, database: str, cid: str) -> None:
    """`threadline.connect()` (its own Temporal client, whose claim check keeps payloads in the
    database) that read a log, a stream and wrote a payload holds no connection after `close()`."""
    before = connections(database)
    for _ in range(TIMES):
        tl = await connect(pg_settings)
        try:
            assert [] == await tl.conversation("tutor", cid).turns()
            assert [] == await asyncio.to_thread(tl.stores.streams["default"].read, "t-none")
            await tl.client.data_converter.encode(["x" * 10_000])  # over the claim check's threshold
        finally:
            await tl.close()
    assert before == await settled(database, before)


async def test_the_service_closes_what_it_opened(client: Client, pg_settings: Settings, database: str) -> None:
    """The HTTP service, started and stopped in-process, holds no connection once it stopped: its
    lifespan closes the client it serves (record log, listener) at the end."""
    before = connections(database)
    for i in range(TIMES):
        app = create_app(await connect(pg_settings, client=client))
        async with serving(app) as http:
            appended = await http.post(f"/v1/conversations/c-{i}/records", json={"records": [{"n": i}]})
            assert 200 == appended.status_code, appended.text
            waited = await http.get(f"/v1/conversations/c-{i}/records/wait", params={"after": 0, "timeout": 1})
            assert {"more": True} == waited.json()
    assert before == await settled(database, before)
