"""The record log in PostgreSQL: `PostgresStore` (sync) and `AsyncPostgresStore`, one contract with FolderStore.

Each record is kept as the exact line a FolderStore writes (docs/format-1.md 1.3, 7), numbered by its
position; an append is one transaction that locks the conversation's row, so appends to one
conversation are serialised across threads, processes and hosts, all or nothing, and a writer that
dies mid-transaction leaves nothing. `wait` wakes on LISTEN/NOTIFY (store/backends/pglisten.py). The schema
is migrated when a store opens (store/backends/migrate.py); the SQL both classes send is in store/backends/pgsql.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Self

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from .base import DEFAULT_SCHEMA, check_id, check_records
from .migrate import migrate
from .pgsql import (
    Lines,
    Row,
    StoreBase,
    add_params,
    async_checked,
    checked,
    numbered,
    parse_row,
    raw_line,
    reachable,
)


class PostgresStore(StoreBase):
    """A record log in a PostgreSQL database, shared by threads and processes on any host.

    Args:
        url: A libpq connection URL (`postgresql://user@host:port/db`).
        schema: The PostgreSQL schema of this store's tables (several stores can share a database).
        max_size: The most connections the pool opens (waiters use none of them).
        timeout: Seconds to wait for a connection before `store-unavailable`.
        migrate_schema: Whether to create or upgrade the schema on opening (`store.backends.migrate.migrate`).
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        max_size: int = 8,
        timeout: float = 30.0,
        migrate_schema: bool = True,
    ) -> None:
        super().__init__(url, schema, timeout)
        if migrate_schema:
            migrate(url, schema=schema)
        self._pool: ConnectionPool[psycopg.Connection[Row]] = ConnectionPool(
            url, open=True, check=checked(lambda: self._pool), **self._pool_args(max_size)
        )

    def close(self) -> None:
        """Close the pool and the listening connection."""
        self._listener.close()
        self._pool.close()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Row]]:
        """A connection of the pool (autocommit); a connection failure in the block is `store-unavailable`."""
        with reachable(), self._pool.connection() as conn:
            yield conn

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def append(self, conversation: str, records: Sequence[dict[str, Any]], *, expect: int | None = None) -> int:
        """Append `records` all or nothing, numbered from the current count; return the new count.

        Raises:
            ThreadlineError: `conversation-id`, `record-invalid`, `store-conflict` when `expect` is
                given and differs from the count, `store-unavailable`.
        """
        check_id(conversation)
        batch = check_records(records)
        return self._append(
            conversation, self._planned(conversation, expect, lambda n: numbered(batch, n)), bool(batch)
        )

    def append_lines(self, conversation: str, lines: Sequence[bytes], *, expect: int | None = None) -> int:
        """Append stored lines byte for byte (a copy from another store), unchecked; return the new count."""
        check_id(conversation)
        return self._append(conversation, self._planned(conversation, expect, lambda _: list(lines)), bool(lines))

    def read(self, conversation: str, after: int = 0, *, limit: int | None = None) -> list[dict[str, Any]]:
        """Return the records after position `after` (at most `limit`), parsed as FolderStore parses them."""
        return [parse_row(row) for row in self._rows(conversation, after, limit)]

    def read_lines(self, conversation: str, after: int = 0) -> list[bytes]:
        """Return the stored lines after position `after`, byte for byte, without newlines."""
        return [raw_line(row) for row in self._rows(conversation, after)]

    def count(self, conversation: str) -> int:
        """How many records `conversation` holds."""
        row = self._one(self._sql.count, {"c": check_id(conversation)})
        return int(row[0]) if row else 0

    def wait(self, conversation: str, after: int, timeout: float) -> bool:
        """Block until more than `after` records are held or `timeout` passes; woken by NOTIFY."""
        deadline = time.monotonic() + timeout
        woken = threading.Event()
        self._listener.subscribe(check_id(conversation), woken.set)
        try:
            self._listener.ready(timeout)
            while True:
                if self.count(conversation) > after:
                    return True
                left = deadline - time.monotonic()
                if left <= 0 or not woken.wait(left):
                    return False  # no notification in time: no append committed (or none was heard)
                woken.clear()
        finally:
            self._listener.unsubscribe(conversation, woken.set)

    def conversations(self) -> list[str]:
        """Return the ids of the conversations that hold records, sorted."""
        with self.connection() as conn:
            return [str(row[0]) for row in conn.execute(self._sql.conversations)]

    def recent(self, limit: int) -> list[str]:
        """The ids of the `limit` conversations appended to last, the latest first (those last
        appended to before the store's schema had `appended_at` come after the others)."""
        with self.connection() as conn:
            return [str(row[0]) for row in conn.execute(self._sql.recent, {"limit": max(limit, 0)})]

    def purge(self, conversation: str) -> int:
        """Remove `conversation`'s records and row in one transaction (after any append in progress);
        return how many records it held. Its id can be used again, from record 1."""
        check_id(conversation)
        with self.connection() as conn, conn.transaction():
            row = conn.execute(self._sql.purge_lock, {"c": conversation}).fetchone()
            conn.execute(self._sql.purge, {"c": conversation})
            return int(row[0]) if row else 0

    def identity(self) -> str:
        """The store's id: a UUID made once, with its schema."""
        row = self._one(self._sql.identity, {})
        assert row is not None, "the first migration writes the store's one row"
        return str(row[0])

    def _append(self, conversation: str, lines_after: Lines, any_lines: bool) -> int:
        if not any_lines:
            held = self.count(conversation)
            lines_after(held)  # the `expect` check
            return held
        with self.connection() as conn, conn.transaction():
            held = _first(conn.execute(self._sql.lock, {"c": conversation}).fetchone())
            lines = lines_after(held)
            conn.execute(self._sql.add, add_params(conversation, held, lines, self._sql.channel))
            return held + len(lines)

    def _rows(self, conversation: str, after: int, limit: int | None = None) -> list[Row]:
        params = self._read_params(conversation, after, limit)
        with self.connection() as conn:
            return conn.execute(self._sql.read, params).fetchall()

    def _one(self, query: bytes, params: dict[str, Any]) -> Row | None:
        with self.connection() as conn:
            return conn.execute(query, params).fetchone()


class AsyncPostgresStore(StoreBase):
    """`PostgresStore`'s methods as coroutines, over an `AsyncConnectionPool`.

    Open it before use (`await store.open()`, or `async with AsyncPostgresStore(url) as store`);
    the arguments are `PostgresStore`'s.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        max_size: int = 8,
        timeout: float = 30.0,
        migrate_schema: bool = True,
    ) -> None:
        super().__init__(url, schema, timeout)
        self._migrate = migrate_schema
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Row]] = AsyncConnectionPool(
            url, open=False, check=async_checked(lambda: self._pool), **self._pool_args(max_size)
        )

    async def open(self) -> None:
        """Migrate the schema (unless told not to) and open the pool."""
        if self._migrate:
            await asyncio.to_thread(migrate, self.url, schema=self.schema)
        await self._pool.open()

    async def close(self) -> None:
        """Close the pool and the listening connection."""
        await asyncio.to_thread(self._listener.close)
        await self._pool.close()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def append(self, conversation: str, records: Sequence[dict[str, Any]], *, expect: int | None = None) -> int:
        """Append `records` all or nothing; return the new count (see `PostgresStore.append`)."""
        check_id(conversation)
        batch = check_records(records)
        planned = self._planned(conversation, expect, lambda n: numbered(batch, n))
        return await self._append(conversation, planned, bool(batch))

    async def append_lines(self, conversation: str, lines: Sequence[bytes], *, expect: int | None = None) -> int:
        """Append stored lines byte for byte, unchecked; return the new count."""
        check_id(conversation)
        planned = self._planned(conversation, expect, lambda _: list(lines))
        return await self._append(conversation, planned, bool(lines))

    async def read(self, conversation: str, after: int = 0, *, limit: int | None = None) -> list[dict[str, Any]]:
        """Return the records after position `after` (at most `limit`), parsed as FolderStore parses them."""
        return [parse_row(row) for row in await self._rows(conversation, after, limit)]

    async def read_lines(self, conversation: str, after: int = 0) -> list[bytes]:
        """Return the stored lines after position `after`, byte for byte, without newlines."""
        return [raw_line(row) for row in await self._rows(conversation, after)]

    async def count(self, conversation: str) -> int:
        """How many records `conversation` holds."""
        row = await self._one(self._sql.count, {"c": check_id(conversation)})
        return int(row[0]) if row else 0

    # The timeout is part of the store contract (docs/format-1.md 1.6), as in the sync `wait`.
    async def wait(self, conversation: str, after: int, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait until more than `after` records are held or `timeout` passes; woken by NOTIFY."""
        deadline = time.monotonic() + timeout
        loop, woken = asyncio.get_running_loop(), asyncio.Event()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
                loop.call_soon_threadsafe(woken.set)

        self._listener.subscribe(check_id(conversation), wake)
        try:
            if not self._listener.listening:
                await asyncio.to_thread(self._listener.ready, timeout)
            while await self.count(conversation) <= after:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                try:
                    await asyncio.wait_for(woken.wait(), left)
                except TimeoutError:
                    return False  # no notification in time: no append committed (or none was heard)
                woken.clear()
            return True
        finally:
            self._listener.unsubscribe(conversation, wake)

    async def conversations(self) -> list[str]:
        """Return the ids of the conversations that hold records, sorted."""
        with reachable():
            async with self._pool.connection() as conn:
                return [str(row[0]) for row in await (await conn.execute(self._sql.conversations)).fetchall()]

    async def recent(self, limit: int) -> list[str]:
        """See `PostgresStore.recent`."""
        with reachable():
            async with self._pool.connection() as conn:
                rows = await (await conn.execute(self._sql.recent, {"limit": max(limit, 0)})).fetchall()
                return [str(row[0]) for row in rows]

    async def purge(self, conversation: str) -> int:
        """See `PostgresStore.purge`."""
        check_id(conversation)
        with reachable():
            async with self._pool.connection() as conn, conn.transaction():
                row = await (await conn.execute(self._sql.purge_lock, {"c": conversation})).fetchone()
                await conn.execute(self._sql.purge, {"c": conversation})
                return int(row[0]) if row else 0

    async def identity(self) -> str:
        """The store's id: a UUID made once, with its schema."""
        row = await self._one(self._sql.identity, {})
        assert row is not None, "the first migration writes the store's one row"
        return str(row[0])

    async def _append(self, conversation: str, lines_after: Lines, any_lines: bool) -> int:
        if not any_lines:
            held = await self.count(conversation)
            lines_after(held)
            return held
        with reachable():
            async with self._pool.connection() as conn, conn.transaction():
                held = _first(await (await conn.execute(self._sql.lock, {"c": conversation})).fetchone())
                lines = lines_after(held)
                await conn.execute(self._sql.add, add_params(conversation, held, lines, self._sql.channel))
                return held + len(lines)

    async def _rows(self, conversation: str, after: int, limit: int | None = None) -> list[Row]:
        params = self._read_params(conversation, after, limit)
        with reachable():
            async with self._pool.connection() as conn:
                return await (await conn.execute(self._sql.read, params)).fetchall()

    async def _one(self, query: bytes, params: dict[str, Any]) -> Row | None:
        with reachable():
            async with self._pool.connection() as conn:
                return await (await conn.execute(query, params)).fetchone()


def _first(row: Row | None) -> int:
    assert row is not None, "an upsert with RETURNING returns its row"
    return int(row[0])
