"""The Python API's side of programs with code: `remembers=` as it crosses the wire, and the refusal of
a conversation used inside another conversation's turn (`conversation-nested`)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from core.errors import ErrorCode, ThreadlineError
from core.models import ConversationConfig, HelperMemory
from store.programs.program import Program


def remembers_of(remembers: Mapping[Any, Any] | None) -> dict[str, HelperMemory]:
    """`{helper: "conversation" | "turn" | remember(...) | "own"}` by helper (or program) name; a helper
    may be given as itself, and an inner conversation (`"own"`) as its handle."""
    out: dict[str, HelperMemory] = {}
    for key, value in (remembers or {}).items():
        out[_name(key)] = value if isinstance(value, HelperMemory) else HelperMemory.model_validate(value)
    return out


def _name(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, Program):
        return key.name
    config = getattr(key, "config", None)
    if isinstance(config, ConversationConfig):
        return config.program
    raise ThreadlineError(ErrorCode.INVALID_REQUEST, "remembers names helpers (or conversations) by name or object")


def refuse_nested(config: ConversationConfig) -> None:
    """Inside a program's turn, refuse a send to another conversation the turn does not declare `own`.

    Raises:
        ThreadlineError: `conversation-nested`.
    """
    code = sys.modules.get("store.programs.code")  # not imported: no program's turn runs in this process
    turn = None if code is None else code.running()
    if turn is not None:
        turn.nested(config.program, config.store, config.conversation)
