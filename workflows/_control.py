"""Stopping, closing, moving the head and rendering: what the turn table does besides placing and
driving turns. Functions over a `Turns` (workflows/_turns.py), deterministic like it; what they
change of the run's state they change through its methods (`_state.RunState`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.llm import LLMActivities
    from activities.transcript import TranscriptActivities
    from core.again_models import AskAgain, AskAgainInput, AskedAgain
    from core.errors import ErrorCode
    from core.models import BeginInput, RenderResult, StopSend, TurnError, TurnOutcome, TurnRef, TurnSend

    from . import _calls
    from ._observed import stopping
    from ._patches import since
    from ._state import RunState
    from ._tools import Acting


class Turns(Protocol):
    """What these functions need of the turns (`workflows._turns.Turns`): the run's state, and what
    wakes a waiting turn."""

    state: RunState
    acting: Acting


STOP_ONLY_EARLIER = "stop-drops-only-earlier-sends"
CLOSE_PATIENCE = timedelta(seconds=30)
"""How long closing waits for its stopped turns to end (their runners see the stop within 0.25 s)."""
CLOSED_MESSAGE = "the conversation was closed before this send was placed; send it again to reopen it"


def refuse_queued(turns: Turns) -> int:
    """Answer every queued send `conversation-closed`; return how many there were."""
    queued = turns.state.take_queued()
    closed = TurnError(code=ErrorCode.CONVERSATION_CLOSED, message=CLOSED_MESSAGE)
    for send in queued:
        turns.state.finish(TurnOutcome(request_id=send.request_id, state="refused", error=closed))
    return len(queued)


async def close(turns: Turns) -> int:
    """Answer every queued send `conversation-closed`, stop the running turns, and wait (a while)
    for them and the summaries being made to end; return how many sends were answered so."""
    queued, state = refuse_queued(turns), turns.state
    await stop(turns, StopSend(), 0)
    try:
        await workflow.wait_condition(lambda: not (state.tasks or state.background), timeout=CLOSE_PATIENCE)
    except TimeoutError:
        workflow.logger.warning("closed with turns still running", extra={"running": len(state.tasks)})
    return queued


async def stop(turns: Turns, stop: StopSend, queued: int) -> None:
    """Drop the sends queued before the stop came (they record nothing; `queued` of them), and stop
    turns through the log, where the running activity (ours or a functai process's) sees the `stop`
    record within 0.25 s."""
    with stopping(turns.state.config, stop):
        await _stopped(turns, stop, queued)


async def _stopped(turns: Turns, stop: StopSend, queued: int) -> None:
    # A send signalled after the stop stays queued. Runs from before kept the old rule.
    pending = turns.state.pending
    before = pending[:queued] if since(STOP_ONLY_EARLIER) else pending
    if stop.turn is None:
        for send in [s for s in before if stop.request_id in (None, s.request_id)]:
            turns.state.drop(send)
            turns.state.finish(TurnOutcome(request_id=send.request_id, state="stopped"))
    for turn in _targets(turns, stop):
        try:
            await _calls.quick(TranscriptActivities.stop_turn, _ref(turns, turn))
        except ApplicationError as err:
            workflow.logger.warning("stop refused", extra={"turn": turn, "code": err.type})
        turns.acting.wake(turn)  # a waiting turn was abandoned: it ends now


def _targets(turns: Turns, stop: StopSend) -> list[str]:
    if stop.turn is not None:
        return [stop.turn]
    if stop.request_id is not None:
        placed = turns.state.begun.get(stop.request_id)
        return [placed.turn] if placed is not None and placed.turn in turns.state.tasks else []
    return sorted(turns.state.tasks)


def _ref(turns: Turns, turn: str) -> TurnRef:
    config = turns.state.config
    return TurnRef(store=config.store, conversation=config.conversation, turn=turn, store_id=config.store_id)


async def move_head(turns: Turns, turn: str) -> None:
    """Move the conversation's head to `turn` (a `head` record)."""
    await _calls.quick(TranscriptActivities.move_head, _ref(turns, turn))


async def render(turns: Turns, send: TurnSend) -> RenderResult:
    """The request `send` would make now, once the summaries being made have landed."""
    await workflow.wait_condition(lambda: not turns.state.background)
    return await _calls.model(
        LLMActivities.render_turn, BeginInput(config=turns.state.config, send=send), summary="render"
    )


async def ask_again(turns: Turns, ask: AskAgain) -> AskedAgain:
    """A turn's request sent again, once the summaries being made have landed; nothing is recorded."""
    await workflow.wait_condition(lambda: not turns.state.background)
    return await _calls.model(
        LLMActivities.ask_again, AskAgainInput(config=turns.state.config, ask=ask), summary="ask again"
    )
