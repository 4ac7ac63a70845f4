"""A user's module of tools and a program that calls them, as a worker loads it from THREADLINE_PROGRAMS."""

from __future__ import annotations

from typing import Literal

import threadline

NOTES = {"todo.md": "- water the basil", "groceries.md": "- basil seeds"}


@threadline.tool(effects="reads")
def read_note(name: str) -> str:
    """The text of one note."""
    return NOTES.get(name, "")


@threadline.tool(effects="changes")
def write_note(name: str, text: str, mode: Literal["replace", "append"] = "replace") -> str:
    """Replace a note's text, or append to it."""
    NOTES[name] = text if mode == "replace" else NOTES.get(name, "") + text
    return f"{name} now has {len(NOTES[name])} characters"


@threadline.tool
async def count_notes() -> int:
    """How many notes there are."""
    return len(NOTES)


@threadline.program(tools=[read_note, write_note, count_notes], approve="changes")
def gardener(request: str) -> str:
    """Tend the notes as the request asks."""
    raise NotImplementedError  # the body never runs: a model answers
