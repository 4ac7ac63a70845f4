"""The sends and turns of one conversation run: placing sends in order, driving each turn to its
end, and stopping them. Deterministic; every side effect is an activity (see `_calls`).

Every path out of a turn ends it: whatever an activity does, the turn leaves `tasks`, the queue
behind it is unblocked and its waiters get an outcome, coded when it failed.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Mapping

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.llm import LLMActivities
    from activities.transcript import TranscriptActivities
    from core.errors import ErrorCode
    from core.models import (
        MAX_REQUEST_ID,
        BeginInput,
        Begun,
        ConversationState,
        ConversationStatus,
        Ended,
        Interrupted,
        Paused,
        PrepareResult,
        RenderResult,
        RunInput,
        RunResult,
        StopSend,
        ToolRound,
        TurnError,
        TurnOutcome,
        TurnRef,
        TurnSend,
        WatchInput,
        Yielded,
    )
    from core.temporal import from_failure, to_failure

    from . import _calls, _control
    from ._details import slim
    from ._kept import Kept
    from ._tools import Acting
    from ._upkeep import Attributes

KEPT_OUTCOMES = 200
CARRIED_OUTCOMES = 20
"""Recent outcomes continue-as-new carries, without outputs; older request ids are found in the log."""

OnEnd = Callable[[TurnOutcome, Mapping[str, object] | None], None]


def _bare(send: TurnSend) -> TurnSend:
    """`send` without its inputs: activities after placing read them from the log, so they need not
    cross history again (they already came with the signal and went to `begin_turn`)."""
    return send.model_copy(update={"inputs": {}})


def _answer(outcome: TurnOutcome) -> TurnOutcome:
    """`outcome`, or its coded error raised when the send was refused."""
    if outcome.state == "refused" and outcome.error is not None:
        raise to_failure(outcome.error.to_error())
    return outcome


class Turns:
    """The turn table of one run: what was placed, what runs, what ended, what the queue waits for."""

    def __init__(self, state: ConversationState, on_end: OnEnd) -> None:
        self.state = state
        self.outcomes: OrderedDict[str, TurnOutcome] = OrderedDict((o.request_id, o) for o in state.outcomes)
        self.begun: dict[str, Begun] = {}
        self.prepared: dict[str, PrepareResult] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.background: set[asyncio.Task[None]] = set()
        self.blocked_on: str | None = None
        self.this_run = 0
        self.closed = False
        """A close was asked for and carried out: the run ends once its handlers are done."""
        self.last: TurnOutcome | None = state.outcomes[-1] if state.outcomes else None
        self._on_end = on_end
        self.acting = Acting(self)
        self.kept = Kept()

    def enqueue(self, send: TurnSend) -> None:
        """Queue a send. One with an over-long request id is dropped: no caller can wait for it (`wait`
        refuses such ids), and it must not swell what the run carries."""
        if len(send.request_id) <= MAX_REQUEST_ID:
            self.state.pending.append(send)
        else:
            workflow.logger.warning("send dropped", extra={"reason": "request id too long"})

    def enqueue_once(self, send: TurnSend) -> str:
        """Queue `send` unless its request id is known here already (a caller asking again); its id."""
        if len(send.request_id) > MAX_REQUEST_ID:
            too_long = f"a request id has at most {MAX_REQUEST_ID} characters"
            raise ApplicationError(too_long, type=ErrorCode.INVALID_REQUEST)
        if not self.known(send.request_id):
            self.enqueue(send)
        return send.request_id

    def run_full(self) -> bool:
        """Whether this run has served its share of turns, or its history asks to continue as new."""
        return self.this_run >= self.state.config.turns_per_run or workflow.info().is_continue_as_new_suggested()

    def idle(self) -> bool:
        """Nothing queued, running or being summarised."""
        return not (self.state.pending or self.tasks or self.background)

    def ready(self) -> bool:
        """A queued send can be placed now (the queue is not waiting for a running turn)."""
        return bool(self.state.pending) and self.blocked_on is None and not self.kept.pausing()

    def known(self, request_id: str) -> bool:
        """Whether a send with this request id was queued, placed or answered in this run."""
        seen = request_id in self.outcomes or request_id in self.begun
        return seen or any(send.request_id == request_id for send in self.state.pending)

    def attributes(self) -> Attributes:
        """What the search attributes show: `running` while a turn runs or a send waits, and the turn count."""
        return ("running" if self.tasks or self.state.pending else "idle"), self.state.turns

    def status(self) -> ConversationStatus:
        """The `status` query: what the conversation is doing now."""
        config = self.state.config
        return ConversationStatus(
            store=config.store,
            conversation=config.conversation,
            program=config.program,
            running=sorted(self.tasks),
            pending=len(self.state.pending),
            turns=self.state.turns,
            turns_this_run=self.this_run,
            summarising=len(self.background),
            last=self.last,
        )

    def carried(self) -> ConversationState:
        """What continue-as-new carries: the queue, the recent outcomes without outputs, the counter."""
        recent = [slim(o) for o in list(self.outcomes.values())[-CARRIED_OUTCOMES:]]
        return self.state.model_copy(update={"pending": list(self.state.pending), "outcomes": recent})

    # ----- answering the updates

    async def outcome(self, request_id: str) -> TurnOutcome:
        """Wait for how the send `request_id` ends; a refusal raises its coded error."""
        await workflow.wait_condition(lambda: request_id in self.outcomes)
        return _answer(self.outcomes[request_id])

    async def placed(self, request_id: str) -> Begun:
        """Wait until the send `request_id` is placed: its turn and parent (the model is asked next)."""
        await workflow.wait_condition(lambda: request_id in self.begun or request_id in self.outcomes)
        if request_id in self.begun:
            return self.begun[request_id]
        outcome = _answer(self.outcomes[request_id])
        return Begun(request_id=request_id, turn=outcome.turn, parent=outcome.parent, existing=True)

    # ----- placing sends

    async def admit(self, send: TurnSend) -> None:
        """Place the first queued send: it begins a turn, finds its request id's turn, is refused, or
        waits (the head runs) with the queue behind it."""
        if send.request_id in self.outcomes or send.request_id in self.begun:
            self.state.pending.pop(0)  # the same send signalled twice: one turn
            return
        send = await self._prepared(send)
        config = self.state.config
        try:
            placed = await _calls.quick(
                TranscriptActivities.begin_turn,
                BeginInput(config=config, send=send),
                summary=f"place send {send.request_id[:13]}",
            )
        except ApplicationError as err:
            if self.kept.keep(send.request_id, err):
                return  # placed again once the pause is over
            self.state.pending.pop(0)
            self.finish(TurnOutcome(request_id=send.request_id, state="refused", error=_error(err)))
            return
        self.kept.forget()
        if config.store_id is None and placed.store_id is not None:  # first placed: bind the store's identity
            self.state.config = config.model_copy(update={"store_id": placed.store_id})
        if placed.kind == "busy":
            if placed.turn in self.tasks:
                self.blocked_on = placed.turn  # queue: wait for our own running turn
                self.acting.wake(placed.turn)  # a turn waiting here may have been resumed elsewhere
            else:
                await self._watch(placed.records)  # another writer's turn runs: wait for the log to move
            return
        self.state.pending.pop(0)
        existing = placed.kind == "existing"
        self.begun[send.request_id] = Begun(
            request_id=send.request_id, turn=placed.turn, parent=placed.parent, existing=existing
        )
        if placed.outcome is not None:
            self.finish(placed.outcome)
        else:
            self.start(send, placed.turn, Yielded() if existing else None)

    def start(self, send: TurnSend, turn: str, start: RunResult | None = None) -> None:
        """Drive `turn` to its end in the background: a new turn (`start` None), one another writer
        holds (`Yielded`), or one claimed again by hand (`Interrupted` with its attempt)."""
        self.tasks[turn] = asyncio.create_task(self._drive(send, turn, start))

    async def _prepared(self, send: TurnSend) -> TurnSend:
        """With topics on, classify the send first (once, however often it waits)."""
        if (send.context or self.state.config.context).topics == "off":
            return send
        if send.request_id not in self.prepared:
            try:
                self.prepared[send.request_id] = await _calls.model(
                    LLMActivities.prepare_turn, BeginInput(config=self.state.config, send=send), summary="topic"
                )
            except ApplicationError as err:  # the turn goes on without it, shown by its rule alone
                workflow.logger.warning("preparing a send failed", extra={"code": err.type})
                self.prepared[send.request_id] = PrepareResult(continue_from=send.continue_from, root=send.root)
        return self.prepared[send.request_id].applied(send)

    async def _watch(self, after: int) -> None:
        config = self.state.config
        watch = WatchInput(store=config.store, conversation=config.conversation, after=after, store_id=config.store_id)
        await _calls.quick(TranscriptActivities.watch_log, watch)

    # ----- driving turns

    async def _drive(self, send: TurnSend, turn: str, start: RunResult | None) -> None:
        """Run the turn to its end, then answer its send, whatever happened on the way."""
        try:
            outcome = await self._to_end(send, turn, start)
        except ApplicationError as err:  # its end could not be written: the store stayed away too long
            outcome = TurnOutcome(request_id=send.request_id, turn=turn, state="failed", error=_error(err))
        self.finish(outcome, new=start is None, inputs=send.inputs)
        if outcome.state == "done" and (send.context or self.state.config.context).summary is not None:
            task = asyncio.create_task(self._summarise(send, turn))
            self.background.add(task)
            task.add_done_callback(self.background.discard)

    async def _to_end(self, send: TurnSend, turn: str, start: RunResult | None) -> TurnOutcome:
        """Run the turn, or follow another writer that holds it, and claim it again if that writer's
        lease runs out; run its tools and wait for people as it asks; a runner that gives up has the
        turn ended `failed` with its code."""
        config = self.state.config
        ref = TurnRef(
            store=config.store,
            conversation=config.conversation,
            turn=turn,
            request_id=send.request_id,
            store_id=config.store_id,
        )
        result: RunResult = start or Interrupted()
        while not isinstance(result, Ended):
            if isinstance(result, Yielded):
                result = await _calls.follow(TranscriptActivities.follow_turn, ref)
                continue
            try:
                if isinstance(result, ToolRound | Paused):
                    result = await self.acting.next(ref, send, result)
                else:
                    result = await self._run(send, turn, result.attempt)
            except ApplicationError as err:
                failed = ref.model_copy(update={"error": _error(err)})
                outcome = await _calls.quick(TranscriptActivities.end_turn, failed, retry=_calls.END_RETRY)
                result = Ended(outcome=outcome)
        return result.outcome

    async def _run(self, send: TurnSend, turn: str, attempt: int) -> RunResult:
        config = self.state.config
        model = send.lm or config.lm or "the worker's model"
        summary = f"turn {self.state.turns + len(self.tasks)}: {model}"
        run = RunInput(config=config, send=_bare(send), turn=turn, attempt=attempt)
        return await _calls.model(LLMActivities.run_turn, run, summary=summary)

    async def _summarise(self, send: TurnSend, turn: str) -> None:
        """Extend the branch's summary after its turn, off the path of any answer."""
        run = RunInput(config=self.state.config, send=_bare(send), turn=turn)
        try:
            await _calls.model(LLMActivities.summarise_branch, run, summary="summary")
        except ApplicationError as err:  # the branch goes on with its previous summary
            workflow.logger.warning("summarising failed", extra={"code": err.type})

    def finish(self, outcome: TurnOutcome, *, new: bool = False, inputs: Mapping[str, object] | None = None) -> None:
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
            self.state.turns += 1
            self.this_run += 1
        self.last = outcome
        self._on_end(outcome, inputs)

    # ----- stops, closing, the head, renders (workflows/_control.py)

    def refuse_queued(self) -> int:
        """Answer every queued send `conversation-closed`; return how many there were."""
        return _control.refuse_queued(self)

    async def close(self) -> int:
        """Answer the queued sends, stop the running turns, wait for them; how many sends were answered."""
        answered = await _control.close(self)
        self.closed = True
        return answered

    async def stop(self, stop: StopSend, queued: int) -> None:
        """Drop the sends queued before the stop came, and stop the turns it names through the log."""
        await _control.stop(self, stop, queued)

    async def move_head(self, turn: str) -> None:
        """Move the conversation's head to `turn` (a `head` record)."""
        await _control.move_head(self, turn)

    async def render(self, send: TurnSend) -> RenderResult:
        """The request `send` would make now, once the summaries being made have landed."""
        return await _control.render(self, send)


def _error(err: ApplicationError) -> TurnError:
    return TurnError.of(from_failure(err))
