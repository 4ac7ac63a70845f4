"""Approval deadlines of the turns that wait for a person: their clocks, and what a clock does when it
comes due.

A wait under a rule with a deadline (`core.deadlines`) keeps a `DeadlineClock` of absolute times:
a reminder counts and logs itself; the deadline answers the turn's questions (`deny` or `approve`,
recorded by the `answer_turn` activity as an answer by `deadline`, so the turn goes on as after a
person's answer) or escalates them (only the named approvers may answer from then on, and the
escalation's own deadline starts). The clocks of waiting turns are carried through continue-as-new
(`WaitingTurn`), so a run continued while turns wait keeps counting from when each wait began.
Deterministic; the only side effect, the answer, is an activity.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.waiting import WaitingActivities
    from core.deadlines import DEADLINE, DeadlineClock, Escalation, first_deadline
    from core.errors import ErrorCode, ThreadlineError
    from core.models import Paused, TurnRef, TurnSend, WaitingTurn
    from core.temporal import to_failure
    from core.toolmodels import TurnAction

    from . import _calls
    from ._observed import deadline_event
    from ._patches import since
    from ._state import RunState

DEADLINES = "approval-deadlines"
"""Runs from before it never start a deadline's clock (no rule could carry one)."""


class Deadlines:
    """The clocks of the turns waiting here under an approval deadline, by turn."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.waits: dict[str, WaitingTurn] = {}

    def begin(self, ref: TurnRef, send: TurnSend, paused: Paused) -> DeadlineClock | None:
        """The clock of a wait that begins now: carried from the run before, new when the rule that asked
        (the send's, the conversation's or the program's) has a deadline, else None (the wait has none)."""
        carried = self.waits.get(ref.turn)
        if carried is not None:
            return carried.clock
        if paused.reason != "waiting":  # a tool to settle by hand: no question for a deadline to answer
            return None
        rule = paused.deadline or first_deadline(send.approve, self.state.config.approve)
        if rule is None or not since(DEADLINES):
            return None
        placed = self.state.begun.get(send.request_id)
        self.waits[ref.turn] = WaitingTurn(
            turn=ref.turn,
            request_id=send.request_id,
            parent=placed.parent if placed else None,
            program=send.program,
            attempt=paused.attempt,
            approvals=paused.approvals,
            clock=DeadlineClock.begin(rule, workflow.now(), approvers=None),
        )
        return self.waits[ref.turn].clock

    def paused(self, turn: str, paused: Paused) -> None:
        """The turn still waits, at `paused` (its attempt and questions, as a run continued would carry)."""
        if turn in self.waits:
            self.waits[turn] = self.waits[turn].model_copy(
                update={"attempt": paused.attempt, "approvals": paused.approvals}
            )

    def end(self, turn: str) -> None:
        """The turn no longer waits here."""
        self.waits.pop(turn, None)

    def restore(self, waiting: list[WaitingTurn]) -> None:
        """Take the waits the run before carried: each waits on here with its clock."""
        self.waits.update((w.turn, w) for w in waiting)

    def carried(self, parked: set[str]) -> list[WaitingTurn]:
        """What continue-as-new carries: the waits parked on their timers now."""
        return [w for turn, w in sorted(self.waits.items()) if turn in parked]

    def clocks(self) -> dict[str, DeadlineClock]:
        """The clocks by turn, for the `status` query."""
        return {turn: w.clock for turn, w in sorted(self.waits.items())}

    def check_answer(self, turn: str, by: str | None) -> None:
        """Refuse an answer by someone an escalation left out (`forbidden`), before anything is recorded."""
        wait = self.waits.get(turn)
        if wait is not None and not wait.clock.may_answer(by):
            approvers = ", ".join(wait.clock.approvers or ())
            message = f"turn {turn} was escalated: only {approvers} may answer it; give `by`"
            raise to_failure(ThreadlineError(ErrorCode.FORBIDDEN, message))

    async def fire(self, ref: TurnRef, program: str) -> bool:
        """Do what the clock of `ref.turn` has come due for; whether an answer was recorded (the turn
        then goes on, and the log is looked at now)."""
        wait = self.waits.get(ref.turn)
        if wait is None:
            return False
        clock, now = wait.clock, workflow.now()
        if clock.due is not None and now >= clock.due:
            if isinstance(clock.then, Escalation):
                self._set(ref.turn, clock.escalated(clock.then, now))
                deadline_event(program, "escalated")
                workflow.logger.info("approval escalated", extra={"turn": ref.turn})
                return False
            self._set(ref.turn, clock.model_copy(update={"due": None, "next_reminder": None}))
            return await self._answer(ref, wait, then=clock.then)
        if clock.next_reminder is not None and now >= clock.next_reminder:
            self._set(ref.turn, clock.reminded(now))
            deadline_event(program, "reminded")
            workflow.logger.info("approval reminded", extra={"turn": ref.turn, "reminders": clock.reminders + 1})
        return False

    def _set(self, turn: str, clock: DeadlineClock) -> None:
        self.waits[turn] = self.waits[turn].model_copy(update={"clock": clock})

    async def _answer(self, ref: TurnRef, wait: WaitingTurn, *, then: str) -> bool:
        config = self.state.config
        action = TurnAction(
            store=config.store,
            conversation=config.conversation,
            store_id=config.store_id,
            program=wait.program or config.program,
            turn=ref.turn,
            kind="approve" if then == "approve" else "deny",
            by=DEADLINE,
            reason=None if then == "approve" else "nobody answered before the deadline",
        )
        try:
            await _calls.quick(WaitingActivities.answer_turn, action, summary=f"deadline: {action.kind}")
        except ApplicationError as err:  # answered, ended or taken meanwhile: the look that follows tells
            workflow.logger.info("deadline found the turn moved on", extra={"turn": ref.turn, "code": err.type})
            return True
        deadline_event(wait.program or config.program, "denied" if action.kind == "deny" else "approved")
        workflow.logger.info("approval answered by its deadline", extra={"turn": ref.turn, "verdict": action.kind})
        return True
