"""What the synchronous and asynchronous PostgreSQL stores share: their SQL, and the steps around it.

The statements are rendered once per schema to bytes, so both stores send the same text (which
psycopg prepares after a few runs). An append is one transaction of two statements:

    LOCK   upsert the conversation's row, taking its row lock, and return its length n
           (then, in Python: the `expect` check, and the lines numbered n+1... as FolderStore writes them)
    ADD    insert the lines, set the length, and NOTIFY `<schema>.records` with the conversation id

Waiters LISTEN on that channel (store/backends/pglisten.py); the notification is sent when the append commits.
"""

from __future__ import annotations

import json
import re
import select
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from core.errors import ErrorCode, ThreadlineError

from .base import check_id, encode
from .pglisten import Listener

Row = tuple[Any, ...]
Lines = Callable[[int], list[bytes]]
"""What to append, given the count held under the lock (it raises `store-conflict` on a stale `expect`)."""

_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def check_schema(schema: object) -> str:
    """Return `schema` if it is a plain lower-case PostgreSQL identifier.

    Raises:
        ThreadlineError: `invalid-request` for anything else.
    """
    if isinstance(schema, str) and _SCHEMA.fullmatch(schema):
        return schema
    raise ThreadlineError(
        ErrorCode.INVALID_REQUEST,
        f"{repr(schema)[:60]} is not a schema name: use 1 to 63 lower-case letters, digits or '_', "
        "not starting with a digit",
    )


def _render(text: str, schema: str) -> bytes:
    return sql.SQL(text).format(s=sql.Identifier(schema)).as_bytes(None)


@dataclass(frozen=True, slots=True)
class Queries:
    """The statements of one store schema, rendered to bytes."""

    channel: str
    lock: bytes
    add: bytes
    count: bytes
    read: bytes
    conversations: bytes
    recent: bytes
    listen: bytes
    identity: bytes
    stream_add: bytes
    stream_read: bytes
    purge_lock: bytes
    purge: bytes
    stream_remove: bytes

    @classmethod
    def of(cls, schema: str) -> Queries:
        """The statements for the store in `schema`."""
        check_schema(schema)
        channel = f"{schema}.records"
        return cls(
            channel=channel,
            lock=_render(
                "INSERT INTO {s}.conversations AS c (id, length) VALUES (%(c)s, 0) "
                "ON CONFLICT (id) DO UPDATE SET length = c.length RETURNING length",
                schema,
            ),
            add=_render(
                "WITH added AS (INSERT INTO {s}.records (conversation, seq, line, raw) "
                "SELECT %(c)s, %(n)s + t.i, t.line, t.raw "
                "FROM unnest(%(lines)b::text[], %(raws)b::bytea[]) WITH ORDINALITY AS t(line, raw, i)), "
                "grown AS (UPDATE {s}.conversations SET length = %(n)s + cardinality(%(lines)b::text[]), "
                "appended_at = now() WHERE id = %(c)s) "
                "SELECT pg_notify(%(channel)s, %(c)s)",
                schema,
            ),
            count=_render("SELECT length FROM {s}.conversations WHERE id = %(c)s", schema),
            read=_render(
                "SELECT line, raw FROM {s}.records WHERE conversation = %(c)s AND seq > %(after)s ORDER BY seq"
                " LIMIT %(limit)s",
                schema,
            ),
            conversations=_render("SELECT id FROM {s}.conversations WHERE length > 0 ORDER BY id", schema),
            recent=_render(
                "SELECT id FROM {s}.conversations WHERE length > 0 ORDER BY appended_at DESC NULLS LAST, id "
                "LIMIT %(limit)s",
                schema,
            ),
            listen=sql.SQL("LISTEN {}").format(sql.Identifier(channel)).as_bytes(None),
            identity=_render("SELECT id::text FROM {s}.store", schema),
            stream_add=_render(
                "INSERT INTO {s}.streams (turn, position, line) "
                "SELECT %(t)s, coalesce(max(position), 0) + 1, %(line)s FROM {s}.streams WHERE turn = %(t)s "
                "ON CONFLICT DO NOTHING RETURNING position",
                schema,
            ),
            stream_read=_render(
                "SELECT position, line FROM {s}.streams WHERE turn = %(t)s AND position > %(after)s ORDER BY position",
                schema,
            ),
            stream_remove=_render(
                "WITH gone AS (DELETE FROM {s}.streams WHERE turn = ANY(%(turns)s::text[]) RETURNING turn) "
                "SELECT count(DISTINCT turn) FROM gone",
                schema,
            ),
            purge_lock=_render("SELECT length FROM {s}.conversations WHERE id = %(c)s FOR UPDATE", schema),
            purge=_render(
                "WITH gone AS (DELETE FROM {s}.records WHERE conversation = %(c)s) "
                "DELETE FROM {s}.conversations WHERE id = %(c)s",
                schema,
            ),
        )


class StoreBase:
    """What both stores hold: the URL, the schema's statements, and the listener for `wait`."""

    durability = "disk"
    persistent = True

    def __init__(self, url: str, schema: str, timeout: float) -> None:
        self.url, self.schema, self.timeout = url, schema, timeout
        self._sql = Queries.of(schema)
        self._listener = Listener(url, self._sql.listen, connect_timeout=max(1, round(timeout)))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} schema={self.schema}>"  # never the URL: it may hold a password

    @property
    def queries(self) -> Queries:
        """The statements of this store's schema."""
        return self._sql

    def _pool_args(self, max_size: int) -> dict[str, Any]:
        return {
            "min_size": 1,
            "max_size": max_size,
            "timeout": self.timeout,
            "kwargs": {"autocommit": True},
            "name": f"threadline-{self.schema}",
        }

    @staticmethod
    def _planned(conversation: str, expect: int | None, lines: Lines) -> Lines:
        """`lines`, refused with `store-conflict` when `expect` is given and is not the count held."""

        def checked(held: int) -> list[bytes]:
            if expect is not None and expect != held:
                raise conflict(conversation, held, expect)
            return lines(held)

        return checked

    def _read_params(self, conversation: str, after: int, limit: int | None = None) -> dict[str, Any]:
        """The read's parameters; a NULL limit reads to the end."""
        bound = None if limit is None else max(int(limit), 0)
        return {"c": check_id(conversation), "after": max(int(after or 0), 0), "limit": bound}


# ----- the pools' check: an idle connection may have died with a restart of the server


def spoke(conn: psycopg.BaseConnection[Any]) -> bool:
    """Whether the server sent something on an idle connection (or closed it), without a round trip.

    A server that ends a connection (a restart, a crash) sends its last error and closes the socket,
    which makes it readable; a live idle connection's socket is quiet (pooled connections LISTEN to
    nothing). A poll costs a system call where a round trip costs as much as a small read.
    """
    if conn.closed:
        return True
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    return bool(poller.poll(0))


def checked(pool: Callable[[], ConnectionPool[Any]]) -> Callable[[psycopg.Connection[Any]], None]:
    """The `check` of the pool `pool()` returns: a connection the server `spoke` on must answer a
    round trip, or is discarded and another taken (the first read after a restart succeeds).

    One dead connection means the server restarted and the other idle ones died with it: they are
    all checked at once, so the pool's pause between failed checks (a second, doubling) comes once,
    not once per dead connection.
    """

    def check(conn: psycopg.Connection[Any]) -> None:
        if not spoke(conn):
            return
        try:
            ConnectionPool.check_connection(conn)
        except psycopg.Error:
            pool().check()
            raise

    return check


def async_checked(
    pool: Callable[[], AsyncConnectionPool[Any]],
) -> Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]]:
    """`checked` for an `AsyncConnectionPool`."""

    async def check(conn: psycopg.AsyncConnection[Any]) -> None:
        if not spoke(conn):
            return
        try:
            await AsyncConnectionPool.check_connection(conn)
        except psycopg.Error:
            await pool().check()
            raise

    return check


# ----- the steps around the statements


def conflict(conversation: str, held: int, expect: int) -> ThreadlineError:
    """The `store-conflict` of a conditional append that found `held` records, not `expect`."""
    return ThreadlineError(
        ErrorCode.STORE_CONFLICT,
        f"conversation {conversation} holds {held} records, not {expect}: read again and retry",
        expected=expect,
        found=held,
    )


def numbered(batch: Sequence[dict[str, Any]], held: int) -> list[bytes]:
    """A checked batch as the lines a FolderStore writes after `held` records (newlines removed)."""
    return [encode(record, held + i + 1)[:-1] for i, record in enumerate(batch)]


def columns(lines: Sequence[bytes]) -> tuple[list[str | None], list[bytes | None]]:
    """The `line` and `raw` columns of `lines`: UTF-8 text in `line`, anything else byte for byte in `raw`."""
    texts: list[str | None] = []
    raws: list[bytes | None] = []
    for line in lines:
        text = _text(line)
        texts.append(text)
        raws.append(None if text is not None else bytes(line))
    return texts, raws


def _text(line: bytes) -> str | None:
    if b"\0" in line:
        return None  # PostgreSQL text cannot hold NUL
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return None


def add_params(conversation: str, held: int, lines: Sequence[bytes], channel: str) -> dict[str, Any]:
    """The parameters of `Queries.add` for `lines` appended after `held` records."""
    texts, raws = columns(lines)
    return {"c": conversation, "n": held, "lines": texts, "raws": raws, "channel": channel}


def raw_line(row: tuple[str | None, bytes | None]) -> bytes:
    """A stored line's exact bytes, from its `line` or `raw` column."""
    text, raw = row
    return text.encode("utf-8") if text is not None else bytes(raw or b"")


def parse_row(row: tuple[str | None, bytes | None]) -> dict[str, Any]:
    """A stored line as FolderStore reads it: the JSON object, or `{"unreadable": true}`."""
    text = row[0]
    value: Any
    try:
        value = json.loads(text) if text is not None else None
    except ValueError:
        value = None
    if value is None:
        # FolderStore parses bytes, which also accepts what a str cannot hold (a UTF-8 BOM).
        try:
            value = json.loads(raw_line(row))
        except ValueError:
            return {"unreadable": True}
    return value if isinstance(value, dict) else {"unreadable": True}


def unavailable(err: psycopg.OperationalError) -> ThreadlineError:
    """The retryable `store-unavailable` for a connection failure (no URL, no server message: they may hold secrets)."""
    state = f", SQLSTATE {err.sqlstate}" if err.sqlstate else ""
    return ThreadlineError(
        ErrorCode.STORE_UNAVAILABLE,
        f"the PostgreSQL store cannot be reached ({type(err).__name__}{state}): check the server and the store URL, "
        "then retry",
        retryable=True,
    )


@contextmanager
def reachable() -> Iterator[None]:
    """Turn a connection failure inside the block into `store-unavailable`."""
    try:
        yield
    except psycopg.OperationalError as err:
        raise unavailable(err) from None
