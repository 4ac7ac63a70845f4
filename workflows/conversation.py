"""The Conversation workflow: one per conversation, deterministic orchestration only.

Signals deliver turns and stops (durable even while no worker runs); handlers only enqueue and
the main loop decides. Activities read and append the record log themselves, so the workflow
keeps only ids, counters, the pending queue and recent outcomes, and its history per turn stays
the same however long the conversation grows. Callers that want an answer wait with the `wait`
update; refusals reach them as coded errors.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.failures import turn_error
    from activities.turns import TurnActivities
    from core.models import (
        BeginInput,
        Begun,
        ConversationInput,
        ConversationStatus,
        PrepareResult,
        RunInput,
        RunResult,
        StopSend,
        TurnOutcome,
        TurnRef,
        TurnSend,
        WatchInput,
    )

    from ._details import current_details, slim
    from ._upkeep import ATTRIBUTES_EVERY, Upkeep

STORE_TIMEOUT = timedelta(seconds=30)
STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=5), maximum_attempts=10
)
"""Store activities retry a passing I/O failure for about half a minute, then the send fails `internal`."""
MODEL_CALL_TIMEOUT = timedelta(minutes=10)
"""The longest a model call may take; longer than any provider timeout."""
MODEL_HEARTBEAT_TIMEOUT = timedelta(seconds=3)
"""The lease inside Temporal: a worker silent this long is presumed dead and the turn runs elsewhere."""
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=8,
)
FOLLOW_TIMEOUT = timedelta(hours=2)
KEPT_OUTCOMES = 200
CARRIED_OUTCOMES = 20
"""Recent outcomes continue-as-new carries, without outputs; older request ids are found in the log."""

A = TypeVar("A")
R = TypeVar("R")


def _bare(send: TurnSend) -> TurnSend:
    """`send` without its inputs: activities after placing read them from the log, so they need not
    cross history again (they already came with the signal and went to `begin_turn`)."""
    return send.model_copy(update={"inputs": {}})


def _answer(outcome: TurnOutcome) -> TurnOutcome:
    """`outcome`, or its coded error raised when the send was refused."""
    if outcome.state == "refused" and outcome.error is not None:
        raise ApplicationError(outcome.error.message, type=outcome.error.code, non_retryable=True)
    return outcome


@workflow.defn(name="Conversation")
class ConversationWorkflow(Upkeep):
    """A conversation: turns arrive as signals, run as activities, and end in the record log."""

    @workflow.init
    def __init__(self, input: ConversationInput) -> None:
        self.config = input.config
        self.pending: deque[TurnSend] = deque(input.pending)
        self.stops: deque[StopSend] = deque()
        self.outcomes: OrderedDict[str, TurnOutcome] = OrderedDict((o.request_id, o) for o in input.outcomes)
        self.begun: dict[str, Begun] = {}
        self.prepared: dict[str, PrepareResult] = {}
        self.background: set[asyncio.Task[None]] = set()
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.blocked_on: str | None = None
        self.turns = input.turns
        self.turns_this_run = 0
        self.last: TurnOutcome | None = input.outcomes[-1] if input.outcomes else None
        self.active = workflow.now()
        self.closing = False
        self.published = workflow.now() - ATTRIBUTES_EVERY
        self.shown_attributes: tuple[str, int] | None = None

    @workflow.signal(name="turn")
    def turn(self, send: TurnSend) -> None:
        """Queue a send; the main loop places it."""
        self.pending.append(send)

    @workflow.signal(name="stop")
    def stop(self, stop: StopSend) -> None:
        """Queue a stop; the main loop carries it out."""
        self.stops.append(stop)

    @workflow.update(name="wait")
    async def wait(self, request_id: str) -> TurnOutcome:
        """Wait for how the send `request_id` ends; a refusal raises its coded error."""
        await workflow.wait_condition(lambda: request_id in self.outcomes)
        return _answer(self.outcomes[request_id])

    @workflow.update(name="begun")
    async def placed(self, request_id: str) -> Begun:
        """Wait until the send `request_id` is placed: its turn id and parent (the model is asked next)."""
        await workflow.wait_condition(lambda: request_id in self.begun or request_id in self.outcomes)
        if request_id in self.begun:
            return self.begun[request_id]
        outcome = _answer(self.outcomes[request_id])  # raises if it was refused
        return Begun(request_id=request_id, turn=outcome.turn, parent=outcome.parent, existing=True)

    @wait.validator
    def _known(self, request_id: str) -> None:
        known = request_id in self.outcomes or request_id in self.begun
        if not known and all(send.request_id != request_id for send in self.pending):
            raise ApplicationError(f"no send with request id {request_id} is known", type="turn-unknown")

    @placed.validator
    def _known_placed(self, request_id: str) -> None:
        self._known(request_id)

    @workflow.update(name="head")
    async def head(self, turn: str) -> None:
        """Move the conversation's head to `turn` (a `head` record)."""
        ref = TurnRef(store=self.config.store, conversation=self.config.conversation, turn=turn)
        await self._store_call(TurnActivities.move_head, ref)

    @workflow.query(name="status")
    def status(self) -> ConversationStatus:
        """What the conversation is doing now."""
        return ConversationStatus(
            store=self.config.store,
            conversation=self.config.conversation,
            program=self.config.program,
            running=sorted(self.tasks),
            pending=len(self.pending),
            turns=self.turns,
            turns_this_run=self.turns_this_run,
            summarising=len(self.background),
            last=self.last,
        )

    @workflow.run
    async def run(self, input: ConversationInput) -> str:
        """Place sends in order, carry out stops, and close when idle (reopened by the next signal)."""
        clock = asyncio.create_task(self._idle_clock())
        while True:
            await self._publish_when_quiet()
            await workflow.wait_condition(
                lambda: self._has_work() or (self.closing and self._idle()) or self._stale_attributes()
            )
            if self.closing and self._idle() and not self._has_work():
                if await self._drained():
                    workflow.logger.info("conversation closed after being idle")
                    self._publish(force=True)
                    return "idle"
                self.closing = False
                clock = asyncio.create_task(self._idle_clock())
                continue
            if clock.done():  # it fired while work arrived: keep counting from now
                self.closing = False
                clock = asyncio.create_task(self._idle_clock())
            if self.stops:
                await self._stop(self.stops.popleft())
            elif self.pending and self.blocked_on is None:
                await self._admit(self.pending[0])
            elif self._time_to_continue() and await self._drained():
                self._publish(force=True)
                workflow.continue_as_new(self._carried())

    def _idle(self) -> bool:
        return not (self.pending or self.stops or self.tasks or self.background)

    def _has_work(self) -> bool:
        return bool(self.stops) or (bool(self.pending) and self.blocked_on is None) or self._time_to_continue()

    def _time_to_continue(self) -> bool:
        if not self._idle():
            return False  # never leave a turn, a send or a background summary behind
        limit = self.turns_this_run >= self.config.turns_per_run
        return limit or workflow.info().is_continue_as_new_suggested()

    async def _drained(self) -> bool:
        """The drain rule: wait for handlers to finish unless new work arrives (which only this run can do)."""
        await workflow.wait_condition(lambda: workflow.all_handlers_finished() or bool(self.pending or self.stops))
        return self._idle()

    def _carried(self) -> ConversationInput:
        recent = [slim(o) for o in list(self.outcomes.values())[-CARRIED_OUTCOMES:]]
        return ConversationInput(config=self.config, pending=list(self.pending), outcomes=recent, turns=self.turns)

    # ----- placing sends

    async def _admit(self, send: TurnSend) -> None:
        if send.request_id in self.outcomes or send.request_id in self.begun:
            self.pending.popleft()  # the same send signalled twice: one turn
            return
        send = await self._prepared(send)
        try:
            # Local: a fast append on this worker, so placing costs no extra workflow task.
            placed = await workflow.execute_local_activity_method(
                TurnActivities.begin_turn,
                BeginInput(config=self.config, send=send),
                start_to_close_timeout=STORE_TIMEOUT,
                retry_policy=STORE_RETRY,
                summary=f"place send {send.request_id[:13]}",
            )
        except (ActivityError, ApplicationError) as err:  # a local activity's failure comes unwrapped
            self.pending.popleft()
            self._finish(TurnOutcome(request_id=send.request_id, state="refused", error=turn_error(err)))
            return
        if placed.kind == "busy":
            if placed.turn in self.tasks:
                self.blocked_on = placed.turn  # queue: wait for our own running turn
            else:
                await self._watch(placed.records)  # another writer's turn runs: wait for the log to move
            return
        self.pending.popleft()
        self.begun[send.request_id] = Begun(
            request_id=send.request_id, turn=placed.turn, parent=placed.parent, existing=placed.kind == "existing"
        )
        if placed.outcome is not None:
            self._finish(placed.outcome)
        else:
            self.tasks[placed.turn] = asyncio.create_task(self._drive(send, placed.turn, placed.kind == "existing"))

    async def _prepared(self, send: TurnSend) -> TurnSend:
        """With topics on, classify the send first (once, however often it waits)."""
        if (send.context or self.config.context).topics == "off":
            return send
        if send.request_id not in self.prepared:
            try:
                self.prepared[send.request_id] = await workflow.execute_activity_method(
                    TurnActivities.prepare_turn,
                    BeginInput(config=self.config, send=send),
                    start_to_close_timeout=MODEL_CALL_TIMEOUT,
                    heartbeat_timeout=MODEL_HEARTBEAT_TIMEOUT,
                    retry_policy=MODEL_RETRY,
                    summary="topic",
                )
            except ActivityError as err:  # the turn goes on without them, shown by its rule alone
                workflow.logger.warning("preparing a send failed", extra={"code": turn_error(err).code})
                self.prepared[send.request_id] = PrepareResult(continue_from=send.continue_from, root=send.root)
        placed = self.prepared[send.request_id]
        return send.model_copy(update={"continue_from": placed.continue_from, "root": placed.root})

    async def _watch(self, after: int) -> None:
        watch = WatchInput(store=self.config.store, conversation=self.config.conversation, after=after)
        await self._store_call(TurnActivities.watch_log, watch)

    async def _drive(self, send: TurnSend, turn: str, follow: bool) -> None:
        """Run the turn to its end: run it, or follow another writer that holds it, and claim it
        again if that writer's lease runs out."""
        ref = TurnRef(
            store=self.config.store, conversation=self.config.conversation, turn=turn, request_id=send.request_id
        )
        result = RunResult(kind="yielded" if follow else "interrupted", attempt=1)
        while result.kind != "ended":
            if result.kind == "yielded":
                result = await self._store_call(TurnActivities.follow_turn, ref, heartbeat=True)
                continue
            try:
                result = await self._run(send, turn, result.attempt)
            except ActivityError as err:
                outcome = await self._store_call(
                    TurnActivities.end_turn, ref.model_copy(update={"error": turn_error(err)})
                )
                result = RunResult(kind="ended", outcome=outcome)
        assert result.outcome is not None
        self._finish(result.outcome, new=not follow, inputs=send.inputs)
        if result.outcome.state == "done" and (send.context or self.config.context).summary is not None:
            task = asyncio.create_task(self._summarise(send, turn))
            self.background.add(task)
            task.add_done_callback(self.background.discard)

    async def _summarise(self, send: TurnSend, turn: str) -> None:
        """Extend the branch's summary after its turn, off the path of any answer."""
        try:
            await workflow.execute_activity_method(
                TurnActivities.summarise_branch,
                RunInput(config=self.config, send=_bare(send), turn=turn),
                start_to_close_timeout=MODEL_CALL_TIMEOUT,
                heartbeat_timeout=MODEL_HEARTBEAT_TIMEOUT,
                retry_policy=MODEL_RETRY,
                summary="summary",
            )
        except ActivityError as err:  # the branch goes on with its previous summary
            workflow.logger.warning("summarising failed", extra={"code": turn_error(err).code})

    async def _run(self, send: TurnSend, turn: str, attempt: int) -> RunResult:
        model = send.lm or self.config.lm or "the worker's model"
        return await workflow.execute_activity_method(
            TurnActivities.run_turn,
            RunInput(config=self.config, send=_bare(send), turn=turn, attempt=attempt),
            start_to_close_timeout=MODEL_CALL_TIMEOUT,
            heartbeat_timeout=MODEL_HEARTBEAT_TIMEOUT,
            retry_policy=MODEL_RETRY,
            summary=f"turn {self.turns + len(self.tasks)}: {model}",
        )

    def _finish(self, outcome: TurnOutcome, *, new: bool = False, inputs: dict[str, object] | None = None) -> None:
        """Record how a send ended; `new` when it made a turn of its own (not a repeated request id)."""
        self.outcomes[outcome.request_id] = outcome
        self.prepared.pop(outcome.request_id, None)
        while len(self.outcomes) > KEPT_OUTCOMES:
            self.outcomes.popitem(last=False)
        if outcome.turn is not None:
            self.tasks.pop(outcome.turn, None)
            if self.blocked_on == outcome.turn:
                self.blocked_on = None
        if new:
            self.turns += 1
            self.turns_this_run += 1
        self.last = outcome
        self.active = workflow.now()
        workflow.set_current_details(current_details(self.turns, outcome, inputs))
        self._publish()

    # ----- stops

    async def _stop(self, stop: StopSend) -> None:
        """Drop queued sends (they record nothing) and stop turns through the log, where the running
        activity (ours or a functai process's) sees the `stop` record within 0.25 s."""
        targets: list[str] = []
        for send in [s for s in self.pending if stop.request_id in (None, s.request_id) and stop.turn is None]:
            self.pending.remove(send)
            self._finish(TurnOutcome(request_id=send.request_id, state="stopped"))
        if stop.turn is not None:
            targets.append(stop.turn)
        elif stop.request_id is not None:
            placed = self.begun.get(stop.request_id)
            targets += [placed.turn] if placed is not None and placed.turn in self.tasks else []
        else:
            targets += sorted(self.tasks)
        for turn in targets:
            ref = TurnRef(store=self.config.store, conversation=self.config.conversation, turn=turn)
            try:
                await self._store_call(TurnActivities.stop_turn, ref)
            except ApplicationError as err:
                workflow.logger.warning("stop refused", extra={"turn": turn, "code": err.type})

    async def _store_call(
        self, method: Callable[[TurnActivities, A], Awaitable[R]], arg: A, *, heartbeat: bool = False
    ) -> R:
        """A store activity; a coded failure is raised as `ApplicationError(type=code)` for updates.

        Quick ones run as local activities (on this worker, within the workflow task); one that
        waits on another writer (`heartbeat`) is a regular activity with a heartbeat timeout.
        """
        try:
            if not heartbeat:
                return await workflow.execute_local_activity_method(
                    method, arg, start_to_close_timeout=STORE_TIMEOUT, retry_policy=STORE_RETRY
                )
            return await workflow.execute_activity_method(
                method,
                arg,
                start_to_close_timeout=FOLLOW_TIMEOUT,
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=STORE_RETRY,
            )
        except (ActivityError, ApplicationError) as err:  # a local activity's failure comes unwrapped
            error = turn_error(err)
            raise ApplicationError(error.message, type=error.code, non_retryable=True) from None
