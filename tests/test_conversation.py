"""Conversations end to end: a real dev server, a real worker, the record log on disk."""

from __future__ import annotations

from temporalio.worker import Worker

from threadline.client import Threadline


async def test_turns_see_earlier_turns(tl: Threadline, worker: Worker) -> None:
    """Each turn continues the last and is shown every earlier turn of its branch."""
    chat = tl.conversation("tutor", id="alex")

    first = await chat.predict("Hi, I'm Alex.")
    second = await chat.predict("What is 1/2 + 1/3?")
    third = await chat.predict("Is it 2/5?")

    assert [None, first.id, second.id] == [first.parent, second.parent, third.parent]
    assert [[], [first.id], [first.id, second.id]] == [first.saw, second.saw, third.saw]
    assert "I was shown 2 earlier turn(s)." in third.result
    assert ["done"] * 3 == [t.state for t in await chat.turns()]
