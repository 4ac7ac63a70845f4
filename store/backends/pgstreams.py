"""Per-turn text streams in a PostgreSQL store: `StreamLog`'s interface over the store's `streams` table.

The events are store/backends/streams.py's (`start`, `text`, `restart`, `end`, each stamped with the try's
`attempt` and `run`), kept as the same JSON lines, one row each. A turn's events are numbered 1, 2,
... in commit order (a second writer of the same turn waits for the first's row, then takes the
next number), so the number of the last event read is the offset a reader reconnects from, as the
byte offset is for a stream file. `StreamReader` folds them unchanged.
"""

from __future__ import annotations

import asyncio
import json
import queue
import secrets
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from core.errors import ErrorCode, ThreadlineError
from core.logs import get_logger

from .base import DEFAULT_SCHEMA, check_id
from .pgsql import Row
from .postgres import PostgresStore

logger = get_logger(__name__)

_TRIES = 100
"""Attempts to number an event when other writers of the turn keep taking the next number first."""


class PostgresStreamLog:
    """The streams of one PostgreSQL store (the `StreamLog` of a folder store)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    def writer(self, turn: str, attempt: int) -> PostgresStreamWriter:
        """A writer for one attempt at `turn`; it marks the attempt's start at once. Close it."""
        writer = PostgresStreamWriter(self.store, check_id(turn), attempt, secrets.token_hex(4))
        writer.write({"start": True})
        return writer

    def read(self, turn: str, offset: int = 0) -> list[tuple[int, dict[str, Any]]]:
        """The events after event number `offset`, each with its own number (the offset after it)."""
        params = {"t": check_id(turn), "after": max(int(offset), 0)}
        with self.store.connection() as conn:
            rows = conn.execute(self.store.queries.stream_read, params).fetchall()
        events = []
        for position, line in rows:
            try:
                events.append((int(position), json.loads(line)))
            except ValueError:
                continue
        return events

    def remove(self, turns: Sequence[str]) -> int:
        """Remove the streams of `turns`; return how many turns had one."""
        params = {"turns": [check_id(turn) for turn in turns]}
        with self.store.connection() as conn:
            row = conn.execute(self.store.queries.stream_remove, params).fetchone()
        return int(row[0]) if row else 0


def add_event(conn: psycopg.Connection[Row], store: PostgresStore, turn: str, line: str) -> None:
    """Insert `line` as the next event of `turn`, taking the next number again when another writer took it."""
    params = {"t": turn, "line": line}
    for _ in range(_TRIES):
        if conn.execute(store.queries.stream_add, params).fetchone() is not None:
            return
    raise ThreadlineError(
        ErrorCode.STORE_CONFLICT,
        f"the stream of turn {turn} had no free event number after {_TRIES} tries: write again",
        retryable=True,
    )


class _AttemptEvents:
    """What both writers of an attempt's events share: the stored line, text pieces, the end."""

    __slots__ = ()
    attempt: int
    run: str

    def stamped(self, event: dict[str, Any]) -> str:
        """`event` as its stored line, stamped with this try's attempt and run."""
        stamped = {"attempt": self.attempt, "run": self.run, **event}
        return json.dumps(stamped, ensure_ascii=False, separators=(",", ":"))

    def write(self, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to release by default."""

    async def written(self) -> None:
        """Nothing to wait for by default: each event is stored before `write` returns."""

    def text(self, piece: str) -> None:
        """Write a piece of text."""
        if piece:
            self.write({"text": piece})

    def end(self, state: str) -> None:
        """Mark the attempt's end (`done`, `failed`, `stopped`, `yielded`)."""
        self.write({"end": state})
        self.close()


@dataclass(slots=True)
class PostgresStreamWriter(_AttemptEvents):
    """Appends one attempt's events, one row each (the `StreamWriter` of a folder store); each write
    takes a pooled connection and gives it back."""

    store: PostgresStore
    turn: str
    attempt: int
    run: str

    def write(self, event: dict[str, Any]) -> None:
        """Append `event` for this try, numbered after the turn's last event."""
        with self.store.connection() as conn:
            add_event(conn, self.store, self.turn, self.stamped(event))


_BATCH = 256
"""The most events one transaction of the sending thread writes."""
WRITTEN_WAIT_S = 10.0
"""How long a try waits for its stream's events to be written before it answers anyway (a stream
is a view: a database that does not take them does not hold up the turn for longer)."""


class PostgresStreams:
    """A PostgreSQL store's streams as the worker and clients use them: the store is opened on first
    use, and writes go through a thread of their own, so a model call streaming from the event loop
    never waits for the database (a stream is a view: a write that fails is logged and dropped).

    Args:
        url: The database's libpq URL.
        schema: The store's schema.
        max_size: The most connections its pool opens.
    """

    def __init__(self, url: str, *, schema: str = DEFAULT_SCHEMA, max_size: int = 4) -> None:
        self.url, self.schema, self._max_size = url, schema, max_size
        self._guard = threading.Lock()
        self._log: PostgresStreamLog | None = None
        self._queue: queue.SimpleQueue[tuple[QueuedStreamWriter, dict[str, Any]] | None] = queue.SimpleQueue()
        self._sender: threading.Thread | None = None
        self._pending = 0
        self._drained = threading.Condition(self._guard)

    def __repr__(self) -> str:
        return f"<PostgresStreams schema={self.schema}>"

    def opened(self) -> PostgresStreamLog:
        """The stream log, its store opened now if it was not yet (blocking)."""
        with self._guard:
            if self._log is None:
                self._log = PostgresStreamLog(PostgresStore(self.url, schema=self.schema, max_size=self._max_size))
            return self._log

    def writer(self, turn: str, attempt: int) -> QueuedStreamWriter:
        """A writer for one attempt at `turn`; its start is queued at once. Nothing here blocks."""
        writer = QueuedStreamWriter(self, check_id(turn), attempt, secrets.token_hex(4))
        writer.write({"start": True})
        return writer

    def read(self, turn: str, offset: int = 0) -> list[tuple[int, dict[str, Any]]]:
        """See `PostgresStreamLog.read` (blocking: call it from a thread)."""
        return self.opened().read(turn, offset)

    def remove(self, turns: Sequence[str]) -> int:
        """See `PostgresStreamLog.remove` (events still queued for those turns are written first)."""
        self.flush()
        return self.opened().remove(turns)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Row]]:
        """A connection of the store's pool, opened now if it was not yet (blocking): what a worker's
        call log writes through, so that a store has one blocking pool and one owner closing it."""
        with self.opened().store.connection() as conn:
            yield conn

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued event is written (or dropped); return whether that happened in time."""
        with self._drained:
            return self._drained.wait_for(lambda: self._pending == 0, timeout)

    def close(self) -> None:
        """Write what is queued, stop the thread and close the store."""
        with self._guard:
            sender, self._sender = self._sender, None
        if sender is not None:
            self._queue.put(None)
            sender.join(timeout=10)
        with self._guard:
            log, self._log = self._log, None
        if log is not None:
            log.store.close()

    def put(self, writer: QueuedStreamWriter, event: dict[str, Any]) -> None:
        """Queue `event` of `writer` for the sending thread (started on first use)."""
        with self._guard:
            self._pending += 1
            writer.pending += 1
            if self._sender is None:
                self._sender = threading.Thread(target=self._send, name="threadline-stream-writer", daemon=True)
                self._sender.start()
        self._queue.put((writer, event))

    def _send(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < _BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(item)
            self._write(batch)

    def _write(self, batch: list[tuple[QueuedStreamWriter, dict[str, Any]]]) -> None:
        try:
            log = self.opened()
            # By turn (each turn's events keep their order): two senders of the same turns then take
            # their row locks in the same order and never deadlock.
            with log.store.connection() as conn, conn.transaction():
                for writer, event in sorted(batch, key=lambda item: item[0].turn):
                    add_event(conn, log.store, writer.turn, writer.stamped(event))
        except (ThreadlineError, psycopg.Error) as err:
            logger.warning("stream.write_failed", error=type(err).__name__, events=len(batch))
        finally:
            with self._drained:
                self._pending -= len(batch)
                for writer, _ in batch:
                    writer.pending -= 1
                self._drained.notify_all()

    def wait_written(self, writer: QueuedStreamWriter, timeout: float = WRITTEN_WAIT_S) -> bool:
        """Wait until every event queued for `writer` is written (or dropped); return whether in time."""
        with self._drained:
            return self._drained.wait_for(lambda: writer.pending == 0, timeout)


@dataclass(slots=True)
class QueuedStreamWriter(_AttemptEvents):
    """One attempt's events, handed to `PostgresStreams`' sending thread in order (which writes them)."""

    streams: PostgresStreams
    turn: str
    attempt: int
    run: str
    pending: int = 0
    """Its events queued and not yet written (counted under the streams' lock)."""

    def write(self, event: dict[str, Any]) -> None:
        """Queue `event` for this try."""
        self.streams.put(self, event)

    async def written(self) -> None:
        """Wait (in a thread) until the sending thread has written this try's events, up to `WRITTEN_WAIT_S`."""
        if self.pending:
            await asyncio.to_thread(self.streams.wait_written, self)
