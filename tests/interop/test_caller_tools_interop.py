"""A turn whose model called the caller's function, shared with functai 1.2.0: functai reads the turn as
waiting while the caller's output is due, then as done with its answer, and continues the conversation
after it (the call lives in `tool` records format 1 already has; `settings.tools` is skipped)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from temporalio.worker import Worker

from tests.support.functai_kit import offline, reply, tutor
from threadline.client import Threadline

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def functai_reads(folder: Path, cid: str) -> list[tuple[str, Any]]:
    """The turns as functai lists them: state and result."""
    with offline([]):
        return [(t.state, t.result) for t in tutor.conversation(cid, store=str(folder)).turns]


async def test_functai_reads_and_continues_a_turn_that_called_the_callers_function(
    tl: Threadline, worker: Worker, folder: Path, cid: str
) -> None:
    """Waiting while the output is due, done once it was given; functai's next turn is shown it."""
    chat = tl.conversation("tutor", id=cid)
    outcome = await chat.deliver("Weather in Paris?", tools=[WEATHER])
    while_due = await asyncio.to_thread(functai_reads, folder, cid)
    waiting = await chat.turn(str(outcome.turn))
    ended = await waiting.resume(results={"offline_1": "Sunny, 21 C"})

    def functai_continues() -> tuple[list[tuple[str, Any]], str, int]:
        with offline([reply("Warm.")]) as model:
            theirs = tutor.conversation(cid, store=str(folder))
            listed = [(t.state, t.result) for t in theirs.turns]
            return listed, theirs("And tomorrow?"), len(model.requests[0].messages)

    listed, said, shown = await asyncio.to_thread(functai_continues)

    assert ("waiting", [("waiting", None)]) == (outcome.state, while_due)
    assert [("unfinished", "get_weather")] == [("unfinished", u["name"]) for u in waiting.unfinished]
    assert "done" == ended.state
    assert str(ended.result).endswith("Tools said: get_weather: Sunny, 21 C.")
    assert [("done", ended.result)] == listed
    assert "Warm." == said
    assert 3 <= shown  # the earlier turn's message and answer, then the new message
