"""How a turn ended, as a send's outcome: read from its first `ended` record."""

from __future__ import annotations

from typing import Any

from core.errors import ErrorCode
from core.models import TurnError, TurnOutcome
from store.log.state import Turn
from store.log.steers import taken

_OUTCOME_STATES = frozenset({"done", "failed", "stopped", "abandoned"})


def outcome_of(turn: Turn, request_id: str) -> TurnOutcome | None:
    """The outcome of a turn that ended, from its `ended` record (None while it has not)."""
    ended = turn.ended
    if ended is None:
        return None
    state = ended.get("state", "failed")
    done = state == "done"
    outputs = ended.get("outputs") if done else None
    result = ended.get("value", (outputs or {}).get("result")) if done else None
    return TurnOutcome(
        request_id=request_id,
        turn=turn.id,
        parent=turn.parent,
        state=state if state in _OUTCOME_STATES else "failed",
        outputs=outputs,
        answer=answer_of(outputs, result),
        result=result,
        model=ended.get("model"),
        usage={k: v for k, v in (ended.get("usage") or {}).items() if isinstance(v, int)},
        seconds=ended.get("seconds"),
        error=None if done else error_of(ended.get("error")),
        steers=[steer.request_id for steer in taken(turn)] if turn.steers else [],
    )


def answer_of(outputs: dict[str, Any] | None, result: Any) -> str | None:
    """Which output is the answer (so an outcome carries it once), or None when none is.

    `result` usually is `outputs["result"]`, the name every AI program answers in."""
    if not outputs or result is None:
        return None
    if "result" in outputs and outputs["result"] == result:
        return "result"
    return next((name for name, value in outputs.items() if value == result), None)


def error_of(error: Any) -> TurnError:
    """The coded error an `ended` record holds: its `code` if it has one (ours do), else by its type."""
    if not isinstance(error, dict):
        return TurnError(code=ErrorCode.INTERNAL, message="the turn ended without an error record")
    fallback = ErrorCode.TURN_STATE if error.get("type") == "Cancelled" else ErrorCode.INTERNAL
    code = ErrorCode.parse(error["code"]) if error.get("code") else fallback
    return TurnError(code=code, message=str(error.get("message") or error.get("type") or ""))
