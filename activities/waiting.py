"""Acting on turns that wait for a person or were interrupted: answering their approvals, resuming
them, abandoning them, and looking at one the workflow waits on. Every append is conditional on
the log it was decided on, and every refusal is coded with nothing recorded.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog
from temporalio import activity

from core.models import Ended, Interrupted, Paused, RunResult, Yielded
from core.temporal import coded
from core.toolmodels import ActResult, TurnAction, WaitCheck
from store.backends.reader import ConversationLog, LogCache, now
from store.log.resume import abandon_records, answer_records, resume_records
from store.log.state import Log, Turn
from store.records import Record, abandoned_record, iso

from .outcomes import outcome_of

logger = structlog.get_logger(__name__)


class WaitingActivities:
    """Turns that wait, for every conversation of this worker.

    Args:
        logs: The worker's conversation logs, by store.
    """

    def __init__(self, logs: LogCache) -> None:
        self.logs = logs

    async def _open(self, action: TurnAction | WaitCheck) -> ConversationLog:
        return await self.logs.open(action.store, action.conversation, action.store_id)

    @activity.defn(name="answer_turn")
    @coded
    async def answer_turn(self, action: TurnAction) -> ActResult:
        """Record a person's answer (`approve` or `deny`) to the questions the turn waits for."""
        conversation = await self._open(action)
        answered: list[Record] = []

        def build(log: Log, _: Turn) -> list[Record]:
            yes = action.kind == "approve"
            answered[:] = answer_records(
                log,
                action.turn,
                yes=yes,
                by=action.by,
                reason=action.reason,
                site=action.site,
                invocation=action.invocation,
                now=now(),
            )
            return answered

        turn = await conversation.append_if(action.turn, build)
        logger.info("turn.answered", turn=turn.id, verdict=action.kind, answered=len(answered))
        return _result(turn, answered=len(answered))

    @activity.defn(name="resume_turn")
    @coded
    async def resume_turn(self, action: TurnAction) -> ActResult:
        """Claim a waiting (every approval answered) or interrupted turn again: its `given`/`rerun` tool
        records and the `lease` of attempt + 1, in one conditional append."""
        conversation = await self._open(action)

        def build(log: Log, _: Turn) -> list[Record]:
            return resume_records(log, action.turn, now=now(), results=action.results, rerun=action.rerun)

        turn = await conversation.append_if(action.turn, build)
        logger.info("turn.resumed", turn=turn.id, attempt=turn.attempt)
        return _result(turn, resumed=True)

    @activity.defn(name="abandon_turn")
    @coded
    async def abandon_turn(self, action: TurnAction) -> ActResult:
        """End a waiting or interrupted turn `abandoned`, without going on."""
        conversation = await self._open(action)

        def build(log: Log, _: Turn) -> list[Record]:
            return abandon_records(log, action.turn, now=now())

        turn = await conversation.append_if(action.turn, build)
        return _result(turn)

    @activity.defn(name="check_waiting")
    @coded
    async def check_waiting(self, check: WaitCheck) -> RunResult:
        """How a turn the workflow waits on stands: ended, taken by another writer, answered (claimed
        again here: `Interrupted` with the new attempt), or still waiting (`Paused`)."""
        conversation = await self._open(check)
        turn = await conversation.turn(check.turn)
        outcome = outcome_of(turn, check.request_id)
        if outcome is not None:
            return Ended(outcome=outcome, attempt=turn.attempt)
        if turn.attempt > check.attempt:
            return Yielded(attempt=turn.attempt)
        state = turn.state(now())
        if check.expired and state in ("waiting", "interrupted"):
            return await self._expire(conversation, check)
        settled = not turn.unfinished()  # a call the caller runs (or that may have run) waits for its output
        if settled and ((state == "waiting" and not turn.unanswered()) or state == "interrupted"):
            claimed = await conversation.append_if(check.turn, _claim(check))
            return (
                Interrupted(attempt=claimed.attempt)
                if claimed.attempt > check.attempt
                else Paused(attempt=check.attempt)
            )
        reason = "waiting" if state == "waiting" else "unfinished"
        return Paused(attempt=check.attempt, reason=reason, approvals=turn.unanswered())

    async def _expire(self, conversation: ConversationLog, check: WaitCheck) -> RunResult:
        def build(log: Log, turn: Turn) -> list[Record] | None:
            if turn.ended is not None or turn.attempt > check.attempt:
                return None
            return [abandoned_record(turn.id, attempt=turn.attempt, at=iso(now()))]

        turn = await conversation.append_if(check.turn, build)
        logger.info("turn.expired", turn=turn.id)
        outcome = outcome_of(turn, check.request_id)
        return Ended(outcome=outcome, attempt=turn.attempt) if outcome else Yielded(attempt=turn.attempt)


def _claim(check: WaitCheck) -> Callable[[Log, Turn], list[Record] | None]:
    def build(log: Log, turn: Turn) -> list[Record] | None:
        if turn.ended is not None or turn.attempt != check.attempt:
            return None
        return resume_records(log, turn.id, now=now())

    return build


def _result(turn: Turn, *, answered: int = 0, resumed: bool = False) -> ActResult:
    state = turn.state(now())
    return ActResult(
        turn=turn.id,
        state=state,
        pending=turn.unanswered() if state == "waiting" else [],
        resumed=resumed,
        request_id=turn.record.get("request_id"),
        attempt=turn.attempt,
        parent=turn.parent,
        answered=answered,
    )
