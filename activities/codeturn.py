"""The steps of a turn of a program with code: its body runs here, in the turn's activity, as the turn.

Beside the plain turn (`plainturn.PlainTurn`, the model answers) and the tool turn
(`toolturn.ToolTurn`, step by step), this turn runs the program's Python function with the turn's
inputs. The helpers it calls ask the turn's model (`helpers.HelperCalls`), recorded as they go, so a
try that runs the code again (a retry after a crash, a resume) takes their recorded answers and goes
on where it stopped. Its runner heartbeats, keeps the lease and watches the log for a stop or a
takeover as for every turn; its end is one `ended` record like a functai module's: no `lmcc`, the
code's value, the last model that answered, the usage of every helper call.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Mapping
from typing import Any, cast

from core.errors import ErrorCode, ThreadlineError
from core.models import Paused
from store.log.state import Turn
from store.programs.code import CodeProgram, running_in
from store.programs.program import Program
from store.records import Record, ended_record

from .helpers import HelperCalls
from .helpertools import Halt
from .language_model import ModelReply, Provider
from .steps import Reply, TurnTry, since_turn, waits_for_person


class CodeTurn:
    """A turn of a program with code (`steps.TurnSteps`): its body, and the helper calls it makes. It
    takes no steers: a steer sent while it runs becomes the next turn."""

    cut_for_steers = False
    run: TurnTry
    model: str
    helpers: HelperCalls

    def __init__(self, program: Program) -> None:
        self.program = program

    def waits(self, turn: Turn) -> Paused | None:
        """Whether a helper's tool call waits for a person's answer, or for one to settle a tool that may have run."""
        return waits_for_person(turn)

    async def prepare(self, run: TurnTry, provider: Provider, *, model: str, name: str) -> None:
        """The try's helper calls: they ask `model` and take what the turn recorded so far."""
        turn = await run.conversation.turn(run.turn)
        self.run, self.model = run, model
        self.helpers = HelperCalls(run, provider, model=model, name=name, turn=turn)

    async def answer(self) -> Reply:
        """Run the code; its value as the turn's answer (the outputs a functai module writes)."""
        helpers = self.helpers
        try:
            value = await self._body(helpers, self.run.conversation.log.turns[self.run.turn].inputs)
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
        return ModelReply(outputs=outputs, model=helpers.answered_by or self.model, usage=helpers.usage)

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

    def ended(self, turn: Turn, reply: ModelReply, seconds: float) -> Record:
        """The `ended` record of the turn whose code returned: no lmcc, as a functai module's."""
        owned = self.run.owned
        return ended_record(
            turn.id,
            attempt=owned,
            state="done",
            saw=self.run.saw,
            seconds=since_turn(turn) if owned == 1 else seconds,
            usage=reply.usage,
            outputs=reply.outputs,
            value=reply.outputs.get(self.program.answer),
            model=reply.model,
        )

    def error(self, err: ThreadlineError) -> ThreadlineError | Mapping[str, Any]:
        """An exception of the code keeps its type and message, as functai's does; any other error itself."""
        error = err.details.get("error")
        if err.code != ErrorCode.PROGRAM_FAILED or not isinstance(error, dict):
            return err
        return {**error, "code": str(err.code)}


def code_failed(program: str, exc: BaseException) -> ThreadlineError:
    """The error of a turn whose code raised `exc`: its type in the message; type and text in the record."""
    message = f"{program}'s code raised {type(exc).__name__}; the turn's error holds its message"
    return ThreadlineError(ErrorCode.PROGRAM_FAILED, message, error={"type": type(exc).__name__, "message": str(exc)})
