"""The call log of a PostgreSQL store: the same lines as a call-log folder, in one table.

A functai process reads a call log only from a folder, so with a PostgreSQL store the call log is
Threadline's to read (`rated`) and write (`write_call`, `rate`), and `lines()` gives it for a copy
into a folder functai reads (`call_folder(path).write(log.lines())`). Each line is kept as its
exact text (migration 0003), so a copy in either direction is byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import psycopg
from psycopg import sql

from core.errors import ErrorCode, ThreadlineError
from store.records import Record

from .lines import Logged, parse


class Connections(Protocol):
    """Where a call log takes its connections: a `PostgresStore`, or a worker's `PostgresStreams`
    (which opens its store on first use and shares it with the call log)."""

    @property
    def schema(self) -> str:
        """The store's schema."""
        ...

    def connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A pooled connection (autocommit), a connection failure in the block `store-unavailable`."""
        ...


class PostgresCallLog:
    """The `call_log` table of a PostgreSQL store's schema.

    Args:
        store: The store whose connections and schema it uses (it stays its owner's to close).
    """

    local = False

    def __init__(self, store: Connections) -> None:
        self.store = store
        self.where = f"postgresql schema {store.schema}"

        def render(text: str) -> bytes:
            return sql.SQL(text).format(s=sql.Identifier(store.schema)).as_bytes(None)

        self._add = render(
            "INSERT INTO {s}.call_log (call, at, line) SELECT * FROM unnest(%(calls)s::text[], %(ats)s::text[], "
            "%(lines)s::text[])"
        )
        self._read = render("SELECT line FROM {s}.call_log WHERE at >= %(since)s ORDER BY position")
        self._find = render("SELECT line FROM {s}.call_log WHERE call = %(call)s ORDER BY position")
        self._remove = render(
            "WITH gone AS (DELETE FROM {s}.call_log WHERE call = ANY(%(calls)s::text[]) RETURNING 1) "
            "SELECT count(*) FROM gone"
        )

    def __repr__(self) -> str:
        return f"<PostgresCallLog schema={self.store.schema}>"

    def write(self, lines: Sequence[bytes], *, durable: bool = False) -> None:
        """Append whole lines in one transaction (every commit is durable: `durable` changes nothing).

        Raises:
            ThreadlineError: `record-invalid` for a line that is not a call record or a rating,
                `store-unavailable` when the database cannot be reached.
        """
        if not lines:
            return
        params: dict[str, list[Any]] = {"calls": [], "ats": [], "lines": []}
        for line in lines:
            call, at = _about(line)
            params["calls"].append(call)
            params["ats"].append(at)
            params["lines"].append(line.rstrip(b"\n").decode("utf-8"))
        with self.store.connection() as conn:
            conn.execute(self._add, params)

    def read(self, *, since: str = "") -> Logged:
        """Every call and rating (calls and ratings before `since` left out)."""
        with self.store.connection() as conn:
            rows = conn.execute(self._read, {"since": since}).fetchall()
        return parse((str(row[0]) for row in rows), since=since)

    def find(self, call: str) -> Record | None:
        """The record of `call` (of its highest writer), or None."""
        with self.store.connection() as conn:
            rows = conn.execute(self._find, {"call": call}).fetchall()
        found = parse(str(row[0]) for row in rows).calls
        return found[-1] if found else None

    def remove(self, calls: Collection[str]) -> int:
        """Delete the lines about `calls` (their call records and ratings); return how many.

        Only Threadline writes this table, one call record per turn with the turn's id, so a turn's
        lines are found by the `call` column alone.
        """
        with self.store.connection() as conn:
            row = conn.execute(self._remove, {"calls": sorted(calls)}).fetchone()
        return int(row[0]) if row else 0

    def lines(self) -> list[bytes]:
        """Every line, in order, as a call-log folder holds it (newline included)."""
        with self.store.connection() as conn:
            rows = conn.execute(self._read, {"since": ""}).fetchall()
        return [str(row[0]).encode("utf-8") + b"\n" for row in rows]


def _about(line: bytes) -> tuple[str, str]:
    """The call a line is about and when, from its record."""
    try:
        rec = json.loads(line)
    except ValueError:
        rec = None
    if isinstance(rec, dict) and "functai_call" in rec:
        return str(rec.get("id")), str(rec.get("started") or "")
    if isinstance(rec, dict) and "functai_rating" in rec:
        return str(rec.get("call")), str(rec.get("at") or "")
    message = "a call log holds call records and ratings only; nothing was written"
    raise ThreadlineError(ErrorCode.RECORD_INVALID, message)
