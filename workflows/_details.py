"""What the Temporal UI shows of a conversation: pure helpers, tested without Temporal."""

from __future__ import annotations

from collections.abc import Mapping

from core.models import TurnOutcome, TurnSend

_SHOWN = 400
_WORDS = 48
"""How much of a message an event's summary quotes: its first words, enough to tell turns apart."""


def current_details(turns: int, last: TurnOutcome, inputs: Mapping[str, object] | None) -> str:
    """The latest exchange as markdown, for the UI's Current Details panel."""
    lines = [f"### Turn {turns}: {last.state}", f"`{last.turn or 'not placed'}`", ""]
    lines += [f"**{name}:** {str(value)[:_SHOWN]}" for name, value in (inputs or {}).items()]
    lines += [f"**{name}:** {str(value)[:_SHOWN]}" for name, value in (last.outputs or {}).items()]
    lines += [f"**error:** `{last.error.code}` {last.error.message}"] if last.error else []
    return "\n\n".join(lines)


def first_words(text: str, limit: int = _WORDS) -> str:
    """The start of `text` on one line, cut at a word's end, with an ellipsis when cut."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit].rsplit(" ", 1)[0] if " " in flat[:limit] else flat[:limit]
    return cut.rstrip(",.;:") + "…"


def said(send: TurnSend) -> str:
    """What a send says, in a few words: its message (or its first text input), quoted."""
    inputs = send.inputs
    text = inputs.get("message")
    if not isinstance(text, str):
        text = next((value for value in inputs.values() if isinstance(value, str)), None)
    return f"«{first_words(text)}»" if text else f"({', '.join(sorted(inputs)) or 'no inputs'})"


def slim(outcome: TurnOutcome) -> TurnOutcome:
    """An outcome without its outputs or a flow's data: what continue-as-new carries (the log keeps the rest)."""
    return outcome.model_copy(update={"outputs": None, "answer": None, "result": None, "flow": None})


def answerless(outcome: TurnOutcome) -> TurnOutcome:
    """An outcome without its outputs (`wait` reads them from the log), but with where its guided flow
    stands: what continue-as-new carries of the newest, in runs with `LEANER`."""
    return outcome.model_copy(update={"outputs": None, "answer": None, "result": None})


def bare(outcome: TurnOutcome) -> TurnOutcome:
    """What a caller that asks late about a send needs of its outcome: its turn and parent (to read it
    from the log), its state, its error, and what a waiting or steered turn asks or took (empty for
    the rest); what continue-as-new carries of all but the newest."""
    fields = ("request_id", "turn", "parent", "state", "error", "approvals", "steers")
    return TurnOutcome.model_validate({name: getattr(outcome, name) for name in fields})
