"""Upkeep of a conversation workflow: the idle clock and the search attributes.

Kept apart from `conversation.py` so the workflow reads as turn handling; these methods use
only the state declared below, which `ConversationWorkflow` sets up.
"""

from __future__ import annotations

import asyncio
from collections import deque
from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from core.models import ConversationConfig, TurnSend

    from .attributes import STATE_KEY, TURNS_KEY

ATTRIBUTES_EVERY = timedelta(seconds=10)
"""Search attributes are written at most this often (each is a visibility write)."""


class Upkeep:
    """The idle clock and the search attributes of `ConversationWorkflow`."""

    config: ConversationConfig
    pending: deque[TurnSend]
    tasks: dict[str, asyncio.Task[None]]
    turns: int
    active: datetime
    closing: bool
    published: datetime
    shown_attributes: tuple[str, int] | None

    def _idle(self) -> bool:
        raise NotImplementedError

    def _has_work(self) -> bool:
        raise NotImplementedError

    async def _idle_clock(self) -> None:
        """One durable timer per idle period (not one per turn): sleep until the conversation has
        had nothing to do for its idle time, then ask the main loop to close."""
        limit = timedelta(seconds=self.config.idle_timeout_s)
        while True:
            left = limit - (workflow.now() - self.active) if self._idle() else limit
            if left <= timedelta(0):
                self.closing = True
                return
            await workflow.sleep(left, summary="idle close")

    def _publish(self, *, force: bool = False) -> None:
        """Upsert the search attributes, at most every 10 s of workflow time (each is a visibility
        write), and always before the run closes or continues as new."""
        if not self.config.search_attributes or self._attributes() == self.shown_attributes:
            return
        if not force and workflow.now() - self.published < ATTRIBUTES_EVERY:
            return
        state, turns = self._attributes()
        workflow.upsert_search_attributes([STATE_KEY.value_set(state), TURNS_KEY.value_set(turns)])
        self.published, self.shown_attributes = workflow.now(), (state, turns)

    def _attributes(self) -> tuple[str, int]:
        return ("running" if self.tasks or self.pending else "idle"), self.turns

    def _stale_attributes(self) -> bool:
        return self.config.search_attributes and self._idle() and self._attributes() != self.shown_attributes

    async def _publish_when_quiet(self) -> None:
        """Once a burst of turns is over, bring the search attributes up to date (one timer per
        burst, not one per turn), unless work arrives first."""
        if not self._stale_attributes():
            return
        left = ATTRIBUTES_EVERY - (workflow.now() - self.published)
        if left > timedelta(0):
            try:
                await workflow.wait_condition(self._has_work, timeout=left, timeout_summary="publish attributes")
                return
            except TimeoutError:
                pass
        self._publish(force=True)
