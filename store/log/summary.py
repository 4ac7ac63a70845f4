"""Summary-and-key-facts compression of a branch's older turns, kept as `entry` records.

Once a branch holds more than `after` done turns, all but the last `keep` are summarised by a
model call into a summary and a list of key facts: an `entry` (plugin `threadline`, kind
`summary`) at the last turn it covers, so it belongs to exactly the branches through that turn.
Later turns reuse it, and extend it only when `2 * keep` turns have gone unsummarised: the new
summary is made from the previous one and the turns newly left out, never from the whole branch.
Turns a summary covers are not shown verbatim; the summary reaches the model as a section of
the instruction, and each turn records the `context` it was shown.
"""

from __future__ import annotations

from typing import Any

from core.context import SummaryRule
from store.programs.program import Program

from .rules import newest_entry
from .state import Log, Turn

PLUGIN = "threadline"
KIND = "summary"

SUMMARISER = Program.define(
    "summarise_conversation",
    "Summarise the earlier part of a conversation so it can go on without it. Start from the "
    "previous summary and key facts, if any, and fold in the new turns. Keep every fact the rest "
    "of the conversation may need (names, numbers, decisions, preferences) as a short key fact; "
    "the summary says what was discussed, in a few sentences.",
    inputs={"previous_summary": str, "previous_facts": list[str], "turns": str},
    outputs={"facts": list[str], "result": str},
)


def latest(log: Log, tip: str | None) -> dict[str, Any] | None:
    """The newest summary on the branch through `tip` (its data), or None."""
    found = newest_entry(log, PLUGIN, KIND, tip)
    data = found["data"] if found else None
    return data if isinstance(data, dict) and isinstance(data.get("turns"), list) else None


def due(log: Log, done: list[Turn], rule: SummaryRule, tip: str | None) -> tuple[dict[str, Any] | None, list[Turn]]:
    """The summary to extend and the turns to fold into it now (none: nothing is due)."""
    previous = latest(log, tip)
    covered = set(previous["turns"]) if previous else set()
    left = [t for t in done if t.id not in covered]
    if len(done) <= rule.after or len(left) < (2 * rule.keep if previous else rule.keep + 1):
        return previous, []
    return previous, left[: len(left) - rule.keep]


def summary_data(previous: dict[str, Any] | None, turns: list[Turn], summary: str, facts: list[str]) -> dict[str, Any]:
    """The data of the entry that extends `previous` with `turns`."""
    covered = list(previous["turns"]) if previous else []
    return {"turns": covered + [t.id for t in turns], "through": turns[-1].id, "summary": summary, "facts": facts}


def summariser_inputs(previous: dict[str, Any] | None, turns: list[Turn]) -> dict[str, Any]:
    """The summariser's inputs: the previous summary and facts, and the new turns as text."""
    lines = []
    for t in turns:
        lines += [f"user: {_text(t.inputs)}", f"assistant: {_text(t.outputs)}"]
    return {
        "previous_summary": str((previous or {}).get("summary") or ""),
        "previous_facts": [str(f) for f in (previous or {}).get("facts") or []],
        "turns": "\n".join(lines),
    }


def section(data: dict[str, Any]) -> str:
    """The instruction section a summary becomes."""
    facts = "\n".join(f"- {fact}" for fact in data.get("facts") or [])
    text = f"Summary of the earlier conversation:\n{data.get('summary') or ''}"
    return f"{text}\n\nKey facts:\n{facts}" if facts else text


def _text(values: dict[str, Any]) -> str:
    if len(values) == 1:
        (only,) = values.values()
        return str(only)
    return "; ".join(f"{k}: {v}" for k, v in values.items())
