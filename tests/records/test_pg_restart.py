"""Stores opened before their PostgreSQL server restarts: every read after the restart succeeds, as
the pools check a connection before handing it out (a pooled connection the restart killed used
to fail one read each, as `store-unavailable`)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from core.errors import ThreadlineError
from store.backends.pgblobs import PostgresBlobs
from store.backends.postgres import AsyncPostgresStore, PostgresStore
from tests.support.pg_kit import PostgresServer, postgres_server

READS = 12


@pytest.fixture(scope="module", name="server")
def _server() -> Iterator[PostgresServer]:
    """A server of this module's own: the tests restart it."""
    with postgres_server() as server:
        server.create_database("restarts")
        yield server


@pytest.fixture(name="schema")
def _schema() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


def answer(read: Callable[[], object]) -> object:
    """What a read gave: its value, or the code it failed with."""
    try:
        return read()
    except ThreadlineError as err:
        return str(err.code)


async def test_async_store_reads_after_a_restart(server: PostgresServer, schema: str) -> None:
    """The record log's async pool (the worker's, the client's, the service's) after a fast restart."""
    async with AsyncPostgresStore(server.url("restarts"), schema=schema) as store:
        await store.append("c-1", [{"a": 1}])
        await asyncio.gather(*(store.read("c-1") for _ in range(READS)))  # the pool grows to several connections
        await asyncio.to_thread(server.restart)
        answers: list[object] = []
        for _ in range(READS):
            try:
                answers.append(len(await store.read("c-1")))
            except ThreadlineError as err:
                answers.append(str(err.code))
    assert [1] * READS == answers


def test_blocking_store_reads_after_a_crash_restart(server: PostgresServer, schema: str) -> None:
    """The blocking pool (streams, the call log, copies) after an immediate restart, as after a crash."""
    with PostgresStore(server.url("restarts"), schema=schema) as store:
        store.append("c-1", [{"a": 1}])
        with ThreadPoolExecutor(6) as threads:
            list(threads.map(lambda _: store.read("c-1"), range(READS)))
        with psycopg.connect(server.url("restarts"), autocommit=True) as conn:
            conn.execute("CHECKPOINT")  # the test server commits without waiting for its WAL: keep the schema
        server.restart("immediate")
        answers = [answer(lambda: len(store.read("c-1"))) for _ in range(READS)]
    assert [1] * READS == answers


async def test_payload_store_reads_after_a_restart(server: PostgresServer, schema: str) -> None:
    """The claim check's payload store after a fast restart."""
    blobs = PostgresBlobs(f"{server.url('restarts')}?schema={schema}")
    key = "sha256:" + "0" * 64
    try:
        await blobs.put(key, b"payload")
        await asyncio.gather(*(blobs.get(key) for _ in range(READS)))
        await asyncio.to_thread(server.restart)
        answers: list[object] = []
        for _ in range(READS):
            try:
                answers.append(await blobs.get(key))
            except ThreadlineError as err:
                answers.append(str(err.code))
    finally:
        await blobs.close()
    assert [b"payload"] * READS == answers
