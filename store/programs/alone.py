"""How a program called on its own, outside any conversation, asks its model.

The store layer defines programs but knows no model: the public face sets the one `Alone` a process
uses (`threadline.alone`, imported with `threadline.ai` and `threadline.program`). Nothing is recorded.
"""

from __future__ import annotations

from typing import Any, Protocol

from core.errors import ErrorCode, ThreadlineError


class Alone(Protocol):
    """Answers one call of a program with its model, outside any turn (`program` is a `Program`: this
    module sits below the one that defines it)."""

    def ask(self, program: Any, inputs: dict[str, Any]) -> Any:
        """`program`'s typed answer, waited for here."""
        ...

    async def answer(self, program: Any, inputs: dict[str, Any]) -> Any:
        """`program`'s typed answer, on the caller's event loop."""
        ...


_ALONE: list[Alone] = []


def answers_alone(alone: Alone) -> None:
    """Let programs called outside any turn answer through `alone`."""
    _ALONE[:] = [alone]


def alone(name: str) -> Alone:
    """The process's `Alone`.

    Raises:
        ThreadlineError: `turn-state` when none is set (threadline's public face was not imported).
    """
    if not _ALONE:
        message = f"{name} answers on its own once threadline is imported (import threadline), or in a turn"
        raise ThreadlineError(ErrorCode.TURN_STATE, message)
    return _ALONE[0]
