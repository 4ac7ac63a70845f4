"""One conversation's record log as an activity sees it: incremental reads off the event loop,
and the conditional appends that decide something (an end, a claim)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from core.errors import ErrorCode, ThreadlineError
from core.models import TurnError, TurnOutcome
from store.base import READ_BATCH, Store
from store.log import Log, Turn
from store.records import Record


class LogView:
    """A store and one conversation, read incrementally into a `Log` (blocking I/O in threads)."""

    def __init__(self, store: Store, conversation: str) -> None:
        self.store = store
        self.conversation = conversation
        self.log = Log()
        self._reading = asyncio.Lock()  # views are shared by activities: apply each record once

    async def read(self) -> Log:
        """Apply the records appended since the last read (a long log a bounded batch at a time)."""
        async with self._reading:
            after = self.log.n
            while True:
                records = await asyncio.to_thread(self.store.read, self.conversation, after, limit=READ_BATCH)
                self.log.apply(records)
                after += len(records)
                if len(records) < READ_BATCH:
                    break
        return self.log

    async def append(self, records: Sequence[Record], *, expect: int | None = None) -> int:
        """Append `records` (conditionally with `expect`)."""
        return await asyncio.to_thread(self.store.append, self.conversation, list(records), expect=expect)

    async def turn(self, turn: str) -> Turn:
        """The turn as the log says now.

        Raises:
            ThreadlineError: `turn-unknown`.
        """
        log = await self.read()
        found = log.turns.get(turn)
        if found is None:
            raise ThreadlineError(ErrorCode.TURN_UNKNOWN, f"turn {turn} is not in conversation {self.conversation}")
        return found

    async def append_if(self, turn: str, build: Callable[[Log, Turn], list[Record] | None]) -> Turn:
        """Append what `build` decides from the current log, on exactly that log (re-decided on conflict).

        `build` returns None to append nothing. Returns the turn as it reads after the append.
        """
        while True:
            t = await self.turn(turn)
            records = build(self.log, t)
            if not records:
                return t
            try:
                await self.append(records, expect=self.log.n)
            except ThreadlineError as err:
                if err.code != ErrorCode.STORE_CONFLICT:
                    raise
                continue
            return await self.turn(turn)


def outcome_of(t: Turn, request_id: str) -> TurnOutcome | None:
    """The outcome of a turn that ended, from its `ended` record (None while it has not)."""
    ended = t.ended
    if ended is None:
        return None
    error: Any = ended.get("error")
    state = ended.get("state", "failed")
    return TurnOutcome(
        request_id=request_id,
        turn=t.id,
        parent=t.parent,
        state=state if state in ("done", "failed", "stopped", "abandoned") else "failed",
        outputs=ended.get("outputs") if state == "done" else None,
        result=ended.get("value", (ended.get("outputs") or {}).get("result")) if state == "done" else None,
        model=ended.get("model"),
        usage={k: v for k, v in (ended.get("usage") or {}).items() if isinstance(v, int)},
        seconds=ended.get("seconds"),
        error=_error(error) if state != "done" else None,
    )


def _error(error: Any) -> TurnError:
    if not isinstance(error, dict):
        return TurnError(code="internal", message="the turn ended without an error record")
    code = error.get("code") or ("turn-state" if error.get("type") == "Cancelled" else "internal")
    return TurnError(code=str(code), message=str(error.get("message") or error.get("type") or ""))


def now() -> float:
    """The wall clock, for lease and state decisions (activities may read it; workflows may not)."""
    return time.time()
