"""functai 1.2.0 reads what the article's service wrote: a conversation created with a system prompt,
taken through the order flow by the workflow, with an imported transcript, is listed by functai's
FolderStore and read turn by turn, its setup and flow data as entries, and continued there."""

from __future__ import annotations

from pathlib import Path

import functai.stores
from temporalio.worker import Worker

from tests.support.functai_kit import offline, reply, tutor
from threadline.client import Threadline

ORDER = ["Two pizzas, please.", "lots", "3", "ada@example.com"]


async def test_functai_lists_and_reads_a_conversation_that_went_through_a_flow(
    tl: Threadline, worker: Worker, folder: Path, cid: str
) -> None:
    """Every flow turn and imported message is a done turn functai lists with its answer; the setup and
    the completed flow's data are entries; functai's next turn is shown all of them."""
    chat = tl.conversation("chat", id=cid)
    await chat.setup("You are a shop assistant.", metadata={"shop": "north"})
    await chat.add_messages([{"role": "user", "content": "Do you deliver?"}, {"role": "assistant", "content": "Yes."}])
    replies = [await chat.start_flow("checkout"), *[await chat.message(text) for text in ORDER]]
    free = await chat.message("When will it arrive?")

    with offline([reply("Within the hour.")]) as lm:
        listed = functai.stores.FolderStore(str(folder)).conversations()
        mirror = tutor.conversation(cid, store=str(folder))
        turns = [(t.state, t.result) for t in mirror.turns]
        setup = mirror.entries("threadline", "setup")
        completed = mirror.entries("flow", "completed")
        answer = mirror("Thanks!")
        messages = lm.requests[0].messages

    assert cid in listed
    expected = [("done", "Yes."), *[("done", r.response) for r in replies], ("done", free.response)]
    assert expected == turns
    assert [("You are a shop assistant.", {"shop": "north"})] == [
        (e["data"]["system_prompt"], e["data"]["metadata"]) for e in setup
    ]
    assert [{"greeting": "Two pizzas, please.", "quantity": 3, "email": "ada@example.com"}] == [
        e["data"]["data"] for e in completed
    ]
    assert "Within the hour." == answer
    assert 2 * len(expected) + 1 == len(messages)
