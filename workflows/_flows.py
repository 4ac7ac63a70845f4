"""Guided flows in a conversation's workflow: starting one, taking messages as its answers, its
durable timers (a reminder, an expiry), stopping it, and what it counts. Deterministic; every side
effect is an activity of `activities.flows` (see `_calls`).

A flow's progress lives in the record log (`store.flows.progress`). The workflow keeps only where the flow
stands (its latest `FlowResult`), since when, and the counts, and reads them back from the log
(`read_flow`) when a run starts, so a continued or reopened run goes on at the same step; a run that
continued as new takes them from its input instead, when the run before knew them as the log has
them (`carried`). A send
is a flow's when it starts one (`TurnSend.flow`) or, while a flow is active, when its inputs are
one `message` and it names no place of its own (`continue_from`, `root`). Timers are keyed by the
flow's `(run, moves)`: a move cancels them, and a timer whose moment the log no longer agrees
with does nothing. They cost no worker while they wait.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Literal

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.flows import FlowActivities
    from core.models import (
        ConversationRef,
        FlowAnswer,
        FlowCount,
        FlowRef,
        FlowResult,
        FlowStart,
        FlowStatus,
        TurnError,
        TurnOutcome,
        TurnSend,
    )
    from core.temporal import from_failure

    from . import _calls
    from ._patches import since
    from ._state import RunState
    from .attributes import FLOW_KEY, FLOW_STATE_KEY

FLOWS = "guided-flows"
"""Runs from before flows do not read them back from the log."""
Timer = Literal["remind", "expire"]
_ENDS = ("completed", "abandoned", "handed_off")


def message_of(send: TurnSend) -> str | None:
    """The send's text when its inputs are one `message` (what a flow may take), else None."""
    message = send.inputs.get("message")
    return message if isinstance(message, str) and len(send.inputs) == 1 else None


def outcome_of(send: TurnSend, result: FlowResult) -> TurnOutcome:
    """The send's outcome when a flow answered it: the flow's response is the turn's `result`."""
    text = result.response or ""
    return TurnOutcome(
        request_id=send.request_id,
        turn=result.turn,
        parent=result.parent,
        state="done",
        outputs={"result": text},
        result=text,
        model=f"flow:{result.flow}",
        flow=result,
    )


_STANDING = {"flow", "run", "state", "step", "moves", "remind_after_s", "expire_after_s"}
"""What of a flow's latest result `read_flow` reads back: where it stands, not what it last said."""


class Flows:
    """The guided flow of one conversation run, offered each send first (see `_admission`)."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.current: FlowResult | None = None
        self.counts: dict[str, FlowCount] = {}
        self.since = workflow.now()
        """When the flow reached its current `(run, moves)`: its timers count from here."""
        self.due: Timer | None = None
        self.fired: set[tuple[str | None, int, Timer]] = set()
        self.restored = False
        self.unread = False
        """The run left its first read of the flow to its first send's step (`_turns.Turns.opening`): until
        it answers, the flow takes no send (that send is offered again if the log held a flow)."""
        self.agreed = True
        """The log agreed with every flow step of this run: what it knows is what `read_flow` would read."""
        self.shown: tuple[str, str] | None = None
        self._clock: asyncio.Task[None] | None = None

    def active(self) -> bool:
        """Whether a flow is asking (the conversation's messages are its answers)."""
        return self.current is not None and self.current.state == "active"

    def armed(self) -> bool:
        """Whether a timer of the active flow waits (the conversation must not close meanwhile)."""
        return self._next() is not None

    def status(self) -> FlowStatus:
        """The `flows` query: where the flow stands (its latest response: a prompt or a reminder), and the counts."""
        return FlowStatus(current=self.current or FlowResult(), counts=dict(self.counts))

    # ----- sends

    async def take(self, send: TurnSend) -> bool:
        """Let the flow take the first queued send, a flow's start or answer: True when it did
        (answered, or refused with a coded error), False for anything else (placed as a turn)."""
        mine = send.flow is not None or (message_of(send) is not None and not (send.continue_from or send.root))
        if not mine or self.state.seen(send.request_id):
            return False  # the turn table answers a repeated request id
        if self.unread:
            return False  # its step looks for a flow in the log, and hands the send back if it finds one
        try:
            await self.restore()
            result = await self._ask(send)
        except ApplicationError as err:
            self.agreed = False  # it may have written before it failed (a flow whose code failed does)
            self.state.drop_first()
            refused = TurnOutcome(request_id=send.request_id, state="refused", error=TurnError.of(from_failure(err)))
            self.state.finish(refused)
            return True
        if result is not None and (result.existing or not result.in_flow):
            self.agreed = False  # counted before (or never, if a lost task wrote it), or the log moved on
        if result is None or not result.in_flow:
            return False  # no flow took it: placed as a normal turn, with the same request id
        self.state.drop_first()
        self._take(result)
        self.state.finish(outcome_of(send, result), new=not result.existing, inputs=send.inputs)
        return True

    async def _ask(self, send: TurnSend) -> FlowResult | None:
        config, message = self.state.config, message_of(send)
        about = {"store": config.store, "conversation": config.conversation, "store_id": config.store_id}
        if send.flow is not None:
            start = FlowStart(**about, flow=send.flow, request_id=send.request_id, message=message or "")
            return await _calls.quick(FlowActivities.start_flow, start, summary=f"start flow {send.flow}")
        if not self.active() or message is None or self.current is None:
            return None
        lm = send.lm or config.lm
        answer = FlowAnswer(**about, request_id=send.request_id, message=message, flow=self.current.flow, lm=lm)
        summary = f"flow {self.current.flow}: {self.current.step}"
        return await _calls.model(FlowActivities.flow_step, answer, summary=summary)

    async def begin(self, carried: FlowStatus | None = None) -> None:
        """At the start of a run: take the flow the run before carried, or read it back, so a continued or
        reopened run answers and times it as before; a store that cannot be read now is read again
        before the first send."""
        if carried is not None:
            self._restored(carried)
            return
        try:
            await self.restore()
        except ApplicationError as err:
            workflow.logger.warning("reading the flow failed; it is read again later", extra={"code": err.type})

    async def restore(self) -> None:
        """Read the flow and its counts back from the log, once per run (runs from before flows never do)."""
        if self.restored or not since(FLOWS):
            return
        config = self.state.config
        ref = ConversationRef(store=config.store, conversation=config.conversation, store_id=config.store_id)
        self._restored(await _calls.quick(FlowActivities.read_flow, ref, summary="read flow"))

    def defer(self) -> None:
        """Leave the first read of the flow to the run's first send's step (`unread`)."""
        self.unread = True

    def opened(self) -> None:
        """The first send's step found no flow in the log: what `read_flow` would have read back."""
        if not self.restored:
            self._restored(FlowStatus(current=FlowResult()))

    def _restored(self, found: FlowStatus) -> None:
        """Where the flow stands and its counts, read back or carried: its timers count from now, as after a read."""
        self.restored = True
        self.unread = False
        self.counts = dict(found.counts)
        if found.current.state is not None:
            self._take(found.current, count=False)

    def carried(self) -> FlowStatus | None:
        """What continue-as-new carries of the flow: where it stands and the counts, as `read_flow` would
        read them back (none of the last result's own fields: its text, its events); None, for the next
        run to read them, unless this run knew them and the log agreed with every step since."""
        if not (self.restored and self.agreed):
            return None
        now = self.current or FlowResult()
        current = FlowResult(in_flow=now.state == "active", **now.model_dump(include=_STANDING))
        return FlowStatus(current=current, counts=dict(self.counts))

    # ----- stops and timers

    async def stop(self) -> None:
        """Carry out a flow's stop (`StopSend.flow`): the active flow is abandoned `stopped`."""
        try:
            await self.restore()
        except ApplicationError as err:
            workflow.logger.warning("reading the flow failed", extra={"code": err.type})
            return
        if self.active() and self.current is not None:
            await self._act(FlowActivities.abandon_flow, self._ref(moves=None, reason="stopped"), "flow stop")

    async def fire(self) -> None:
        """Carry out the timer that ran out: send the prompt again, or abandon the flow (`expired`)."""
        kind, self.due = self.due, None
        if kind is None or self.current is None:
            return
        self.fired.add((self.current.run, self.current.moves, kind))
        ref = self._ref(moves=self.current.moves, reason="expired")
        if kind == "remind":
            await self._act(FlowActivities.remind_flow, ref, "flow reminder")
        else:
            await self._act(FlowActivities.abandon_flow, ref, "flow expiry")

    def _ref(self, *, moves: int | None, reason: Literal["expired", "stopped"]) -> FlowRef:
        """The current run, for a timer or a stop: its request id minted here, once (a retry carries it)."""
        config, run = self.state.config, self.current.run if self.current is not None else None
        return FlowRef(
            store=config.store,
            conversation=config.conversation,
            store_id=config.store_id,
            request_id=str(workflow.uuid4()),
            run=run or "",
            moves=moves,
            reason=reason,
        )

    async def _act(self, step: _calls.Step[FlowRef, FlowResult], ref: FlowRef, summary: str) -> None:
        """Remind or abandon; a result the log did not agree with (`in_flow` False) changes nothing."""
        try:
            result = await _calls.quick(step, ref, summary=summary)
        except ApplicationError as err:
            self.agreed = False
            workflow.logger.warning("a flow timer or stop failed", extra={"code": err.type})
            return
        if result.existing or not result.in_flow:
            self.agreed = False  # a retry's result is not counted again; a refused one: the log moved on
        if result.in_flow:
            self._take(result)

    def _next(self) -> tuple[timedelta, Timer] | None:
        """How long after `since` the active flow's next timer runs out, and which one."""
        now = self.current
        if now is None or now.state != "active":
            return None
        options: list[tuple[timedelta, Timer]] = []
        if now.remind_after_s is not None and (now.run, now.moves, "remind") not in self.fired:
            options.append((timedelta(seconds=now.remind_after_s), "remind"))
        if now.expire_after_s is not None and (now.run, now.moves, "expire") not in self.fired:
            options.append((timedelta(seconds=now.expire_after_s), "expire"))
        return min(options) if options else None

    def _key(self) -> tuple[object, ...]:
        now = self.current
        return (None,) if now is None else (now.run, now.moves, now.state, now.remind_after_s, len(self.fired))

    async def _tick(self) -> None:
        """One durable timer at a time: sleep until the next one runs out (a move cancels it), then
        hand it to the main loop (`due`), which carries it out in order with the sends."""
        while (upcoming := self._next()) is not None:
            key, (after, kind) = self._key(), upcoming

            def moved(before: tuple[object, ...] = key) -> bool:
                return self._key() != before

            left = self.since + after - workflow.now()
            if left > timedelta(0):
                try:
                    summary = f"flow {'reminder' if kind == 'remind' else 'expiry'}"
                    await workflow.wait_condition(moved, timeout=left, timeout_summary=summary)
                    continue
                except TimeoutError:
                    pass
            self.due = kind
            await workflow.wait_condition(lambda: self.due is None)
        self._clock = None

    # ----- what a result changes

    def _take(self, result: FlowResult, *, count: bool = True) -> None:
        """Where the flow stands after `result`: its timers, its counts and its search attributes."""
        before = self.current
        if before is None or (before.run, before.moves) != (result.run, result.moves):
            self.since = workflow.now()
        self.current = result
        if count and not result.existing:
            self._count(result, before.flow if before is not None else None)
        self._publish()
        if self._clock is None and self._next() is not None:
            self._clock = asyncio.create_task(self._tick())

    def _count(self, result: FlowResult, previous: str | None) -> None:
        """Count the entries a result wrote: starts, ends, and invalid answers by step."""
        events = result.events
        started = events.index("started") if "started" in events else len(events)
        for i, event in enumerate(events):
            name = str((previous if i < started and event == "abandoned" else None) or result.flow)
            count = self.counts.get(name) or FlowCount()
            if event == "invalid":
                step = str(result.step)
                count = count.model_copy(update={"invalid": {**count.invalid, step: count.invalid.get(step, 0) + 1}})
            elif event == "started" or event in _ENDS:
                count = count.model_copy(update={event: getattr(count, event) + 1})
            self.counts[name] = count

    def _publish(self) -> None:
        """Show the latest flow and its state in the search attributes (when they change: a start or an end)."""
        if not self.state.config.search_attributes or self.current is None:
            return
        shown = (self.current.flow or "", self.current.state or "")
        if shown != self.shown:
            workflow.upsert_search_attributes([FLOW_KEY.value_set(shown[0]), FLOW_STATE_KEY.value_set(shown[1])])
            self.shown = shown
