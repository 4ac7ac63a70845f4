"""Running one tool call of a turn, as its own activity: never twice, always recorded as functai does.

The call is found in the log by reference (the `reply` record that asked for it). A tool that may
change things gets a `started` record (with its input) before it runs and a `done` record (with its
output) after; one that only reads gets the `done` record alone. A call whose result is recorded is
never run again, and one that started and has no result may have run: it runs again only as a retry
of a tool declared to be tried more than once; otherwise a person settles it (`turn-unfinished`).
While the tool runs, the activity heartbeats, renews the turn's lease and watches the log for a stop
or a takeover, as a model call does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Mapping

import structlog
from temporalio import activity

from core.errors import ErrorCode, ThreadlineError
from core.temporal import coded
from core.toolmodels import ToolDone, ToolInput
from store.backends.reader import ConversationLog, LogCache, now
from store.log.state import Log, Turn
from store.log.toolturn import ToolBook, reply_calls, tool_record
from store.programs.program import Program
from store.programs.tools import ToolCall, unknown_tool_text
from store.records import LEASE_RENEW_SECONDS, STOP_POLL_SECONDS, Record, lease_record, parse_time

from .heartbeats import carry
from .observed import executed
from .placing import find_program

logger = structlog.get_logger(__name__)


class ToolActivities:
    """Tool calls for every conversation of this worker.

    Args:
        logs: The worker's conversation logs, by store.
        programs: The programs (and so their tools) by name.
    """

    def __init__(self, logs: LogCache, programs: Mapping[str, Program]) -> None:
        self.logs = logs
        self.programs = dict(programs)

    @activity.defn(name="run_tool")
    @coded
    async def run_tool(self, input: ToolInput) -> ToolDone:
        """Run one tool call of a turn and record its result; nothing when its result is recorded."""
        conversation = await self.logs.open(input.store, input.conversation, input.store_id)
        turn = await conversation.turn(input.turn)
        standing = _standing(turn, input.attempt)
        if standing is not None:
            return ToolDone(state=standing)
        call, ref = find_call(turn, input), input.call
        if _ran(turn, input, call):
            return ToolDone()  # it ran before: never twice
        tool = find_program(self.programs, input.program).tool(call.name)
        if tool is None:
            return await _finish(conversation, input, call, unknown_tool_text(call.name))
        try:
            tool.validate_input(call.input)
        except ThreadlineError as err:  # nothing runs: the model is told what did not fit
            return await _finish(conversation, input, call, f"error: {err.message}")
        if not ref.reads:
            started = tool_record(
                turn.id,
                "started",
                site=ref.site,
                invocation=ref.invocation,
                call=call,
                attempt=input.attempt,
                effects=tool.effects,
            )
            if not await _append(conversation, input, started):
                return ToolDone(state=_standing(await conversation.turn(input.turn), input.attempt) or "ended")
        logger.info("tool.started", turn=turn.id, tool=call.name, invocation=ref.invocation)
        output = await executed(call.name, call.id, call.input, _watched(tool.call(call.input), conversation, input))
        if output is None:
            return ToolDone(state=_standing(await conversation.turn(input.turn), input.attempt) or "stopped")
        return await _finish(conversation, input, call, output)

    @activity.defn(name="fail_tool")
    @coded
    async def fail_tool(self, input: ToolInput) -> ToolDone:
        """A tool call could not run (its tries ran out): record the failure as its result, so the model
        is told, unless it started (then it may have run, and a person settles it)."""
        conversation = await self.logs.open(input.store, input.conversation, input.store_id)
        turn = await conversation.turn(input.turn)
        call, ref = find_call(turn, input), input.call
        book = ToolBook(turn)
        if book.unfinished(ref.site, ref.invocation) or book.result(ref.site, ref.invocation, call) is not None:
            return ToolDone()
        why = input.error.message if input.error else "it did not finish"
        return await _finish(conversation, input, call, f"error: the tool failed: {why}")


def find_call(turn: Turn, input: ToolInput) -> ToolCall:
    """The call `input` refers to, read from the turn's `reply` record."""
    for reply in turn.replies:
        if reply.get("key") == input.call.key:
            calls = reply_calls(reply.get("response"))
            if 0 <= input.call.index < len(calls):
                return calls[input.call.index]
    raise ThreadlineError(
        ErrorCode.INTERNAL, f"turn {turn.id} holds no call {input.call.index} of reply {input.call.key}"
    )


def _ran(turn: Turn, input: ToolInput, call: ToolCall) -> bool:
    """Whether the call's result is recorded (True: it runs no more).

    Raises:
        ThreadlineError: `turn-unfinished` when it started and has no result (it may have run), unless
            this is a retry of a tool declared to be tried more than once.
    """
    ref, book = input.call, ToolBook(turn)
    if book.result(ref.site, ref.invocation, call) is not None:
        return True
    if book.unfinished(ref.site, ref.invocation) and not (activity.info().attempt > 1 and ref.attempts > 1):
        message = f"turn {turn.id}: {call.name} (invocation {ref.invocation}) started and may have run"
        raise ThreadlineError(ErrorCode.TURN_UNFINISHED, message + "; resume it with its result or rerun it")
    return False


def _standing(turn: Turn, attempt: int) -> str | None:
    """`ended`, `taken` or `stopped` when nothing more may be recorded for this attempt; else None."""
    if turn.ended is not None:
        return "ended"
    if turn.attempt > attempt:
        return "taken"
    return "stopped" if turn.stops else None


async def _append(conversation: ConversationLog, input: ToolInput, record: Record) -> bool:
    """Append `record` unless the turn ended, was taken over or asked to stop (the lease fences zombies)."""

    def decide(_: Log, turn: Turn) -> list[Record] | None:
        return None if _standing(turn, input.attempt) else [record]

    turn = await conversation.append_if(input.turn, decide)
    return _standing(turn, input.attempt) is None


async def _finish(conversation: ConversationLog, input: ToolInput, call: ToolCall, output: str) -> ToolDone:
    ref = input.call
    done = tool_record(
        input.turn, "done", site=ref.site, invocation=ref.invocation, call=call, attempt=input.attempt, output=output
    )
    if not await _append(conversation, input, done):
        return ToolDone(state=_standing(await conversation.turn(input.turn), input.attempt) or "ended")
    logger.info("tool.done", turn=input.turn, tool=call.name, invocation=ref.invocation)
    return ToolDone()


async def _watched(run: Awaitable[str], conversation: ConversationLog, input: ToolInput) -> str | None:
    """`run`'s result, while heartbeating (the activity's ticker, `heartbeats`, carrying the invocation),
    renewing the lease and watching for a stop, an end or a takeover (then it is cancelled and None returned)."""
    carry(lambda: {"invocation": input.call.invocation})
    task = asyncio.ensure_future(run)
    renewed = _renewed_at(await conversation.turn(input.turn))
    try:
        while True:
            await asyncio.wait({task}, timeout=STOP_POLL_SECONDS)
            if task.done():
                return task.result()
            turn = await conversation.turn(input.turn)
            if _standing(turn, input.attempt) is not None:
                logger.info("tool.interrupted", turn=input.turn, tool=input.call.name)
                return None
            if time.time() - renewed >= LEASE_RENEW_SECONDS:
                await conversation.append([lease_record(input.turn, attempt=input.attempt, now=now())])
                renewed = time.time()
    finally:
        task.cancel()


def _renewed_at(turn: Turn) -> float:
    """When the turn's lease was last written (a tool that starts late in a lease renews it soon)."""
    return parse_time((turn.lease or turn.record).get("at"))
