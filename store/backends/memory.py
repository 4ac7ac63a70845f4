"""A record log in process memory, for tests and short-lived work."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from typing import Any

from core.errors import ErrorCode, ThreadlineError
from store.records import with_seq
from store.values import copy_value

from .base import check_id, check_records, encode


class MemoryStore:
    """Conversations held in this process, with the same numbering and `expect` rule as `FolderStore`."""

    persistent = False

    def __init__(self) -> None:
        self._records: dict[str, list[dict[str, Any]]] = {}
        self._changed = threading.Condition()
        self._id = str(uuid.uuid4())

    def identity(self) -> str:
        """This store's id: new for every instance (it lives as long as the process)."""
        return self._id

    def append(self, conversation: str, records: Sequence[dict[str, Any]], *, expect: int | None = None) -> int:
        """Append `records` all or nothing; return the new count."""
        check_id(conversation)
        batch = check_records(records)
        for record in batch:
            encode(record, 0)  # refuse what a folder store could not write, before anything changes
        with self._changed:
            log = self._records.setdefault(conversation, [])
            if expect is not None and expect != len(log):
                raise ThreadlineError(
                    ErrorCode.STORE_CONFLICT,
                    f"conversation {conversation} holds {len(log)} records, not {expect}: read again and retry",
                    expected=expect,
                    found=len(log),
                )
            for record in batch:
                log.append(with_seq(copy_value(record), len(log) + 1))
            self._changed.notify_all()
            return len(log)

    def read(self, conversation: str, after: int = 0, *, limit: int | None = None) -> list[dict[str, Any]]:
        """Return copies of the records after position `after` (at most `limit` of them)."""
        check_id(conversation)
        first = max(after, 0)
        last = None if limit is None else first + max(limit, 0)
        with self._changed:
            return [copy_value(r) for r in self._records.get(conversation, [])[first:last]]

    def read_nowait(
        self, conversation: str, after: int = 0, *, limit: int | None = None
    ) -> list[dict[str, Any]] | None:
        """`read`: its lock is never held while waiting on anything, so a read on an event loop never waits."""
        return self.read(conversation, after, limit=limit)

    def wait(self, conversation: str, after: int, timeout: float) -> bool:
        """Block until more than `after` records are held or `timeout` seconds pass."""
        check_id(conversation)
        with self._changed:
            return self._changed.wait_for(lambda: len(self._records.get(conversation, [])) > after, timeout)

    def purge(self, conversation: str) -> int:
        """Remove `conversation`; return how many records it held (its id can be used again)."""
        check_id(conversation)
        with self._changed:
            return len(self._records.pop(conversation, []))

    def conversations(self) -> list[str]:
        """Return the ids of the conversations that hold records, sorted."""
        with self._changed:
            return sorted(c for c, log in self._records.items() if log)
