"""The sends and turns of one conversation run: placing sends in order, driving each turn to its
end, and stopping them. Deterministic; every side effect is an activity (see `_calls`); what the
run keeps is its `RunState` (`_state`), changed through its methods.

Every path out of a turn ends it: whatever an activity does, the turn leaves the running tasks,
the queue behind it is unblocked and its waiters get an outcome, coded when it failed.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.llm import LLMActivities
    from activities.transcript import TranscriptActivities
    from core.again_models import AskAgain, AskedAgain
    from core.models import (
        BeginInput,
        Begun,
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
    from core.temporal import from_failure

    from . import _calls, _control
    from ._details import said
    from ._kept import Kept
    from ._observed import Observed
    from ._orphans import Orphans
    from ._state import RunState
    from ._tools import Acting


STEER = "steer"
"""Runs from before never met a `steered` placing: a send was only ever begun, found or refused."""


def _bare(send: TurnSend) -> TurnSend:
    """`send` without its inputs: activities after placing read them from the log, so they need not
    cross history again (they already came with the signal and went to `begin_turn`)."""
    return send.model_copy(update={"inputs": {}})


class Turns:
    """Placing the first queued send and driving each turn to its end, over the run's state."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.acting = Acting(state, start=self.start)
        self.kept = Kept()
        self.orphans = Orphans(state, start=self.start)
        self.observed = Observed()

    def ready(self) -> bool:
        """A queued send can be placed now: the queue waits for no running turn, and no send kept for
        a store that is away waits for its next try."""
        return self.state.ready() and not self.kept.pausing()

    # ----- placing sends

    async def admit(self, send: TurnSend) -> None:
        """Place the first queued send: it begins a turn, finds its request id's turn, is refused, or
        waits (the head runs) with the queue behind it."""
        if self.state.seen(send.request_id):
            self.state.drop_first()  # the same send signalled twice: one turn
            return
        send = await self._prepared(send)
        config = self.state.config
        try:
            placed = await _calls.quick(
                TranscriptActivities.begin_turn,
                BeginInput(config=config, send=send, holding=self.orphans.holding()),
                summary=f"place {said(send)}",
            )
        except ApplicationError as err:
            if self.kept.keep(send.request_id, err):
                return  # placed again once the pause is over
            self.state.drop_first()
            self.state.finish(TurnOutcome(request_id=send.request_id, state="refused", error=_error(err)))
            self.observed.refused(config, send, err.type or "")
            return
        self.kept.forget()
        self.state.bind_store(placed.store_id)
        if placed.kind == "orphans":  # turns this workflow placed and lost: they run first, the send waits
            await self.orphans.adopt(placed.orphans)
            return
        if placed.kind == "busy":
            self.observed.queued(config, send)
            await self._behind(placed.turn, placed.records)
            return
        self.state.drop_first()
        if placed.kind == "steered" and workflow.patched(STEER):
            self.observed.steered(config, send)
            self.state.steer(placed.turn, send)
            self.state.place(Begun(request_id=send.request_id, turn=placed.turn, parent=placed.parent))
            return
        self.observed.placed(placed.turn, placed.parent)
        if placed.kind == "begun":
            self.observed.beside(config, send, running=bool(self.state.tasks))
        existing = placed.kind == "existing"
        self.state.place(Begun(request_id=send.request_id, turn=placed.turn, parent=placed.parent, existing=existing))
        if placed.outcome is not None:
            self.state.finish(placed.outcome)
        else:
            self.start(send, placed.turn, Yielded() if existing else None)

    def start(self, send: TurnSend, turn: str, start: RunResult | None = None) -> None:
        """Drive `turn` to its end in the background: a new turn (`start` None), one another writer
        holds (`Yielded`), or one claimed again by hand (`Interrupted` with its attempt)."""
        self.state.running(turn, asyncio.create_task(self._drive(send, turn, start)))

    async def _prepared(self, send: TurnSend) -> TurnSend:
        """With topics on, classify the send first (once, however often it waits)."""
        if (send.context or self.state.config.context).topics == "off":
            return send
        prepared = self.state.prepared.get(send.request_id)
        if prepared is None:
            try:
                prepared = await _calls.model(
                    LLMActivities.prepare_turn, BeginInput(config=self.state.config, send=send), summary="topic"
                )
            except ApplicationError as err:  # the turn goes on without it, shown by its rule alone
                workflow.logger.warning("preparing a send failed", extra={"code": err.type})
                prepared = PrepareResult(continue_from=send.continue_from, root=send.root)
            self.state.prepare(send.request_id, prepared)
        return prepared.applied(send)

    async def _behind(self, turn: str, records: int) -> None:
        """The send waits, first in the queue, for the running head `turn` (the log held `records`)."""
        if turn in self.state.tasks:
            self.state.block(turn)  # queue: wait for our own running turn
            self.acting.wake(turn)  # a turn waiting here may have been resumed elsewhere
        else:
            await self._watch(records)  # another writer's turn runs: wait for the log to move

    async def _watch(self, after: int) -> None:
        config = self.state.config
        watch = WatchInput(store=config.store, conversation=config.conversation, after=after, store_id=config.store_id)
        await _calls.quick(TranscriptActivities.watch_log, watch)

    # ----- driving turns

    async def _drive(self, send: TurnSend, turn: str, start: RunResult | None) -> None:
        """Run the turn to its end, then answer its send, whatever happened on the way."""
        began = workflow.now()
        with self.observed.turn(self.state.config, send, turn) as span:
            try:
                outcome = await self._to_end(send, turn, start)
            except ApplicationError as err:  # its end could not be written: the store stayed away too long
                outcome = TurnOutcome(request_id=send.request_id, turn=turn, state="failed", error=_error(err))
            seconds = (workflow.now() - began).total_seconds()
            self.observed.ended(span, self.state.config, send, outcome, seconds=seconds)
        # a wait carried from the run before (`Paused`) is a turn this conversation placed and never counted
        self.state.finish(outcome, new=start is None or isinstance(start, Paused), inputs=send.inputs)
        if turn in self.state.steering:
            self.state.settle_steers(outcome)
        if outcome.state == "done" and (send.context or self.state.config.context).summary is not None:
            self.state.summarising(asyncio.create_task(self._summarise(send, turn)))

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
        model = send.lm or config.lm
        summary = f"turn {self.state.turns + len(self.state.tasks)}: {said(send)}" + (f" ({model})" if model else "")
        run = RunInput(config=config, send=_bare(send), turn=turn, attempt=attempt)
        return await _calls.model(LLMActivities.run_turn, run, summary=summary)

    async def _summarise(self, send: TurnSend, turn: str) -> None:
        """Extend the branch's summary after its turn, off the path of any answer."""
        run = RunInput(config=self.state.config, send=_bare(send), turn=turn)
        try:
            await _calls.model(LLMActivities.summarise_branch, run, summary="summary")
        except ApplicationError as err:  # the branch goes on with its previous summary
            workflow.logger.warning("summarising failed", extra={"code": err.type})

    # ----- stops, closing, the head, renders (workflows/_control.py)

    async def close(self) -> int:
        """Answer the queued sends, stop the running turns, wait for them; how many sends were answered."""
        answered = await _control.close(self)
        self.state.close()
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

    async def ask_again(self, ask: AskAgain) -> AskedAgain:
        """A turn's request sent again; nothing is recorded."""
        return await _control.ask_again(self, ask)


def _error(err: ApplicationError) -> TurnError:
    return TurnError.of(from_failure(err))
