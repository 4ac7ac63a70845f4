"""The helpers a program's code calls during its turn: each asks the turn's model through the worker's
providers (streamed, its usage counted), recorded as functai 1.2.0 records it.

Every model reply is a `reply` record (written before it is used), and a remembered helper's call a
`call` record (docs/format-1.md 2.9, 4.11). A try of the turn that runs its code again (a retry after a
crash here, or a resume of a turn another engine left) takes each helper's answer from the log instead
of paying again: the reply recorded for the very same request (Threadline's own keys), or the `call`
recorded for the very same question (same helper, site, inputs and what it was shown), whichever
engine recorded it. Nothing else is taken: what no record answers exactly is asked again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from core.errors import ErrorCode, ThreadlineError
from core.models import HelperMemory
from store.backends.reader import now
from store.log.helper_memory import CallBook, call_record, helper_site, remembered_calls, shown_calls
from store.log.state import Turn
from store.log.toolturn import ToolBook, all_calls, reply_key, reply_record, tool_lmcc, tool_steps
from store.log.turns import lmcc
from store.programs.code import call_identity, refuse_nested, remembered
from store.programs.program import Program
from store.records import Record, uuid7

from .helpertools import Halt, HelperTools
from .language_model import Message, ModelReply, ModelRequest, Provider, build_request
from .replies import reply_of, request_document, response_of
from .steps import TurnTry, add_usage

MAX_STEPS = 8
"""Model calls per helper call before it fails `step-limit` (functai's default `max_steps`)."""


class HelperCalls:
    """The helper calls of one try at a program's turn (the `TurnCalls` its code reaches).

    Args:
        run: The try at the turn.
        provider: The provider of the turn's model; `model` the model string, `name` its model there.
        turn: The turn as the log held it when the try began.
    """

    def __init__(self, run: TurnTry, provider: Provider, *, model: str, name: str, turn: Turn) -> None:
        self.run, self.provider, self.model, self.name = run, provider, model, name
        self.loop = asyncio.get_running_loop()
        self.book, self.calls = ToolBook(turn), CallBook(list(turn.calls))
        self.tools = HelperTools(run, self.book)
        self.counts: dict[str, int] = {}
        self.taken: dict[str, int] = {}
        self.made: list[Record] = []
        """The remembered calls of this try so far (what `"turn"` memory shows)."""
        self.usage: dict[str, int] = {}
        self.answered_by: str | None = None
        self.asked = 0
        self.stopped = False

    # ----- what the program's code reaches

    def ask(self, helper: Program, inputs: dict[str, Any]) -> Any:
        """`helper`'s answer: awaitable on the turn's event loop (an async body), else waited for here."""
        call = self.call(helper, inputs)
        try:
            on_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            return call
        return asyncio.run_coroutine_threadsafe(call, self.loop).result()

    def rows(self) -> list[dict[str, Any]]:
        """`earlier()`: the conversation so far, a copy the code may change."""
        return [dict(row) for row in self.run.shown.rows]

    def nested(self, program: str, store: str, conversation: str) -> None:
        """Refuse a send to another conversation from this turn's code, unless it is declared `own`.

        Raises:
            ThreadlineError: `conversation-nested`.
        """
        refuse_nested(self.run.remembers, self.run.input.config, program, store, conversation)

    # ----- one helper call

    async def call(self, helper: Program, inputs: Mapping[str, Any]) -> Any:
        """Ask `helper` (or take its recorded answer), record the call if remembered; its typed answer."""
        if self.stopped:
            raise Halt(None)
        bound = helper.validate_inputs(inputs)
        count = self.counts[helper.name] = self.counts.get(helper.name, 0) + 1
        site = helper_site(self.run.program.name, helper.name, count)
        memory = remembered(self.run.remembers, helper.name)
        saw, exchanges = shown_calls(self._earlier(memory), helper, memory)
        identity = call_identity(helper)
        found = self.calls.found(site, identity, bound, saw) if memory is not None else None
        if found is not None and not _fits(helper, found["lmcc"].get("outputs")):
            found = None  # recorded by an engine whose answer does not fit the helper here: asked again
        if found is not None:
            outputs = dict(found["lmcc"].get("outputs") or {})
            mine = found if found.get("attempt") == self.run.owned else None  # this attempt's own, kept already
            made: Record | None = mine or await self._remember(
                site, identity, found["lmcc"], saw, was=str(found.get("call"))
            )
        else:
            outputs, turn = await self._answer(helper, site, exchanges, bound)
            made = await self._remember(site, identity, turn, saw) if memory is not None else None
        if made is not None:
            self.made.append(made)
        return helper.typed(helper.answer, outputs.get(helper.answer))

    def _earlier(self, memory: HelperMemory | None) -> list[Record]:
        """The calls a helper with `memory` may be shown: this try's, after the branch's for `conversation`."""
        if memory is None:
            return []
        if memory.mode != "conversation":
            return list(self.made)
        log = self.run.conversation.log
        return [*remembered_calls(log, log.turns[self.run.turn].parent, now()), *self.made]

    async def _remember(
        self, site: str, identity: Mapping[str, Any], turn: Mapping[str, Any], saw: list[Record], *, was: str = ""
    ) -> Record:
        record = call_record(
            self.run.turn, attempt=self.run.owned, call=uuid7(), site=site, program=identity, lmcc=turn, saw=saw
        )
        if was:
            self.calls.renamed[was] = record["call"]
        halted = await self.run.record(record)
        if halted is not None:
            raise Halt(halted)
        return record

    async def _answer(
        self, helper: Program, site: str, exchanges: list[dict[str, Any]], inputs: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The helper's outputs and lmcc turn: its model asked (or its recorded replies taken), its tools
        run between the steps."""
        request = build_request(helper, exchanges, inputs, model=self.name)
        if self.asked and self.run.stream is not None:
            self.run.stream.write({"restart": True})  # the turn's stream shows the helper writing now
        self.asked += 1
        steps: list[Record] = []
        calls: list[Any] = []
        messages: list[Message] = []
        for _ in range(MAX_STEPS):
            reply = await self._reply(helper, replace(request, messages=(*request.messages, *messages)))
            if reply.stop == "answered":
                return self._finished(helper, inputs, reply, steps, calls)
            invocation = len(calls)
            outputs = [await self.tools.output(helper, site, invocation + i + 1, c) for i, c in enumerate(reply.calls)]
            calls += reply.calls
            steps += tool_steps(reply.calls, outputs)
            messages.append(Message("assistant", reply.text, calls=reply.calls))
            messages += [Message("tool", o, call_id=c.id) for c, o in zip(reply.calls, outputs, strict=True)]
        raise ThreadlineError(ErrorCode.STEP_LIMIT, f"{helper.name}: no answer after {MAX_STEPS} model steps")

    @staticmethod
    def _finished(
        helper: Program, inputs: dict[str, Any], reply: ModelReply, steps: list[Record], calls: list[Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if not helper.tools:
            return dict(reply.outputs), lmcc(helper, inputs, reply.outputs)
        turn = tool_lmcc(
            signature=helper.signature,
            inputs=inputs,
            tools=[t.spec for t in helper.tools],
            steps=steps,
            outputs=reply.outputs,
        )
        return {**reply.outputs, "calls": all_calls(calls)}, turn

    async def _reply(self, helper: Program, request: ModelRequest, *, repair: bool = True) -> ModelReply:
        """The reply to `request`: the one recorded for it, else the model's, recorded before it is used;
        one that does not fit the helper's outputs is asked for once more."""
        key = reply_key(request_document(request))
        recorded = self.book.replies.get(key, [])
        seen = self.taken.get(key, 0)
        if seen < len(recorded):
            self.taken[key] = seen + 1
            reply = reply_of(recorded[seen].get("response"))
        else:
            reply = await self.run.call_model(self.provider, request, self.model)
            halted = await self.run.record(
                reply_record(self.run.turn, attempt=self.run.owned, key=key, response=response_of(reply))
            )
            if halted is not None:
                raise Halt(halted)
        self.usage = add_usage(self.usage, reply.usage)
        self.answered_by = reply.model or self.answered_by
        if reply.stop == "tools":
            return reply
        try:
            return replace(reply, outputs=helper.validate_outputs(reply.outputs))
        except ThreadlineError as err:
            if err.code != ErrorCode.PARSE_FAILED or not repair:
                raise
            return await self._reply(helper, self.run.repaired(request, err), repair=False)


def _fits(helper: Program, outputs: Any) -> bool:
    """Whether recorded `outputs` hold every output `helper` writes, each of its type."""
    if not isinstance(outputs, Mapping):
        return False
    try:
        helper.validate_outputs({name: outputs.get(name) for name, _ in helper.written})
    except ThreadlineError:
        return False
    return True
