"""A send the store cannot take yet (`store-unavailable`: read-only, full, forbidden, unreachable)
stays first in the queue and is placed again after a pause, instead of being refused once the
placing step's own tries (about half a minute) are spent: it runs once the store is back. The main
loop goes on meanwhile (stops, timers), and after `KEPT_FOR` the send is refused with the code."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from core.errors import ErrorCode

    from ._calls import END_DEADLINE
    from ._patches import since

KEEP_UNPLACED = "keep-sends-the-store-cannot-take"
"""Runs from before refused such a send after the placing step's tries."""
KEPT_PAUSE = timedelta(seconds=5)
"""How long a kept send waits before it is placed again."""
KEPT_FOR = END_DEADLINE
"""How long a send is kept for a store that stays away: as long as a turn's end is (two hours)."""


class Kept:
    """The send kept for a store that is away, if any (only the first queued send is placed)."""

    def __init__(self) -> None:
        self.request_id: str | None = None
        self.since: datetime | None = None
        self._pause: asyncio.Task[None] | None = None

    def pausing(self) -> bool:
        """Whether a kept send waits for its next try now."""
        return self._pause is not None and not self._pause.done()

    def keep(self, request_id: str, err: ApplicationError) -> bool:
        """Keep the send `request_id` that `err` refused, if the store is only away and it was not kept
        for `KEPT_FOR` already; whether it is kept (then it is tried again after `KEPT_PAUSE`)."""
        if err.type != ErrorCode.STORE_UNAVAILABLE or not since(KEEP_UNPLACED):
            return False
        if self.request_id != request_id or self.since is None:
            self.request_id, self.since = request_id, workflow.now()
            workflow.logger.warning("send kept: the store cannot take it now", extra={"request_id": request_id})
        if workflow.now() - self.since > KEPT_FOR:
            self.forget()
            return False
        self._pause = asyncio.create_task(workflow.sleep(KEPT_PAUSE))
        return True

    def forget(self) -> None:
        """The send was placed or refused: nothing is kept."""
        self.request_id = self.since = None
