"""The `sends: steer` extension through the official `openai` client: a response created while another
runs joins it, and both are the same response."""

from __future__ import annotations

from core.settings import Settings
from tests.openai.kit import protocol_client, turn_of
from tests.support.fakeprovider import FakeProvider, Reply
from tests.workflow.test_steer import STORY, asked
from threadline.client import Threadline

MODEL = "openai:gpt-test"


async def test_a_response_created_while_one_runs_steers_it(tl: Threadline, live: Settings, fake: FakeProvider) -> None:
    """The second input joins the running response: its answer is that response's, which took it."""
    fake.add(Reply(STORY, chunks=40, delay=0.1), Reply("A short one."))
    async with protocol_client(tl) as protocol:
        conversation = await protocol.conversations.create(extra_body={"sends": "steer"})
        running = await protocol.responses.create(
            input="Tell me a story.", conversation=conversation.id, model=MODEL, background=True
        )
        await asked(fake, 1)
        steered = await protocol.responses.create(input="Make it short.", conversation=conversation.id, model=MODEL)
        turns = await tl.conversation("chat", id=conversation.id).turns(all=True)

    assert running.id == steered.id
    assert "A short one." == steered.output_text
    assert [turn_of(running.id)] == [t.id for t in turns]
    assert [["Make it short."]] == [[s["inputs"].get("message") for s in t.steers] for t in turns]
