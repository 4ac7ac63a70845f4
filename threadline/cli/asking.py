"""`threadline chat` asking the person at the keyboard about a turn that waits for an approval."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.errors import ErrorCode, ThreadlineError

from . import output

if TYPE_CHECKING:
    from threadline.reading import Turn

_YES = frozenset({"y", "yes"})
_NO = frozenset({"n", "no"})


def question(turn: Turn) -> str:
    """What the chat asks: the calls the turn waits for, and how to answer."""
    return f"Turn {turn.id} waits for your answer:\n{output.approvals_text(turn.approvals)}\nAllow? y / n [reason]"


def answer_of(line: str) -> tuple[bool, str | None]:
    """`y` or `yes`: (True, None); `n` or `no`, then an optional reason: (False, reason).

    Raises:
        ThreadlineError: `invalid-request` for anything else (the question stands).
    """
    word, _, rest = line.strip().partition(" ")
    if word.lower() in _YES:
        return True, None
    if word.lower() in _NO:
        return False, rest.strip() or None
    raise ThreadlineError(ErrorCode.INVALID_REQUEST, "answer y (allow it) or n and a reason (refuse it)")
