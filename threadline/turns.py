"""Turns as a client reads them from the record log."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from store.log import Log
from store.log import Turn as LoggedTurn
from store.rules import expand


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of a conversation, as the record log holds it."""

    id: str
    parent: str | None
    state: str
    inputs: dict[str, Any]
    outputs: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    saw: list[str] = field(default_factory=list)
    """The ids of the earlier turns it was shown, oldest first."""
    usage: dict[str, int] = field(default_factory=dict)
    model: str | None = None
    error: dict[str, Any] | None = None
    request_id: str | None = None
    attempt: int = 1

    def as_dict(self) -> dict[str, Any]:
        """The turn as JSON-able data (the CLI's `--json`)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def shown_ids(log: Log, turn: str) -> list[str]:
    """The turns `turn` was shown, with `saw_of` expanded (empty when it cannot be)."""
    try:
        return [str(e["call"]) for e in expand(log, turn)]
    except ValueError:
        return []


def to_turn(log: Log, t: LoggedTurn, now: float) -> Turn:
    """A client `Turn` from the log's view of it."""
    ended = t.ended or {}
    done = ended.get("state") == "done"
    return Turn(
        id=t.id,
        parent=t.parent,
        state=t.state(now),
        inputs=t.inputs,
        outputs=t.outputs if done else {},
        result=ended.get("value", t.outputs.get("result")) if done else None,
        saw=shown_ids(log, t.id),
        usage={k: v for k, v in (ended.get("usage") or {}).items() if isinstance(v, int)},
        model=ended.get("model"),
        error=ended.get("error") if not done and ended else None,
        request_id=t.record.get("request_id"),
        attempt=t.attempt,
    )


__all__ = ["Turn", "shown_ids", "to_turn"]
