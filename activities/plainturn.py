"""The steps of a plain turn: one model call, asked once more when its reply does not fit the outputs.

The turn's request is built from what it is shown (`plan.request_of`), as rendering the send shows it;
its `ended` record carries the answer and the lmcc functai writes for a plain model answer.
"""

from __future__ import annotations

from dataclasses import replace

from core.errors import ErrorCode, ThreadlineError
from core.models import Paused
from store.log.state import Turn
from store.log.topics import topic_usage
from store.log.turns import Answer, done_record
from store.programs.program import Program
from store.records import Record

from .language_model import ModelReply, ModelRequest, Provider
from .plan import request_of
from .steps import Reply, TurnTry, add_usage, with_steers


class PlainTurn:
    """A turn of a program without tools or code (`steps.TurnSteps`): a steer that arrives while the
    model answers cuts the call short, and the model is asked again with it."""

    cut_for_steers = True

    run: TurnTry
    provider: Provider
    model: str
    request: ModelRequest

    def __init__(self, program: Program) -> None:
        self.program = program

    def waits(self, turn: Turn) -> Paused | None:
        """Never: nothing in a plain turn asks a person."""
        return None

    async def prepare(self, run: TurnTry, provider: Provider, *, model: str, name: str) -> None:
        """The request the turn makes, from what it is shown and its inputs."""
        self.run, self.provider, self.model = run, provider, model
        inputs = run.conversation.log.turns[run.turn].inputs
        self.request = request_of(self.program, run.shown, inputs, model=name)

    async def answer(self) -> Reply:
        """Call the model, shown every steer the turn took after its own message; a reply that does not
        fit the outputs gets one repair request (the usage of both counts)."""
        await self.run.take_steers(self.run.asked)
        request = replace(self.request, messages=tuple(with_steers(self.request.messages, self.run.steered())))
        first: ModelReply | None = None
        try:
            first = await self.run.call_model(self.provider, request, self.model)
            return checked(self.program, first)
        except ThreadlineError as err:
            if err.code != ErrorCode.PARSE_FAILED:
                raise
            again = self.run.repaired(request, err)
            repaired = await self.run.call_model(self.provider, again, self.model)
            return replace(
                checked(self.program, repaired), usage=add_usage(first.usage if first else {}, repaired.usage)
            )

    def ended(self, turn: Turn, reply: ModelReply, seconds: float) -> Record:
        """The `ended` record of the turn `reply` answered; its usage counts the topic call too."""
        log = self.run.conversation.log
        usage = add_usage(reply.usage, topic_usage(log, turn.record.get("request_id")))
        answer = Answer(reply.outputs, model=reply.model, usage=usage, seconds=seconds)
        return done_record(log, self.program, turn.id, answer, attempt=self.run.owned, saw=self.run.saw)

    def error(self, err: ThreadlineError) -> ThreadlineError:
        """The error itself: its code and message, no prompt text."""
        return err


def checked(program: Program, reply: ModelReply) -> ModelReply:
    """`reply` with its outputs checked against `program`'s (`parse-failed`); a reply that asks for tools
    answers nothing yet."""
    if reply.stop == "tools":
        return reply
    return replace(reply, outputs=program.validate_outputs(reply.outputs))
