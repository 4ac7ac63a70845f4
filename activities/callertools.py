"""The steps of a turn offered the caller's own functions (`settings.tools` of its `turn` record).

The model is offered them beside the program's tools. A call of one is not run here: it gets a
`tool started` record (its input; it runs at the caller's, so it may have run) and the try ends
with a `waiting` record that asks no question, in one append. The turn then reads `waiting` for
every reader until a resume gives each call's output (`tool given`, docs/format-1.md 4.7), and
the next try takes the outputs as a tool turn takes any recorded result. A program's own tools
run first when one reply asks for both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from core.models import Paused, ToolRef, ToolRound
from store.log.state import Turn
from store.log.toolturn import ToolBook, tool_record, waiting_record
from store.log.topics import topic_usage
from store.log.turns import Answer, done_record
from store.programs.program import Program
from store.programs.tools import ToolCall
from store.records import Record

from .language_model import ModelReply, Provider
from .steps import Reply, TurnTry, add_usage
from .toolturn import Round, ToolTurn


def caller_tools(turn: Turn) -> list[dict[str, Any]]:
    """The caller's functions a turn was offered (`settings.tools` of its `turn` record)."""
    given = (turn.record.get("settings") or {}).get("tools")
    return [dict(t) for t in given if isinstance(t, Mapping)] if isinstance(given, list) else []


def caller_calls(turn: Turn) -> list[Record]:
    """The `started` records of the turn's calls of the caller's functions that have no output yet."""
    names = {str(t.get("name")) for t in caller_tools(turn)}
    return [t for t in turn.unfinished() if t.get("name") in names]


class CallerToolTurn(ToolTurn):
    """A turn whose model may also call the caller's functions (`steps.TurnSteps`)."""

    def __init__(self, program: Program, tools: Sequence[Mapping[str, Any]]) -> None:
        super().__init__(program)
        self.specs = tuple(
            {"name": t["name"], "description": t.get("description") or "", "parameters": t.get("parameters") or {}}
            for t in tools
        )
        self.names = {str(t["name"]) for t in self.specs}
        self._asked: dict[int, ToolCall] = {}

    async def prepare(self, run: TurnTry, provider: Provider, *, model: str, name: str) -> None:
        """A tool turn's request, offering the caller's functions after the program's tools."""
        await super().prepare(run, provider, model=model, name=name)
        self.request = replace(self.request, tools=(*self.request.tools, *self.specs))

    async def _round(self, calls: tuple[ToolCall, ...], book: ToolBook, before: int) -> Round:
        self._asked = {before + i + 1: call for i, call in enumerate(calls)}
        return await super()._round(calls, book, before)

    async def _pause(self, decided: Round) -> Reply:
        theirs = [ref for ref in decided.run if ref.name in self.names]
        if not theirs:
            return await super()._pause(decided)
        ours = [ref for ref in decided.run if ref.name not in self.names]
        if ours:  # the program's tools first; the caller's are decided again in the next step
            return ToolRound(attempt=self.run.owned, calls=ours)
        if decided.ask or decided.unfinished:
            return await super()._pause(replace(decided, run=[]))
        return await self._hand_over(theirs)

    async def _hand_over(self, refs: list[ToolRef]) -> Reply:
        """Record the caller's calls as started and the turn as waiting for their outputs, in one append."""
        owned = self.run.owned
        started = [
            tool_record(
                self.run.turn,
                "started",
                site=ref.site,
                invocation=ref.invocation,
                call=self._asked[ref.invocation],
                attempt=owned,
                effects=None,
            )
            for ref in refs
        ]
        waiting = waiting_record(self.run.turn, attempt=owned, approvals=[], saw=self.run.saw)
        kept = await self.run.record(*started, waiting)
        return kept or Paused(attempt=owned)

    def ended(self, turn: Turn, reply: ModelReply, seconds: float) -> Record:
        """A tool turn's `ended` record; for a program without tools of its own, a plain answer's, whose
        lmcc holds only the program's fields (the calls stay in the turn's `reply` and `tool` records)."""
        if self.program.tools:
            return super().ended(turn, reply, seconds)
        log = self.run.conversation.log
        usage = add_usage(reply.usage, topic_usage(log, turn.record.get("request_id")))
        answer = Answer(reply.outputs, model=reply.model, usage=usage, seconds=seconds)
        return done_record(log, self.program, turn.id, answer, attempt=self.run.owned, saw=self.run.saw)
