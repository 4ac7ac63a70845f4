"""Threadline: durable multi-turn language-model conversations on Temporal.

The public face: `connect()` gives a `Threadline`, whose `conversation(...)` handles (their
choices a `ConversationOptions`, a send's a `SendOptions`) send turns, read them, branch, merge,
rate, move the head and stop, and run guided flows (`FlowBuilder`);
`rated`, `evaluate` and `train_test` learn from the rated turns, and `tl.conversations()` lists
conversations. Errors are `ThreadlineError` with a stable `code`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.context import ContextRule
    from core.errors import ErrorCode, ThreadlineError
    from core.models import TurnOutcome
    from core.schedules import ScheduleInfo
    from core.settings import Settings
    from store.calls.metrics import Metric, metric
    from store.flows.manager import Flow, FlowBuilder
    from store.programs.code import AIFunction, CodeProgram, earlier, remember
    from store.programs.program import Program
    from store.programs.tools import Tool, tool

    from .acting import Cancelled, LiveTurn, Waiting
    from .alone import ai
    from .alone import program as program
    from .client import Conversation, Threadline, connect
    from .delivery import Queued
    from .evaluation import Evaluation, evaluate
    from .guided import Reply
    from .learning import rated, train_test
    from .listing import ConversationInfo, ConversationPage
    from .options import ConversationOptions, SendOptions
    from .reading import Turn
    from .remote import functai_store
    from .transcript import FlowView
    from .turnstream import Piece, TurnHandle, TurnStream

# `@threadline.program` over a typed function makes it a program: its docstring is the
# instruction, its parameters the inputs, its return type the `result` output, with the fields and
# signature functai gives the same function. A body of its own (not only a docstring, `...` or
# `raise NotImplementedError`) makes it a program with code: the body runs as the turn on the worker and
# calls AI functions (`@threadline.ai`), which remember per conversation (`remembers=`, `remember`);
# `earlier()` is the conversation so far inside it. Workers register the programs of the modules named
# in THREADLINE_PROGRAMS. `@threadline.program(tools=[...], approve=...)` gives the model tools.
# `@threadline.tool` or `@threadline.tool(effects="reads")` makes a typed function a tool. A turn whose
# tool call needs a person raises `Waiting`; `await err.turn.approve()` answers, and the turn goes on.

__all__ = [
    "AIFunction",
    "Cancelled",
    "CodeProgram",
    "ContextRule",
    "Conversation",
    "ConversationInfo",
    "ConversationOptions",
    "ConversationPage",
    "ErrorCode",
    "Evaluation",
    "Flow",
    "FlowBuilder",
    "FlowView",
    "LiveTurn",
    "Metric",
    "Piece",
    "Program",
    "Queued",
    "Reply",
    "ScheduleInfo",
    "SendOptions",
    "Settings",
    "Threadline",
    "ThreadlineError",
    "Tool",
    "Turn",
    "TurnHandle",
    "TurnOutcome",
    "TurnStream",
    "Waiting",
    "ai",
    "connect",
    "earlier",
    "evaluate",
    "functai_store",
    "metric",
    "program",
    "rated",
    "remember",
    "tool",
    "train_test",
]

_HOMES = {
    "core.context": ("ContextRule",),
    "core.errors": ("ErrorCode", "ThreadlineError"),
    "core.models": ("TurnOutcome",),
    "core.schedules": ("ScheduleInfo",),
    "core.settings": ("Settings",),
    "store.calls.metrics": ("Metric", "metric"),
    "store.flows.manager": ("Flow", "FlowBuilder"),
    "store.programs.code": ("AIFunction", "CodeProgram", "earlier", "remember"),
    "store.programs.program": ("Program",),
    "store.programs.tools": ("Tool", "tool"),
    ".acting": ("Cancelled", "LiveTurn", "Waiting"),
    ".alone": ("ai", "program"),
    ".client": ("Conversation", "Threadline", "connect"),
    ".delivery": ("Queued",),
    ".evaluation": ("Evaluation", "evaluate"),
    ".guided": ("Reply",),
    ".learning": ("rated", "train_test"),
    ".listing": ("ConversationInfo", "ConversationPage"),
    ".options": ("ConversationOptions", "SendOptions"),
    ".reading": ("Turn",),
    ".remote": ("functai_store",),
    ".transcript": ("FlowView",),
    ".turnstream": ("Piece", "TurnHandle", "TurnStream"),
}
"""The module each public name comes from. They are imported on first use (PEP 562), not with the
package: `threadline.cli` is inside it, and a command such as `threadline --help` should not pay for
Temporal, pydantic and the stores it never touches."""
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

if not TYPE_CHECKING:  # mypy sees the imports above; a typo stays an error there

    def __getattr__(name: str) -> Any:
        home = _HOME_OF.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, __name__), name)
        globals()[name] = value  # once: later reads find it without calling here
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))
