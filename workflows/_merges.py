"""Merges in a conversation run: sends that ask another program to combine branches (docs/format-1.md 4.10).

A merge is a send like any other: it waits its place in the queue, its request id makes it one turn,
`wait` and `begun` answer for it, and a stop drops it while queued. Placing it records nothing;
its merging program is asked in a heartbeating activity (a crash retries it elsewhere, a stop
cancels it and nothing is recorded); only then is it written, turn and end in one batch with no
lease, as functai writes a merge. The queue waits while a merge runs, as it waits for a running
head: the next send from the same view continues from the merge.

Sends that are not merges are not taken here: the admission chain (`_admission`) hands them on.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.merges import MergeActivities
    from core.learning import MergePlan, MergeRun
    from core.models import BeginInput, Begun, StopSend, TurnError, TurnOutcome, TurnSend
    from core.temporal import from_failure

    from . import _calls
    from ._state import RunState


class Merges:
    """The merges of one run, placed before the turns (see `_admission`)."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.tasks: dict[str, asyncio.Task[None]] = {}
        """Running merges by request id."""
        self.placed: dict[str, str] = {}
        """Their turn ids, by request id."""
        self.asking: set[str] = set()
        """Merges whose merging program is being asked: only these can still be stopped."""
        self.stopping: set[str] = set()

    def idle(self) -> bool:
        """No merge is running."""
        return not self.tasks

    async def take(self, send: TurnSend) -> bool:
        """Place the first queued send if it is a merge (True), else leave it (False)."""
        if send.merge is None:
            return False
        state = self.state
        state.drop_first()
        if state.seen(send.request_id):
            return True  # the same merge signalled twice: one merge
        try:
            plan = await _calls.quick(
                MergeActivities.place_merge, BeginInput(config=state.config, send=send), summary="place merge"
            )
        except ApplicationError as err:
            state.finish(TurnOutcome(request_id=send.request_id, state="refused", error=_error(err)))
            return True
        existing = plan.kind == "existing"
        state.place(Begun(request_id=send.request_id, turn=plan.turn, parent=plan.parent, existing=existing))
        if plan.outcome is not None or existing:
            state.finish(plan.outcome or TurnOutcome(request_id=send.request_id, turn=plan.turn, state="failed"))
            return True
        state.block(plan.turn)
        self.placed[send.request_id] = plan.turn
        self.tasks[send.request_id] = asyncio.create_task(self._drive(send, plan))
        return True

    async def _drive(self, send: TurnSend, plan: MergePlan) -> None:
        """Ask the merging program, then record the merge; whatever happens, the merge ends."""
        run = MergeRun(config=self.state.config, send=send, plan=plan)
        summary = f"merge by {send.merge.program if send.merge else '?'}"
        try:
            self.asking.add(send.request_id)
            answer = await _calls.model(MergeActivities.run_merge, run, summary=summary)
            self.asking.discard(send.request_id)  # answered: from here on it is recorded, stop or not
            done = run.model_copy(update={"answer": answer})
            outcome = await _calls.quick(MergeActivities.end_merge, done, retry=_calls.END_RETRY)
        except (ApplicationError, asyncio.CancelledError) as err:
            outcome = self._unrecorded(send, err)
        for kept in (self.tasks, self.placed):
            kept.pop(send.request_id, None)
        self.asking.discard(send.request_id)
        self.stopping.discard(send.request_id)
        self.state.unblock(plan.turn)
        self.state.finish(outcome, new=outcome.state == "done")

    def _unrecorded(self, send: TurnSend, err: BaseException) -> TurnOutcome:
        """A merge stopped, or whose merging program failed: nothing was recorded."""
        if send.request_id in self.stopping or isinstance(err, asyncio.CancelledError):
            return TurnOutcome(request_id=send.request_id, state="stopped")
        return TurnOutcome(request_id=send.request_id, state="failed", error=_error(err))

    def cancel(self, stop: StopSend) -> bool:
        """Cancel the merges the stop names while their merging program is asked (nothing is recorded
        for them; one already answered is recorded all the same); True when it named a merge's turn
        alone, so no turn is left for it to stop."""
        for request_id, turn in sorted(self.placed.items()):
            named = stop.turn in (None, turn) and stop.request_id in (None, request_id)
            if named and request_id in self.asking:
                self.stopping.add(request_id)
                self.tasks[request_id].cancel()
        return stop.turn is not None and stop.turn in self.placed.values()


def _error(err: BaseException) -> TurnError:
    return TurnError.of(from_failure(err))
