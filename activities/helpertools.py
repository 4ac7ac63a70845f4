"""The tools a helper's model calls inside a program's turn: run in the turn's activity, between its
model steps, recorded as functai 1.2.0 records a call's tools (`tool` records at the helper's site).

A result recorded for this very call (same site, invocation, tool and input; any engine's) is taken
instead of running it again; a tool that started and has no result may have run, and a person settles
it (the turn pauses, `unfinished`); a call the `approve` rule asks about pauses the turn `waiting` until
a person answers (`approval` records, read again when the turn is resumed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

from core.errors import ThreadlineError
from core.models import Paused, RunResult
from store.log.toolturn import (
    Answer,
    Approval,
    ToolBook,
    approval_item,
    approval_record,
    denial,
    tool_record,
    verdict_of,
    waiting_record,
)
from store.programs.approvals import Approve, decide, tool_path
from store.programs.program import Program
from store.programs.tools import Tool, ToolCall, unknown_tool_text
from store.records import Record

from .steps import TurnTry

logger = structlog.get_logger(__name__)

TOOL_TIMEOUT_S = 120.0
MISMATCH = "an earlier attempt of this turn recorded another call here; run this one?"


class Halt(BaseException):
    """The turn stops where its code is: it waits for a person, or it ended or was taken over meanwhile
    (`result`: how the try ends; None when it was stopped). A BaseException, so a program's
    `except Exception` never swallows it."""

    def __init__(self, result: RunResult | None) -> None:
        super().__init__("the turn stops here")
        self.result = result


class HelperTools:
    """The tool calls of the helpers of one try at a program's turn."""

    def __init__(self, run: TurnTry, book: ToolBook) -> None:
        self.run = run
        self.book = book

    def rule(self, helper: Program) -> Approve:
        """The `approve` rule of a helper's tools: the turn's or conversation's, else the helper's own."""
        chosen = self.run.approve
        return chosen if chosen is not None else helper.approve

    async def output(self, helper: Program, site: str, invocation: int, call: ToolCall) -> str:
        """What the model is told `call` gave: its recorded result, a refusal, or what running it gave.

        Raises:
            Halt: the turn pauses for a person (an approval, or a tool that may have run).
        """
        recorded = self.book.result(site, invocation, call)
        if recorded is not None:
            return recorded
        if self.book.unfinished(site, invocation):
            raise Halt(Paused(attempt=self.run.owned, reason="unfinished"))
        tool = helper.tool(call.name)
        if tool is None:
            return unknown_tool_text(call.name)
        answer = await self._allowed(helper, site, invocation, call)
        if answer is not None and not answer.yes:
            return denial(answer.reason)
        try:
            tool.validate_input(call.input)
        except ThreadlineError as err:  # nothing runs: the model is told what did not fit
            return f"error: {err.message}"
        return await self._run(tool, site, invocation, call)

    async def _run(self, tool: Tool, site: str, invocation: int, call: ToolCall) -> str:
        """Run `call` once, recorded: `started` first for a tool that may change things, `done` after."""
        turn, attempt = self.run.turn, self.run.owned
        if tool.effects != "reads":
            started = tool_record(
                turn, "started", site=site, invocation=invocation, call=call, attempt=attempt, effects=tool.effects
            )
            await self._keep(started)
        logger.info("tool.started", turn=turn, tool=call.name, invocation=invocation)
        output = await _within(tool.call(call.input), tool.timeout or TOOL_TIMEOUT_S)
        done = tool_record(turn, "done", site=site, invocation=invocation, call=call, attempt=attempt, output=output)
        await self._keep(done)
        return output

    async def _allowed(self, helper: Program, site: str, invocation: int, call: ToolCall) -> Answer | None:
        """The answer the call needs before it runs (None: it needs none), asking a function in place of a
        person, or pausing the turn for a person."""
        tool = helper.tool(call.name)
        effects = tool.effects if tool is not None else "reads"
        rule = self.rule(helper)
        differs = self.book.differs(site, invocation, call)  # a result recorded for another call: never fed
        needs = (
            "person"
            if differs
            else decide(rule, name=call.name, effects=effects, path=tool_path(helper.name, call.name))
        )
        if needs == "run":
            return None
        item = self._item(helper, site, invocation, call, effects, MISMATCH if differs else None)
        answer = self.book.answer(site, invocation, "threadline" if differs else "approval")
        if answer is None and needs == "function" and callable(rule):
            answer = verdict_of(await asyncio.to_thread(rule, Approval.of(item)))
            await self._keep(approval_record(self.run.turn, item, yes=answer.yes, by=None, reason=answer.reason))
        if answer is None:
            waiting = waiting_record(self.run.turn, attempt=self.run.owned, approvals=[item], saw=self.run.saw)
            await self._keep(waiting)
            raise Halt(Paused(attempt=self.run.owned, approvals=[item]))
        return answer

    def _item(
        self, helper: Program, site: str, invocation: int, call: ToolCall, effects: str | None, question: str | None
    ) -> Record:
        """The question a `waiting` record asks about `call`: at the helper's site, on its path."""
        item = approval_item(
            self.run.turn, invocation=invocation, call=call, effects=effects, program=helper.name, question=question
        )
        item.update(path=f"{self.run.program.name}/{helper.name}/{call.name}", site=site)
        return item

    async def _keep(self, record: Record) -> None:
        halted = await self.run.record(record)
        if halted is not None:
            raise Halt(halted)


async def _within(running: Coroutine[Any, Any, str], seconds: float) -> str:
    """What the tool returned, or what the model is told when it took longer than `seconds`."""
    try:
        return await asyncio.wait_for(running, seconds)
    except TimeoutError:
        return f"error: the tool did not finish within {seconds:g} s"
