"""The steps of a turn whose program has tools: replayed from the log, then one step further.

Each call of `run_turn` for such a turn rebuilds the exchange from the turn's records: a model reply
recorded under the same request is taken instead of asking again (`reply` records, written before
anything else, so a crash never pays twice), and a tool result recorded for the same call is taken
instead of running it again. It then goes one step further: the model answers (the turn ends
`done`), or asks for tools, which the workflow runs, each as its own activity (`ToolRound`), or a
call needs a person (a `waiting` record, and `Paused`). Whatever `approve` asks about, it asks as
functai 1.2.0 does, so approvals answered in either engine count in both.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

from core.errors import ErrorCode, ThreadlineError
from core.models import Paused, ToolRef, ToolRound
from store.log.state import Turn
from store.log.toolturn import (
    Answer,
    Approval,
    ToolBook,
    all_calls,
    approval_item,
    approval_record,
    denial,
    reply_key,
    reply_record,
    site_of,
    tool_lmcc,
    tool_steps,
    verdict_of,
    waiting_record,
)
from store.log.topics import topic_usage
from store.programs.approvals import decide, tool_path
from store.programs.program import Program
from store.programs.tools import ToolCall
from store.records import Record, ended_record

from .language_model import Message, ModelReply, ModelRequest, Provider
from .plainturn import checked
from .plan import request_of
from .replies import reply_of, request_document, response_of
from .steps import Reply, TurnTry, add_usage, since_turn, waits_for_person, with_steers

MAX_STEPS = 8
"""Model calls per turn before it fails `step-limit` (functai's default `max_steps`)."""
READ_ATTEMPTS = 3
"""A tool that only reads is tried this often; one that changes things (or says nothing) once."""
TOOL_TIMEOUT_S = 120.0
MISMATCH = "an earlier attempt of this turn recorded another call here; run this one?"


@dataclass(slots=True)
class Exchange:
    """The turn so far in this try: its tool steps, every call, the usage of every reply."""

    messages: list[Message] = field(default_factory=list)
    steps: list[Record] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    invocations: int = 0


@dataclass(slots=True)
class Round:
    """What one reply's calls need: their results so far, the calls to run, the questions to ask."""

    outputs: list[str | None]
    run: list[ToolRef] = field(default_factory=list)
    ask: list[Record] = field(default_factory=list)
    unfinished: bool = False


class ToolTurn:
    """A turn of a program with tools (`steps.TurnSteps`): its request is a plain turn's, asked step by step.
    Steers join it between steps: before a model call, after the tool round before it."""

    cut_for_steers = False

    run: TurnTry
    provider: Provider
    model: str
    request: ModelRequest

    def __init__(self, program: Program) -> None:
        self.program = program
        self._exchange: Exchange | None = None
        self._last_key = ""

    def waits(self, turn: Turn) -> Paused | None:
        """Whether the turn waits for a person's answer, or for one to settle a tool that may have run."""
        return waits_for_person(turn)

    async def prepare(self, run: TurnTry, provider: Provider, *, model: str, name: str) -> None:
        """The request of the turn's first step: a plain turn's, with the program's tools offered."""
        self.run, self.provider, self.model = run, provider, model
        inputs = run.conversation.log.turns[run.turn].inputs
        self.request = request_of(self.program, run.shown, inputs, model=name)

    def error(self, err: ThreadlineError) -> ThreadlineError:
        """The error itself: its code and message, no prompt text."""
        return err

    async def answer(self) -> Reply:
        """Step by step: each reply recorded (or taken from the log), each round of tools decided, until
        the model answers, tools must run, or a person must say."""
        book = ToolBook(await self.run.conversation.turn(self.run.turn))
        so_far, taken = Exchange(), dict[str, int]()
        for step in range(MAX_STEPS):
            await self._steer(step, so_far, book, taken)
            asked = replace(self.request, messages=(*self.request.messages, *so_far.messages))
            reply = await self._step(asked, book, taken)
            if not isinstance(reply, ModelReply):
                return reply
            so_far.usage = add_usage(so_far.usage, reply.usage)
            if reply.stop == "answered":
                self._exchange = so_far
                return replace(reply, usage=so_far.usage)
            decided = await self._round(reply.calls, book, so_far.invocations)
            if decided.run or decided.ask or decided.unfinished:
                return await self._pause(decided)
            outputs = [o or "" for o in decided.outputs]
            so_far.invocations += len(reply.calls)
            so_far.calls += reply.calls
            so_far.steps += tool_steps(reply.calls, outputs)
            so_far.messages.append(Message("assistant", reply.text, calls=reply.calls))
            so_far.messages += [Message("tool", o, call_id=c.id) for c, o in zip(reply.calls, outputs, strict=True)]
        raise ThreadlineError(ErrorCode.STEP_LIMIT, f"no answer after {MAX_STEPS} model steps; ask for less per turn")

    async def _steer(self, step: int, so_far: Exchange, book: ToolBook, taken: dict[str, int]) -> None:
        """Add to the exchange the steers taken before model step `step`: those a try took here before,
        then, unless that step's reply is recorded already (a resume), the ones that arrived since."""
        steers = [s for s in self.run.steered() if s.step == step]
        messages = with_steers(so_far.messages, steers)
        asked = replace(self.request, messages=(*self.request.messages, *messages))
        key = reply_key(request_document(asked))
        if taken.get(key, 0) >= len(book.replies.get(key, [])):
            messages = with_steers(messages, await self.run.take_steers(step))
        so_far.messages = messages

    async def _step(
        self, request: ModelRequest, book: ToolBook, taken: dict[str, int], *, repair: bool = True
    ) -> Reply:
        """The reply to `request`: the one recorded for it, else the model's, recorded before it is used;
        an answer that does not fit the outputs is asked for once more (both replies count)."""
        key = reply_key(request_document(request))
        self._last_key = key
        recorded = book.replies.get(key, [])
        try:
            if taken.get(key, 0) < len(recorded):
                taken[key] = taken.get(key, 0) + 1
                reply = reply_of(recorded[taken[key] - 1].get("response"))
            else:
                reply = await self.run.call_model(self.provider, request, self.model)
                response = response_of(reply)
                kept = await self.run.record(
                    reply_record(self.run.turn, attempt=self.run.owned, key=key, response=response)
                )
                if kept is not None:
                    return kept
            return checked(self.program, reply)
        except ThreadlineError as err:
            if err.code != ErrorCode.PARSE_FAILED or not repair:
                raise
            used = reply.usage if "reply" in locals() else {}
            again = await self._step(self.run.repaired(request, err), book, taken, repair=False)
            return replace(again, usage=add_usage(used, again.usage)) if isinstance(again, ModelReply) else again

    async def _round(self, calls: tuple[ToolCall, ...], book: ToolBook, before: int) -> Round:
        """Decide each call of one reply, in order: its recorded result, a person's answer, or a run."""
        site = site_of(self.program.name)
        out = Round(outputs=[None] * len(calls))
        for i, call in enumerate(calls):
            invocation = before + i + 1
            if book.unfinished(site, invocation):
                out.unfinished = True
                return out
            out.outputs[i] = book.result(site, invocation, call)
            if out.outputs[i] is not None:
                continue
            item, answer = await self._question(call, invocation, book, later=bool(out.ask))
            if answer is None and item is not None:
                out.ask.append(item)
            elif out.ask:
                continue  # later calls wait for the question before them
            elif answer is not None and not answer.yes:
                out.outputs[i] = denial(answer.reason)
            else:
                out.run.append(self._ref(call, invocation, i))
        return out

    async def _question(
        self, call: ToolCall, invocation: int, book: ToolBook, *, later: bool
    ) -> tuple[Record | None, Answer | None]:
        """Whether `call` needs an answer first: the question (None: it needs none) and the answer given.
        An `approve` function is asked only when the call's turn comes (not `later`, behind a question)."""
        site, tool = site_of(self.program.name), self.program.tool(call.name)
        effects = tool.effects if tool is not None else "reads"
        if book.differs(site, invocation, call):  # a result recorded for another call: never feed it
            item = approval_item(
                self.run.turn,
                invocation=invocation,
                call=call,
                effects=effects,
                program=self.program.name,
                question=MISMATCH,
            )
            return item, book.answer(site, invocation, "threadline")
        rule = self.run.approve
        needs = decide(rule, name=call.name, effects=effects, path=tool_path(self.program.name, call.name))
        if needs == "run":
            return None, None
        item = approval_item(
            self.run.turn, invocation=invocation, call=call, effects=effects, program=self.program.name
        )
        answer = book.answer(site, invocation)
        if answer is None and needs == "function" and callable(rule):
            if later:
                return None, None
            answer = verdict_of(await asyncio.to_thread(rule, Approval.of(item)))
            await self.run.record(approval_record(self.run.turn, item, yes=answer.yes, by=None, reason=answer.reason))
        return item, answer

    def _ref(self, call: ToolCall, invocation: int, index: int) -> ToolRef:
        tool = self.program.tool(call.name)
        reads = tool is None or tool.effects == "reads"
        attempts = (tool.attempts if tool is not None else None) or (READ_ATTEMPTS if reads else 1)
        timeout = (tool.timeout if tool is not None else None) or TOOL_TIMEOUT_S
        return ToolRef(
            key=self._last_key,
            index=index,
            invocation=invocation,
            site=site_of(self.program.name),
            name=call.name,
            reads=reads,
            timeout_s=timeout,
            attempts=attempts,
        )

    async def _pause(self, decided: Round) -> Reply:
        owned = self.run.owned
        if decided.run:
            return ToolRound(attempt=owned, calls=decided.run)
        if decided.unfinished:
            return Paused(attempt=owned, reason="unfinished")
        waiting = waiting_record(self.run.turn, attempt=owned, approvals=decided.ask, saw=self.run.saw)
        kept = await self.run.record(waiting)
        return kept or Paused(attempt=owned, approvals=decided.ask)

    def ended(self, turn: Turn, reply: ModelReply, seconds: float) -> Record:
        """The `ended` record of the turn `reply` answered: every call of every step in its outputs and lmcc."""
        so_far, owned = self._exchange or Exchange(), self.run.owned
        outputs = {**reply.outputs, "calls": all_calls(so_far.calls)}
        lmcc = tool_lmcc(
            signature=self.program.signature,
            inputs=turn.inputs,
            tools=[t.spec for t in self.program.tools],
            steps=so_far.steps,
            outputs=reply.outputs,
        )
        return ended_record(
            turn.id,
            attempt=owned,
            state="done",
            saw=self.run.saw,
            seconds=since_turn(turn) if owned == 1 else seconds,
            usage=add_usage(reply.usage, topic_usage(self.run.conversation.log, turn.record.get("request_id"))),
            outputs=outputs,
            value=reply.outputs.get(self.program.answer),
            lmcc=lmcc,
            model=reply.model,
        )
