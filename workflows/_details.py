"""What the Temporal UI shows of a conversation: pure helpers, tested without Temporal."""

from __future__ import annotations

from collections.abc import Mapping

from core.models import TurnOutcome

_SHOWN = 400


def current_details(turns: int, last: TurnOutcome, inputs: Mapping[str, object] | None) -> str:
    """The latest exchange as markdown, for the UI's Current Details panel."""
    lines = [f"### Turn {turns}: {last.state}", f"`{last.turn or 'not placed'}`", ""]
    lines += [f"**{name}:** {str(value)[:_SHOWN]}" for name, value in (inputs or {}).items()]
    lines += [f"**{name}:** {str(value)[:_SHOWN]}" for name, value in (last.outputs or {}).items()]
    lines += [f"**error:** `{last.error.code}` {last.error.message}"] if last.error else []
    return "\n\n".join(lines)


def slim(outcome: TurnOutcome) -> TurnOutcome:
    """An outcome without its outputs or a flow's data: what continue-as-new carries (the log keeps the rest)."""
    return outcome.model_copy(update={"outputs": None, "result": None, "flow": None})
