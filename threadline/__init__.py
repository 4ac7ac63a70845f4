"""Threadline: durable multi-turn language-model conversations on Temporal.

The public face: `connect()` gives a `Threadline`, whose `conversation(...)` handles send turns,
read them, branch, move the head and stop. Errors are `ThreadlineError` with a stable `code`.
"""

from __future__ import annotations

from core.errors import ErrorCode, ThreadlineError
from core.models import ContextRule, TurnOutcome
from core.settings import Settings
from store.program import Program
from store.tools import Tool, tool

from .acting import Cancelled, LiveTurn, Waiting
from .client import Conversation, Piece, Threadline, TurnHandle, connect
from .reading import Turn
from .turnstream import TurnStream

# `@threadline.program` over a typed function makes it a program: its docstring is the
# instruction, its parameters the inputs, its return type the `result` output, with the fields and
# signature functai gives the same function. Workers register the programs of the modules named
# in THREADLINE_PROGRAMS. `@threadline.program(tools=[...], approve=...)` gives the model tools.
# `@threadline.tool` or `@threadline.tool(effects="reads")` makes a typed function a tool. A turn whose
# tool call needs a person raises `Waiting`; `await err.turn.approve()` answers, and the turn goes on.
program = Program.from_function

__all__ = [
    "Cancelled",
    "ContextRule",
    "Conversation",
    "ErrorCode",
    "LiveTurn",
    "Piece",
    "Program",
    "Settings",
    "Threadline",
    "ThreadlineError",
    "Tool",
    "Turn",
    "TurnHandle",
    "TurnOutcome",
    "TurnStream",
    "Waiting",
    "connect",
    "program",
    "tool",
]
