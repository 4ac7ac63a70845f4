"""The sends and turns of one conversation run: placing sends in order, driving each turn to its
end, and stopping them. Deterministic; every side effect is an activity (see `_calls`); what the
run keeps is its `RunState` (`_state`), changed through its methods.

Every path out of a turn ends it: whatever an activity does, the turn leaves the running tasks,
the queue behind it is unblocked and its waiters get an outcome, coded when it failed.

A send that meets nothing of this run (no turn of its own running, no caller waiting for its
placing alone) is placed and run at once: one activity, `place_and_run`, places it as `begin_turn`
does and runs its turn as `run_turn` does, so the turn costs one workflow task before its model is
asked. Its turn is unknown here until that activity answers; whatever needs it sooner (the next send,
a `begun` caller, a stop, a close) first pins it: `begin_turn` with `at_once` finds that turn in the
log, or places it there first (the activity then finds it `existing`, its own, and runs it). A send
that did not begin its turn in its step (the head of another writer runs, lost turns come first,
a refusal, a step that gave up) goes back to the front of the queue and is placed the usual way.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Literal

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.llm import LLMActivities
    from activities.transcript import TranscriptActivities
    from core.again_models import AskAgain, AskedAgain
    from core.errors import ErrorCode
    from core.models import (
        BeginInput,
        BeginResult,
        Begun,
        Ended,
        FoundSend,
        Interrupted,
        Paused,
        PrepareResult,
        RenderResult,
        RunInput,
        RunResult,
        SendRef,
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
    from ._patches import since
    from ._state import RunState
    from ._tools import Acting


STEER = "steer"
"""Runs from before never met a `steered` placing: a send was only ever begun, found or refused."""
AT_ONCE = "place-and-run-at-once"
"""Runs from before placed every send with `begin_turn` (a local activity), then ran it with `run_turn`."""
Opening = Literal["deferred", "in-step", "clean", "owed"]


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
        self.stepped: set[str] = set()
        """Sends whose step did not begin their turn: placed the usual way from then on."""
        self._step: asyncio.Task[None] | None = None
        """The task driving the send placed at once (`state.unplaced` while its turn is unknown)."""
        self._pinning: asyncio.Task[None] | None = None
        self.opening: Opening | None = None
        """Where the run's first look at the log stands when it began a conversation (or reopened one)
        with a send it places at once (`_patches.OPENS`): `deferred` to that send's step, `in-step`
        while the step runs, `clean` when the step placed the send (the log held no lost turn and no
        flow), `owed` when it did not (the run looks the usual way, `read_flow` and `owned_turns`)."""

    def ready(self) -> bool:
        """A queued send can be placed now: the queue waits for no running turn, and no send kept for
        a store that is away waits for its next try."""
        return self.state.ready() and not self.kept.pausing()

    # ----- placing sends

    async def admit(self, send: TurnSend) -> None:
        """Place the first queued send: it begins a turn, finds its request id's turn, is refused, or
        waits (the head runs) with the queue behind it; or it is placed and run at once."""
        if self.state.seen(send.request_id):
            self.state.drop_first()  # the same send signalled twice: one turn
            return
        send = await self._prepared(send)
        if self._at_once(send):
            self.state.placing(send)
            opening = self.opening == "deferred"
            if opening:
                self.opening = "in-step"
            self._step = asyncio.create_task(self._place_and_run(send, opening=opening))
            return
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
            self.state.may_have_lost()  # its records may have landed before the step gave up
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
        if placed.kind == "steered" and since(STEER):
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

    def opens_with(self, send: TurnSend) -> bool:
        """Whether `send`, first in the queue, is placed at once as a turn, so its step may take the run's
        first look at the log (no flow's start, no merge, no repeated request id)."""
        plain = send.flow is None and send.merge is None and not self.state.seen(send.request_id)
        return plain and self.state.unplaced is None and self.ready() and self._at_once(send)

    def defer_opening(self) -> None:
        """Leave the run's first look at the log to its first send's step (`opening`)."""
        self.opening = "deferred"

    def opening_due(self, opens_now: bool) -> Literal["clean", "look"] | None:
        """What the run does now about its first look at the log, which is then settled: `clean` (the step
        took it and found nothing), `look` (the run looks the usual way: the step did not place its
        send, or something else comes first, `opens_now` False), or None (nothing yet)."""
        opening = self.opening
        if opening == "clean" or opening == "owed" or (opening == "deferred" and not opens_now):
            self.opening = None
            return "clean" if opening == "clean" else "look"
        return None

    def _opened(self, placed: BeginResult | None) -> None:
        """The step that took the run's first look at the log answered (`placed`; None: it failed)."""
        if placed is not None and placed.kind == "begun":
            self.state.looked_for_lost()  # it looked for lost turns and flows before it placed the send
            self.opening = "clean"
        else:
            self.opening = "owed"

    def _at_once(self, send: TurnSend) -> bool:
        """Whether `send` is placed and run in one step: nothing of this run runs (it cannot wait behind,
        branch from, interrupt or steer a turn of its own), no caller waits for its placing alone
        (`place`, `begun`: they want its turn before its answer), and no step of it came back before."""
        if self.state.tasks or send.request_id in self.state.wanting or send.request_id in self.stepped:
            return False
        return since(AT_ONCE)

    async def pin(self) -> None:
        """Learn the turn of the send placed at once (`state.unplaced`), placing it here if its step has
        not yet, before anything that needs it; at most one pin at a time, whoever asks."""
        if self.state.unplaced is None:
            return
        if self._pinning is None or self._pinning.done():
            self._pinning = asyncio.create_task(self._pin())
        await self._pinning

    async def _pin(self) -> None:
        """`begin_turn` with `at_once`: that turn, or the send placed now (its step then runs it). One that
        cannot be placed now waits as a queued send waits, until the log moves or its step hands it back;
        one refused here is refused by its step too, which hands it back."""
        while (send := self.state.unplaced) is not None:
            holding = self.orphans.holding()
            opening = self.opening == "in-step"  # placed here first, it looks at the log as its step would
            try:
                placed = await _calls.quick(
                    TranscriptActivities.begin_turn,
                    BeginInput(config=self.state.config, send=send, holding=holding, at_once=True, opening=opening),
                    summary=f"place {said(send)}",
                )
            except ApplicationError:
                await workflow.wait_condition(lambda: self.state.unplaced is not send)
                return
            self.state.bind_store(placed.store_id)
            if self.state.unplaced is not send:
                return  # its step answered meanwhile
            if placed.kind in ("begun", "existing"):
                self._known(send, placed)
            elif placed.kind == "orphans":
                await self.orphans.adopt(placed.orphans)
            elif placed.kind == "flows":  # its step finds them too, and hands the send back
                await workflow.wait_condition(lambda: self.state.unplaced is not send)
            else:
                await self._watch(placed.records)

    def _known(self, send: TurnSend, placed: BeginResult) -> None:
        """The send placed at once has its turn: callers of `begun` learn it, and it runs here."""
        if self.state.unplaced is not send or self._step is None:
            return  # known already
        self.observed.placed(placed.turn, placed.parent)
        existing = placed.outcome is not None
        self.state.place(Begun(request_id=send.request_id, turn=placed.turn, parent=placed.parent, existing=existing))
        self.state.running(placed.turn, self._step)

    async def earlier(self, request_id: str) -> FoundSend:
        """A send of an earlier run (this one never saw its request id), as the record log holds it;
        `turn-unknown` when the log holds no send with that id."""
        config = self.state.config
        ref = SendRef(
            store=config.store, conversation=config.conversation, store_id=config.store_id, request_id=request_id
        )
        found = await _calls.quick(TranscriptActivities.find_send, ref, summary="earlier send")
        if found.turn is None:
            raise ApplicationError(f"no send with request id {request_id} is known", type=ErrorCode.TURN_UNKNOWN)
        return found

    async def earlier_outcome(self, request_id: str) -> TurnOutcome:
        """How a send of an earlier run ended, from the record log; `turn-state` while its turn, which
        no send of this run drives, has not ended."""
        found = await self.earlier(request_id)
        if found.outcome is None:
            raise ApplicationError(
                f"the turn {found.turn} of send {request_id} has not ended", type=ErrorCode.TURN_STATE
            )
        return found.outcome

    async def earlier_placed(self, request_id: str) -> Begun:
        """Where a send of an earlier run was placed, from the record log."""
        found = await self.earlier(request_id)
        return Begun(request_id=request_id, turn=found.turn, parent=found.parent, existing=True)

    async def placed(self, request_id: str) -> Begun:
        """Wait until the send `request_id` is placed: its turn and parent (a send placed at once is pinned)."""
        if self.state.unplaced is not None and self.state.unplaced.request_id == request_id:
            await self.pin()
        return await self.state.placed(request_id)

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
            outcome = await self._outcome(span, send, turn, start, began=began)
        # a wait carried from the run before (`Paused`) is a turn this conversation placed and never counted
        self._ended(send, turn, outcome, new=start is None or isinstance(start, Paused))

    async def _place_and_run(self, send: TurnSend, *, opening: bool = False) -> None:
        """Place `send` and run its turn in one step, then drive the turn on to its end as `_drive` does;
        with `opening`, the step takes the run's first look at the log."""
        began = workflow.now()
        with self.observed.turn(self.state.config, send, None) as span:
            first = await self._first_step(send, opening=opening)
            if first is None:
                self.observed.drop(span)
                return
            turn, start, new = first
            self.observed.named(span, turn)
            outcome = await self._outcome(span, send, turn, start, began=began)
        self._ended(send, turn, outcome, new=new)

    async def _first_step(self, send: TurnSend, *, opening: bool) -> tuple[str, RunResult, bool] | None:
        """`place_and_run`: the turn it ran, how that came out, and whether it is a turn of its own; None
        when the send began no turn there (answered, or handed back to the queue)."""
        try:
            sent = await _calls.model(
                LLMActivities.place_and_run,
                BeginInput(config=self.state.config, send=send, opening=opening),
                summary=self._said(send, placing=True),
            )
        except ApplicationError as err:
            if opening:
                self._opened(None)
            turn = self._turn_of(send)
            if turn is None:  # not known placed: placed the usual way, which finds its turn if it has one
                self._hand_back(send)
                return None
            return turn, await self._give_up(send, turn, err), True
        placed = sent.placing()
        self.state.bind_store(placed.store_id)
        if opening:
            self._opened(placed)
        if sent.result is not None:
            self._known(send, placed)
            return placed.turn, sent.result, True
        if placed.kind == "existing":  # its request id's turn: ended (answered so), or another writer's
            self._known(send, placed)
            if placed.outcome is not None:
                self.state.finish(placed.outcome)
                return None
            return placed.turn, Yielded(), False
        if (turn := self._turn_of(send)) is not None:  # pinned here after its step found the head running
            return turn, Interrupted(), True
        self._hand_back(send)
        return None

    def _turn_of(self, send: TurnSend) -> str | None:
        placed = self.state.begun.get(send.request_id)
        return placed.turn if placed is not None and self.state.unplaced is not send else None

    def _hand_back(self, send: TurnSend) -> None:
        self.stepped.add(send.request_id)
        self.state.hand_back(send)

    async def _outcome(
        self, span: object, send: TurnSend, turn: str, start: RunResult | None, *, began: datetime
    ) -> TurnOutcome:
        try:
            outcome = await self._to_end(send, turn, start)
        except ApplicationError as err:  # its end could not be written: the store stayed away too long
            self.state.may_have_lost()
            outcome = TurnOutcome(request_id=send.request_id, turn=turn, state="failed", error=_error(err))
        seconds = (workflow.now() - began).total_seconds()
        self.observed.ended(span, self.state.config, send, outcome, seconds=seconds)
        return outcome

    def _ended(self, send: TurnSend, turn: str, outcome: TurnOutcome, *, new: bool) -> None:
        self.state.finish(outcome, new=new, inputs=send.inputs)
        if turn in self.state.steering:
            self.state.settle_steers(outcome)
        if outcome.state == "done" and (send.context or self.state.config.context).summary is not None:
            self.state.summarising(asyncio.create_task(self._summarise(send, turn)))

    async def _to_end(self, send: TurnSend, turn: str, start: RunResult | None) -> TurnOutcome:
        """Run the turn, or follow another writer that holds it, and claim it again if that writer's
        lease runs out; run its tools and wait for people as it asks; a runner that gives up has the
        turn ended `failed` with its code."""
        ref = self._ref(send, turn)
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
                result = await self._give_up(send, turn, err)
        return result.outcome

    def _ref(self, send: TurnSend, turn: str) -> TurnRef:
        config = self.state.config
        return TurnRef(
            store=config.store,
            conversation=config.conversation,
            turn=turn,
            request_id=send.request_id,
            store_id=config.store_id,
        )

    async def _give_up(self, send: TurnSend, turn: str, err: ApplicationError) -> Ended:
        """The turn's runner gave up with `err`: the turn ends `failed` with its code, unless it ended."""
        failed = self._ref(send, turn).model_copy(update={"error": _error(err)})
        return Ended(outcome=await _calls.quick(TranscriptActivities.end_turn, failed, retry=_calls.END_RETRY))

    async def _run(self, send: TurnSend, turn: str, attempt: int) -> RunResult:
        run = RunInput(config=self.state.config, send=_bare(send), turn=turn, attempt=attempt)
        return await _calls.model(LLMActivities.run_turn, run, summary=self._said(send))

    def _said(self, send: TurnSend, *, placing: bool = False) -> str:
        """The model call's summary: the turn's number (counting it while it is placed too) and its first words."""
        model = send.lm or self.state.config.lm
        number = self.state.turns + len(self.state.tasks) + placing
        return f"turn {number}: {said(send)}" + (f" ({model})" if model else "")

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
        await self.pin()
        answered = await _control.close(self)
        self.state.close()
        return answered

    async def stop(self, stop: StopSend, queued: int) -> None:
        """Drop the sends queued before the stop came, and stop the turns it names through the log."""
        unplaced = self.state.unplaced
        if stop.turn is None and unplaced is not None:
            await self.pin()
            if any(send is unplaced for send in self.state.pending):
                queued += 1  # handed back meanwhile: first in the queue, it came before the stop
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
