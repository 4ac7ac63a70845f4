"""Turns this workflow placed but lost: it owns every turn it places, even one whose placing it forgot.

`begin_turn` appends a turn's records inside a workflow task (`place_and_run` in an activity that
task scheduled); when the Temporal server dies before that task is recorded, the task is lost with
the update that carried the send, and the log holds a placed turn the workflow knows nothing of.
Every turn the workflow places is marked with its workflow id (`placed_by`, docs/format-1.md 2.3),
so the workflow finds those open turns it does not drive, at a run's start (unless the run before
continued as new with none left: `RunState.carried`), when placing the next send (`begin_turn` and
`place_and_run` answer `orphans` instead of placing beside them) and before an idle close, and
drives each to its end as a send of its own: its request id is then known here, so a send repeating
it gets that turn's outcome, never a second turn.
Deterministic; the log is read by an activity.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.transcript import TranscriptActivities
    from core.errors import ErrorCode
    from core.models import Begun, OpenTurn, OwnedInput, TurnError, TurnRef, TurnSend

    from . import _calls
    from ._patches import since
    from ._state import RunState

ADOPTS = "adopts-orphans"
"""Runs from before it never look for lost turns at their start or before an idle close."""

Start = Callable[[TurnSend, str], None]
"""Drive a new turn to its end in the background (`_turns.Turns.start`)."""


class Orphans:
    """Finding and adopting the open turns this workflow placed but does not drive."""

    def __init__(self, state: RunState, *, start: Start) -> None:
        self.state = state
        self._start = start

    def holding(self) -> list[str]:
        """The turns this run drives: any other open turn it placed was lost."""
        return sorted(self.state.tasks)

    async def look(self) -> bool:
        """At a run's start and before an idle close: adopt the turns this workflow placed and lost;
        whether there were any (the run then has work again)."""
        if not since(ADOPTS):
            return False
        config = self.state.config
        owned = OwnedInput(
            store=config.store, conversation=config.conversation, store_id=config.store_id, holding=self.holding()
        )
        try:
            orphans = await _calls.quick(TranscriptActivities.owned_turns, owned, summary="lost turns")
        except ApplicationError as err:  # looked for again before the run closes, and by the next send
            workflow.logger.warning("looking for lost turns failed", extra={"code": err.type})
            return False
        await self.adopt(orphans)
        self.state.looked_for_lost()
        return bool(orphans)

    async def adopt(self, orphans: list[OpenTurn]) -> None:
        """Drive each lost turn to its end as if its send had just placed it; one whose send was
        answered already (refused after its records landed) is ended `failed` instead, as answered."""
        for orphan in orphans:
            if orphan.turn in self.state.tasks:
                continue
            if orphan.request_id in self.state.outcomes:
                await self._end(orphan)
                continue
            workflow.logger.info("lost turn adopted", extra={"turn": orphan.turn})
            self.state.place(Begun(request_id=orphan.request_id, turn=orphan.turn, parent=orphan.parent))
            self._start(orphan.send(), orphan.turn)

    async def _end(self, orphan: OpenTurn) -> None:
        config = self.state.config
        error = TurnError(code=ErrorCode.TURN_STATE, message="its send was answered before the turn ran")
        ref = TurnRef(
            store=config.store,
            conversation=config.conversation,
            turn=orphan.turn,
            request_id=orphan.request_id,
            store_id=config.store_id,
            error=error,
        )
        await _calls.quick(TranscriptActivities.end_turn, ref, retry=_calls.END_RETRY)
