"""Turns that act: their tool rounds, their waits for a person, and acting on them by hand.

A model step that asks for tools comes back as a `ToolRound`: each call runs as its own activity
(its own timeout, tries and heartbeat), then the model step runs again. A turn that needs a person
comes back `Paused`: it then waits on the `act` update (answers, resumes, abandonments), a durable
timer for its optional expiry, and a slow look at the log (5 min... an hour apart) for what another
process (functai) recorded; no worker does anything meanwhile, for as long as it takes.
Deterministic; every side effect is an activity; the run's state (`_state.RunState`) changes
through its methods.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.toolcalls import ToolActivities
    from activities.waiting import WaitingActivities
    from core.errors import ErrorCode, ThreadlineError
    from core.models import (
        Begun,
        Interrupted,
        Paused,
        RunResult,
        ToolRound,
        TurnError,
        TurnOutcome,
        TurnRef,
        TurnSend,
        WaitingTurn,
    )
    from core.temporal import from_failure, to_failure
    from core.toolmodels import ActResult, ToolInput, TurnAction, WaitCheck

    from . import _calls
    from ._deadlines import Deadlines
    from ._observed import waiting
    from ._state import RunState

Start = Callable[[TurnSend, str, RunResult], None]
"""Drive a turn to its end in the background, from where it stands (`_turns.Turns.start`)."""

LONGEST_CHECK = timedelta(hours=1)
"""While a turn waits, the log is read at most this far apart (the first look comes after `waiting_check_s`)."""


class Acting:
    """The turns of one run that act or wait: tool rounds, waits, and what people do about them."""

    def __init__(self, state: RunState, *, start: Start) -> None:
        self.state = state
        self._start = start
        self.held: dict[str, str] = {}
        """The turns waiting here, with the request id their outcome is kept under."""
        self.wakes: dict[str, int] = {}
        self.claimed: dict[str, int] = {}
        """Turns claimed again by a resume by hand, with the attempt that goes on."""
        self.deadlines = Deadlines(state)
        self.parked: set[str] = set()
        """The waiting turns sitting on their timers now (no activity of theirs runs)."""

    def wake(self, turn: str) -> None:
        """Make a waiting turn look at the log now (something was answered, resumed or stopped)."""
        self.wakes[turn] = self.wakes.get(turn, 0) + 1

    async def next(self, ref: TurnRef, send: TurnSend, result: ToolRound | Paused) -> RunResult:
        """After a model step that did not end the turn: run its tools, or wait for a person."""
        if isinstance(result, ToolRound):
            await self._round(ref, send, result)
            return Interrupted(attempt=result.attempt)  # the model step again, with the attempt held
        return await self._wait(ref, send, result)

    async def _round(self, ref: TurnRef, send: TurnSend, round: ToolRound) -> None:
        """Run the round's calls in order, each its own activity; a call that cannot run is recorded so
        (the model is told), and the model step decides what follows."""
        config = self.state.config
        for call in round.calls:
            tool = ToolInput(
                store=config.store,
                conversation=config.conversation,
                store_id=config.store_id,
                program=send.program or config.program,
                turn=ref.turn,
                attempt=round.attempt,
                call=call,
            )
            summary = f"tool {call.name} (call {call.invocation})"
            try:
                done = await _calls.tool(
                    ToolActivities.run_tool, tool, timeout_s=call.timeout_s, attempts=call.attempts, summary=summary
                )
            except ApplicationError as err:
                failed = tool.model_copy(update={"error": _error(err)})
                await _calls.quick(ToolActivities.fail_tool, failed)
                return
            if done.state != "done":
                return

    async def _wait(self, ref: TurnRef, send: TurnSend, paused: Paused) -> RunResult:
        """Wait for a person (or another writer) to move the turn on; the first answer that settles it wins."""
        turn, program = ref.turn, send.program or self.state.config.program
        self.held[turn] = send.request_id
        self._note(send, ref, paused)
        self.state.unblock(turn)  # a send queued behind it is refused now (docs/format-1.md 4.4)
        try:
            with waiting(self.state.config, turn, program):
                if self.deadlines.begin(ref, send, paused) is not None:
                    return await self._until_due(ref, send, paused)
                return await self._until_moved(ref, send, paused)
        finally:
            self.held.pop(turn, None)
            self.deadlines.end(turn)
            self.state.unnote(send.request_id)

    async def _until_moved(self, ref: TurnRef, send: TurnSend, paused: Paused) -> RunResult:
        turn, config = ref.turn, self.state.config
        deadline = workflow.now() + timedelta(seconds=config.approval_timeout_s) if config.approval_timeout_s else None
        pause = timedelta(seconds=config.waiting_check_s)
        woken = turn in self.wakes  # answered (or stopped) before its wait began: look at once
        while True:
            left = pause if deadline is None else min(pause, max(deadline - workflow.now(), timedelta(0)))
            if not woken and not await self._woken(turn, left):
                pause = min(pause * 2, LONGEST_CHECK)
            woken = False
            if turn in self.claimed:
                return Interrupted(attempt=self.claimed.pop(turn))
            expired = deadline is not None and workflow.now() >= deadline
            result = await self._look(ref, send.request_id, paused.attempt, expired)
            if turn in self.claimed:
                return Interrupted(attempt=self.claimed.pop(turn))
            if not isinstance(result, Paused):
                return result
            paused = result

    async def _until_due(self, ref: TurnRef, send: TurnSend, paused: Paused) -> RunResult:
        """`_until_moved` under an approval deadline: the clock's reminders and deadline come due between
        the looks at the log, and an answer the deadline records is looked at at once."""
        turn, config, program = ref.turn, self.state.config, send.program or self.state.config.program
        expiry = workflow.now() + timedelta(seconds=config.approval_timeout_s) if config.approval_timeout_s else None
        pause = timedelta(seconds=config.waiting_check_s)
        look_at = workflow.now() + pause
        woken = turn in self.wakes
        while True:
            if not woken:
                due = [t for t in (look_at, expiry, self.deadlines.waits[turn].clock.next_at()) if t is not None]
                woken = await self._woken(turn, max(min(due) - workflow.now(), timedelta(0)))
            if turn in self.claimed:
                return Interrupted(attempt=self.claimed.pop(turn))
            now = workflow.now()
            answered = not woken and await self.deadlines.fire(ref, program)
            if not (woken or answered) and now < look_at and (expiry is None or now < expiry):
                continue  # a reminder or an escalation: nothing to read in the log
            if now >= look_at:
                pause = min(pause * 2, LONGEST_CHECK)
                look_at = now + pause
            woken = False
            result = await self._look(ref, send.request_id, paused.attempt, expiry is not None and now >= expiry)
            if turn in self.claimed:
                return Interrupted(attempt=self.claimed.pop(turn))
            if not isinstance(result, Paused):
                return result
            paused = result
            self.deadlines.paused(turn, paused)

    def carried(self) -> list[WaitingTurn]:
        """The waits continue-as-new carries: every wait parked under a deadline."""
        return self.deadlines.carried(self.parked)

    def only_parked(self) -> bool:
        """Whether every turn of the run is a wait under a deadline, parked on its timer (the run may
        continue as new carrying them)."""
        tasks = set(self.state.tasks)
        return bool(tasks) and tasks <= (self.parked & set(self.deadlines.waits))

    def restore(self, waiting: list[WaitingTurn]) -> None:
        """Wait on, in this run, for the turns the run before carried (each with its clock)."""
        self.deadlines.restore(waiting)
        for wait in waiting:
            send = TurnSend(request_id=wait.request_id, inputs={}, program=wait.program)
            self.state.place(Begun(request_id=wait.request_id, turn=wait.turn, parent=wait.parent, existing=True))
            self._start(send, wait.turn, Paused(attempt=wait.attempt, approvals=wait.approvals))

    async def _look(self, ref: TurnRef, request_id: str, attempt: int, expired: bool) -> RunResult:
        """Read how the waiting turn stands (a local activity: no worker is held between looks)."""
        check = WaitCheck(
            store=ref.store,
            conversation=ref.conversation,
            store_id=ref.store_id,
            turn=ref.turn,
            request_id=request_id,
            attempt=attempt,
            expired=expired,
        )
        return await _calls.quick(WaitingActivities.check_waiting, check, summary="look at a waiting turn")

    async def _woken(self, turn: str, within: timedelta) -> bool:
        """Wait until `turn` is woken (True) or `within` passes (False): a durable timer, no worker."""
        seen = self.wakes.get(turn, 0)
        self.parked.add(turn)
        try:
            await workflow.wait_condition(
                lambda: self.wakes.get(turn, 0) != seen, timeout=within, timeout_summary="waiting for a person"
            )
        except TimeoutError:
            return False
        finally:
            self.parked.discard(turn)
        return True

    def _note(self, send: TurnSend, ref: TurnRef, paused: Paused) -> None:
        """Callers waiting for the send learn that its turn waits (and for what) at once."""
        placed = self.state.begun.get(send.request_id)
        outcome = TurnOutcome(
            request_id=send.request_id,
            turn=ref.turn,
            parent=placed.parent if placed else None,
            state="waiting",
            approvals=paused.approvals,
        )
        self.state.note(outcome)

    # ----- acting by hand (the `act` update)

    async def act(self, action: TurnAction) -> ActResult:
        """Answer, resume or abandon a turn; a refusal raises its coded error, with nothing recorded."""
        action = self._scoped(action)
        turn = action.turn
        if action.kind in ("approve", "deny"):
            self.deadlines.check_answer(turn, action.by)
            result = await _calls.quick(WaitingActivities.answer_turn, action, summary=f"{action.kind} turn")
            self.wake(turn)
            if result.pending or not action.resume:
                return result
            if turn in self.held:  # it goes on by itself: callers wait for its end again
                self.state.unnote(self.held[turn])
                return result.model_copy(update={"request_id": self.held[turn]})
            if turn in self.state.tasks:  # about to wait here: it looks at the log first
                return result.model_copy(update={"request_id": self._sent(turn)})
            return await self._adopt(action)
        if action.kind == "abandon":
            result = await _calls.quick(WaitingActivities.abandon_turn, action, summary="abandon turn")
            self.wake(turn)
            return result
        if turn in self.held:
            result = await _calls.quick(WaitingActivities.resume_turn, action, summary="resume turn")
            self.claimed[turn] = result.attempt
            self.wake(turn)
            self.state.unnote(self.held[turn])
            return result.model_copy(update={"request_id": self.held[turn]})
        return await self._adopt(action)

    def _sent(self, turn: str) -> str | None:
        """The request id of the send this run placed as `turn`."""
        return next((rid for rid, placed in self.state.begun.items() if placed.turn == turn), None)

    def _scoped(self, action: TurnAction) -> TurnAction:
        config = self.state.config
        return action.model_copy(
            update={"store": config.store, "conversation": config.conversation, "store_id": config.store_id}
        )

    async def _adopt(self, action: TurnAction) -> ActResult:
        """Resume a turn nothing here runs (functai left it, or an earlier run of this workflow): claim it,
        then run it to its end like a turn of this run, its outcome kept under the action's request id."""
        if action.turn in self.state.tasks:
            raise to_failure(ThreadlineError(ErrorCode.TURN_STATE, f"turn {action.turn} is running here"))
        result = await _calls.quick(WaitingActivities.resume_turn, action, summary="resume turn")
        request_id = action.request_id or result.request_id or action.turn
        self.state.unnote(request_id)
        send = TurnSend(request_id=request_id, inputs={}, program=action.program)
        self.state.place(Begun(request_id=request_id, turn=action.turn, parent=result.parent, existing=True))
        self._start(send, action.turn, Interrupted(attempt=result.attempt))
        return result.model_copy(update={"request_id": request_id})


def _error(err: ApplicationError) -> TurnError:
    return TurnError.of(from_failure(err))
