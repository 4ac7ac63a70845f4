"""Stopping a conversation's turns and closing its workflow (`chat.stop()`, `chat.close()`).

A stop is a `stop` signal, durable while no worker runs; a close is the `close` update, or, with no
worker to run it, Temporal's termination. Neither touches the records: the next send reopens. A close
also deletes the conversation's schedules (a schedule ends with its conversation).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from temporalio.client import WorkflowHandle

from core.errors import ErrorCode, ThreadlineError
from core.models import StopSend
from store.log.state import Log

from .crossing import crossing
from .delivery import Delivery
from .reading import find_turn
from .scheduling import end_schedules


@dataclass(frozen=True, slots=True)
class Closing:
    """How `close()` went: whether a run was open, whether it had to be terminated (no worker), and
    how many queued sends it answered `conversation-closed`."""

    was_open: bool
    forced: bool = False
    answered: int = 0
    schedules: int = 0
    """How many of its schedules were deleted."""


async def stop(delivery: Delivery, log: Log, turn: str | None) -> None:
    """Stop `turn` (None: every running and queued one) of the conversation whose log is `log`."""
    if turn is not None:
        find_turn(log, turn, delivery.id)
    if log.n:
        await delivery.signal(StopSend(turn=turn))
        return
    handle = await delivery.workflow()
    with crossing():  # nothing recorded yet: only an open workflow can hold queued sends
        await handle.signal("stop", StopSend(turn=turn))


async def close(delivery: Delivery, log: Log) -> Closing:
    """Close the workflow of the conversation whose log is `log` and end its schedules; see `Conversation.close`."""
    try:
        closing = await _close(delivery, log)
    except ThreadlineError as err:
        if err.code != ErrorCode.CONVERSATION_NOT_FOUND:
            raise
        if not (ended := await end_schedules(delivery)):
            raise
        return Closing(was_open=False, schedules=ended)  # nothing recorded yet, only schedules
    return dataclasses.replace(closing, schedules=await end_schedules(delivery))


async def _close(delivery: Delivery, log: Log) -> Closing:
    handle = await delivery.workflow()
    if not await delivery.is_open():
        if not log.n:
            raise ThreadlineError(ErrorCode.CONVERSATION_NOT_FOUND, f"conversation {delivery.id} has no records")
        return Closing(was_open=False)
    if not await delivery.tl.workers_poll():
        await _terminate(handle)
        return Closing(was_open=True, forced=True)
    with crossing():
        answered = await handle.execute_update("close", result_type=int)
    return Closing(was_open=True, answered=answered)


async def _terminate(handle: WorkflowHandle[Any, Any]) -> None:
    try:
        with crossing():
            await handle.terminate(reason="closed while no worker ran; its records stay and a new turn reopens it")
    except ThreadlineError as err:
        if err.code != ErrorCode.CONVERSATION_NOT_FOUND:  # else it closed on its own meanwhile
            raise
