"""Threadline: durable multi-turn language-model conversations on Temporal.

The public face: `connect()` gives a `Threadline`, whose `conversation(...)` handles send turns,
read them, branch, move the head and stop. Errors are `ThreadlineError` with a stable `code`.
"""

from __future__ import annotations

from core.errors import ErrorCode, ThreadlineError
from core.models import ContextRule, TurnOutcome
from core.settings import Settings
from store.program import Program

from .client import Conversation, Threadline, TurnHandle, connect
from .turns import Turn

__all__ = [
    "ContextRule",
    "Conversation",
    "ErrorCode",
    "Program",
    "Settings",
    "Threadline",
    "ThreadlineError",
    "Turn",
    "TurnHandle",
    "TurnOutcome",
    "connect",
]
