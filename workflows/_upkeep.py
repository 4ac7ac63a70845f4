"""Upkeep of a conversation workflow: its idle clock and its search attributes.

A composed object with explicit inputs: the workflow tells it when work happened, whether it is
idle and what its attributes are; it owns one durable timer per idle period and decides when the
attributes are written: at most once per interval (`attributes_every_s`), at once when a turn ends
with nothing else to do and the interval has passed, else by one timer at the interval's end (one
timer per interval, whatever number of turns it holds); a run hands them to the next in its
continue-as-new (no write of its own).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributePair, SearchAttributeUpdate, TypedSearchAttributes

with workflow.unsafe.imports_passed_through():
    from core.models import ConversationConfig, TurnOutcome

    from ._details import current_details
    from ._patches import lean, leanest, since
    from .attributes import STATE_KEY, TURNS_KEY, UPDATED_KEY

Attributes = tuple[str, int]
"""What the search attributes show: the state (`running` or `idle`) and the turn count."""
UPDATED = "attribute-updated"
"""Runs from before it publish no `ThreadlineUpdated`."""
QUIET_PUBLISH = "publish-when-quiet"
"""Runs from before it waited on a timer to publish the attributes after a burst of turns."""


class Upkeep:
    """The idle clock and the search attributes of one conversation workflow run."""

    def __init__(self, config: ConversationConfig) -> None:
        self.idle_limit = timedelta(seconds=config.idle_timeout_s)
        self.enabled = config.search_attributes
        self.every = timedelta(seconds=config.attributes_every_s)
        self.active = workflow.now()
        self.closing = False
        self.published = workflow.now() - self.every
        self.shown: Attributes | None = None
        self._clock: asyncio.Task[None] | None = None
        self.later = leanest()
        """Writes within an interval wait for its end on one timer; continue-as-new hands them on."""
        self._writing: asyncio.Task[None] | None = None
        if self.later and self.enabled:
            found = workflow.info().typed_search_attributes
            state, turns = found.get(STATE_KEY), found.get(TURNS_KEY)
            if state is not None and turns is not None:  # written by the run before, or its starter
                self.shown, self.published = (state, turns), workflow.now()

    def touch(self) -> None:
        """Work happened now: the idle period starts again."""
        self.active = workflow.now()

    def restart_clock(self, is_idle: Callable[[], bool]) -> None:
        """Start counting the idle time again (after it fired, or when closing was called off)."""
        self.closing = False
        self._clock = asyncio.create_task(self._idle_clock(is_idle))

    def clock_fired(self) -> bool:
        """Whether the idle clock ran out (it asked to close)."""
        return self._clock is not None and self._clock.done()

    async def _idle_clock(self, is_idle: Callable[[], bool]) -> None:
        """One durable timer per idle period (not one per turn): sleep until the conversation has had
        nothing to do for its idle time, then ask the main loop to close."""
        while True:
            left = self.idle_limit - (workflow.now() - self.active) if is_idle() else self.idle_limit
            if left <= timedelta(0):
                self.closing = True
                return
            await workflow.sleep(left, summary="idle close")

    def ended(
        self, outcome: TurnOutcome, inputs: Mapping[str, object] | None, current: Callable[[], Attributes]
    ) -> None:
        """A turn ended: the idle period starts again, and the UI shows the exchange and the attributes.

        Runs with `later` keep the attributes up (`keep_up`). Runs before it wrote them now when
        nothing else ran or waited: a burst was over, and a timer to write them later would cost the
        history two events (started, then cancelled by the next send) where this write cost one."""
        self.touch()
        attributes = current()
        workflow.set_current_details(current_details(attributes[1], outcome, inputs))
        if self.later:
            self.keep_up(current)
            return
        quiet = attributes[0] == "idle" and self.enabled and attributes != self.shown
        self.publish(attributes, force=quiet and since(QUIET_PUBLISH))

    def keep_up(self, current: Callable[[], Attributes]) -> None:
        """Bring the attributes up to date once nothing runs or waits: at once when the interval has
        passed (a conversation at a person's pace writes as each turn ends), else at the interval's
        end, from a timer no send cancels (turns in a row cost it one timer, not a write each). While
        a turn runs, its end asks again."""
        attributes = current()
        if not self.enabled or attributes == self.shown:
            return
        left = self.published + self.every - workflow.now()
        if left > timedelta(0):
            if self._writing is None or self._writing.done():
                self._writing = asyncio.create_task(self._write_later(left, current))
        elif attributes[0] == "idle":
            self.publish(attributes)

    async def _write_later(self, left: timedelta, current: Callable[[], Attributes]) -> None:
        await workflow.sleep(left, summary="attributes")
        self._writing = None
        self.keep_up(current)

    def handed_on(self, attributes: Attributes) -> TypedSearchAttributes | None:
        """Before continuing as new: the search attributes the next run starts with (None: the run's
        own, as they are), with `attributes` and the time of the last activity in them. Runs before
        `later` write them here instead, and hand on their own."""
        if not self.later:
            self.publish(attributes, force=True)
            return None
        if not self.enabled or attributes == self.shown:
            return None
        changed = {update.key.name: update for update in self._changed(attributes)}
        pairs = [p for p in workflow.info().typed_search_attributes.search_attributes if p.key.name not in changed]
        pairs += [SearchAttributePair(u.key, u.value) for u in changed.values() if u.value is not None]
        return TypedSearchAttributes(pairs)

    @staticmethod
    async def drained(arrived: Callable[[], bool]) -> None:
        """The drain rule: wait for the handlers to finish, unless new work `arrived` (only this run can do it)."""
        await workflow.wait_condition(lambda: workflow.all_handlers_finished() or arrived())

    def publish(self, attributes: Attributes, *, force: bool = False) -> None:
        """Upsert the search attributes, at most once per interval of workflow time (each is a
        visibility write), and always when forced (before the run closes or continues as new)."""
        if not self.enabled or attributes == self.shown:
            return
        if not force and workflow.now() - self.published < self.every:
            return
        workflow.upsert_search_attributes(self._changed(attributes))
        self.published, self.shown = workflow.now(), attributes

    def _changed(self, attributes: Attributes) -> list[SearchAttributeUpdate[Any]]:
        """The attributes to write: with `LEAN`, only those that differ from what this run showed (an
        idle conversation's next turn writes its count and time, not its state again)."""
        (state, turns), shown = attributes, self.shown if lean() else None
        updates: list[SearchAttributeUpdate[Any]] = []
        if shown is None or shown[0] != state:
            updates.append(STATE_KEY.value_set(state))
        if shown is None or shown[1] != turns:
            updates.append(TURNS_KEY.value_set(turns))
        if since(UPDATED):
            updates.append(UPDATED_KEY.value_set(self.active))
        return updates

    def stale(self, attributes: Attributes, *, idle: bool) -> bool:
        """Whether an idle conversation's attributes show something else than it is, and the main loop
        must write them (in runs with `later`, a timer of `keep_up` does)."""
        return self.enabled and idle and attributes != self.shown and not self.later

    async def publish_when_quiet(
        self, current: Callable[[], Attributes], *, is_idle: Callable[[], bool], has_work: Callable[[], bool]
    ) -> None:
        """Once a burst of turns is over, bring the attributes up to date (one timer per burst, not
        one per turn), unless work arrives first; in runs with `later`, `keep_up`."""
        if self.later:
            self.keep_up(current)
            return
        if not self.stale(current(), idle=is_idle()):
            return
        left = self.every - (workflow.now() - self.published)
        if left > timedelta(0):
            try:
                await workflow.wait_condition(has_work, timeout=left, timeout_summary="publish attributes")
                return
            except TimeoutError:
                pass
        self.publish(current(), force=True)
