"""Per-turn text streams in a PostgreSQL store: `StreamLog`'s interface over the store's `streams` table.

The events are store/streams.py's (`start`, `text`, `restart`, `end`, each stamped with the try's
`attempt` and `run`), kept as the same JSON lines, one row each. A turn's events are numbered 1, 2,
... in commit order (a second writer of the same turn waits for the first's row, then takes the
next number), so the number of the last event read is the offset a reader reconnects from, as the
byte offset is for a stream file. `StreamReader` folds them unchanged.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from core.errors import ErrorCode, ThreadlineError

from .base import check_id
from .postgres import PostgresStore

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


@dataclass(slots=True)
class PostgresStreamWriter:
    """Appends one attempt's events, one row each (the `StreamWriter` of a folder store)."""

    store: PostgresStore
    turn: str
    attempt: int
    run: str

    def write(self, event: dict[str, Any]) -> None:
        """Append `event` for this try, numbered after the turn's last event."""
        stamped = {"attempt": self.attempt, "run": self.run, **event}
        params = {"t": self.turn, "line": json.dumps(stamped, ensure_ascii=False, separators=(",", ":"))}
        with self.store.connection() as conn:
            for _ in range(_TRIES):
                if conn.execute(self.store.queries.stream_add, params).fetchone() is not None:
                    return
        raise ThreadlineError(
            ErrorCode.STORE_CONFLICT,
            f"the stream of turn {self.turn} had no free event number after {_TRIES} tries: write again",
            retryable=True,
        )

    def close(self) -> None:
        """Nothing to release: each write takes a pooled connection and gives it back."""

    def text(self, piece: str) -> None:
        """Append a piece of text."""
        if piece:
            self.write({"text": piece})

    def end(self, state: str) -> None:
        """Mark the attempt's end (`done`, `failed`, `stopped`, `yielded`)."""
        self.write({"end": state})
        self.close()
