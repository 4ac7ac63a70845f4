"""A turn of a program with code: its body runs here, in the turn's activity, as the turn.

Beside the AI turn (`run.TurnRun`, the model answers) and the tool turn (`toolturn.ToolTurnRun`,
step by step), this turn runs the program's Python function with the turn's inputs. The helpers it
calls ask the turn's model (`helpers.HelperCalls`), recorded as they go, so a try that runs the code
again (a retry after a crash, a resume) takes their recorded answers and goes on where it stopped.
While the code runs, the turn heartbeats, keeps its lease and watches the log for a stop or a takeover
as every turn does; its end is one `ended` record like a functai module's: no `lmcc`, the code's
value, the last model that answered, the usage of every helper call.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from typing import Any, cast

from core.errors import ErrorCode, ThreadlineError
from core.models import Ended, HelperMemory, RunResult, Yielded
from store.backends.reader import now
from store.log.state import Turn
from store.programs.code import CodeProgram, running_in
from store.records import Record, ended_record

from .helpers import HelperCalls
from .helpertools import Halt
from .language_model import ModelReply, ModelRequest, Provider
from .plan import shown_for_run
from .run import Reply
from .toolturn import ToolTurnRun, _since_turn


class CodeTurnRun(ToolTurnRun):
    """One try at a turn of a program with code."""

    helpers: HelperCalls | None = None

    async def execute(self, provider: Provider, *, model: str, name: str) -> RunResult:
        """Claim the turn if it needs it, run its code (its helpers ask `model`), and end the turn."""
        early = await self._settle(await self.conversation.turn(self.turn))
        if early is not None:
            return early
        turn = await self.conversation.turn(self.turn)
        self.shown = shown_for_run(self.conversation.log, self.program, self.turn, self.rule, now=now())
        self.helpers = HelperCalls(self, provider, model=model, name=name, turn=turn)
        if self.streams is not None:
            self.stream = self.streams.writer(self.turn, self.owned)
        asked = ModelRequest(model=name, program=self.program.name, instruction="", messages=(), outputs=())
        try:
            return await self._run(provider, asked, model)
        finally:
            if self.stream is not None:
                self.stream.close()

    async def _ask(self, provider: Provider, request: ModelRequest, model: str) -> Reply:
        """Run the code; its value as the turn's answer (the outputs a functai module writes)."""
        helpers = cast(HelperCalls, self.helpers)
        try:
            value = await self._body(helpers, self.conversation.log.turns[self.turn].inputs)
        except Halt as halt:
            if halt.result is None:
                raise asyncio.CancelledError from None
            return cast(Reply, halt.result)
        except asyncio.CancelledError:
            helpers.stopped = True  # a body in a thread stops at its next helper call
            raise
        except ThreadlineError:
            raise
        except Exception as exc:
            raise code_failed(self.program.name, exc) from exc
        outputs = self._returned(value)
        return ModelReply(outputs=outputs, model=helpers.answered_by or model, usage=helpers.usage)

    async def _body(self, helpers: HelperCalls, inputs: dict[str, Any]) -> Any:
        program = cast(CodeProgram, self.program)
        body = program.body
        if body is None:
            raise ThreadlineError(ErrorCode.PROGRAM_INVALID, f"{program.name} has no code to run")
        given = {name: program.typed(name, value) for name, value in inputs.items()}
        with running_in(helpers):
            if inspect.iscoroutinefunction(body):
                return await body(**given)
            context = contextvars.copy_context()  # the thread sees the turn its helpers ask in
            return await asyncio.to_thread(context.run, functools.partial(body, **given))

    def _returned(self, value: Any) -> dict[str, Any]:
        try:
            return self.program.validate_outputs({self.program.answer: value})
        except ThreadlineError as err:
            message = f"{self.program.name}'s code returned a value that does not fit its return type"
            raise ThreadlineError(ErrorCode.PROGRAM_FAILED, message) from err

    def _done(self, turn: Turn, reply: ModelReply, seconds: float) -> Record:
        return ended_record(
            turn.id,
            attempt=self.owned,
            state="done",
            saw=self.saw,
            seconds=_since_turn(turn) if self.owned == 1 else seconds,
            usage=reply.usage,
            outputs=reply.outputs,
            value=reply.outputs.get(self.program.answer),
            model=reply.model,
        )

    async def fail(self, err: ThreadlineError) -> RunResult:
        """End the turn `failed`; an exception of the code keeps its type and message, as functai's does."""
        error = err.details.get("error")
        if err.code != ErrorCode.PROGRAM_FAILED or not isinstance(error, dict):
            return await super().fail(err)
        body = {**error, "code": str(err.code)}
        return await self._end(
            lambda t: ended_record(t.id, attempt=self.owned, state="failed", saw=self.saw, error=body)
        )

    # ----- what the helpers use of the try

    @property
    def remembers(self) -> dict[str, HelperMemory]:
        """What each helper remembers in this turn (its send's setting, else the conversation's)."""
        return self.input.send.memory(self.input.config)

    async def record(self, *records: Record) -> Ended | Yielded | None:
        """Append `records` unless the turn ended or another writer took it (then how it stands)."""
        standing = await self._record(*records)
        return standing if isinstance(standing, Ended | Yielded) else None

    async def call_model(self, provider: Provider, request: ModelRequest, model: str) -> ModelReply:
        """Ask the model (streamed into the turn's stream, logged as every model request is)."""
        return await self._call(provider, request, model)

    def repaired(self, request: ModelRequest, err: ThreadlineError) -> ModelRequest:
        """`request` asked again after a reply that did not fit, saying what was wrong."""
        return self._repair(request, err)


def code_failed(program: str, exc: BaseException) -> ThreadlineError:
    """The error of a turn whose code raised `exc`: its type in the message; type and text in the record."""
    message = f"{program}'s code raised {type(exc).__name__}; the turn's error holds its message"
    return ThreadlineError(ErrorCode.PROGRAM_FAILED, message, error={"type": type(exc).__name__, "message": str(exc)})
