"""Record the workflow histories `tests/workflow/test_replay.py` keeps: `python -m tests.make_histories`.

Run it only when a release changes the workflow on purpose; a history kept from a released
version must keep replaying (change the workflow with `workflow.patched` instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import tempfile
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from core.errors import ThreadlineError
from core.settings import Settings
from core.temporal import workflow_id
from threadline.client import Threadline, connect
from threadline.devserver import find_temporal_binary
from threadline.options import SendOptions
from worker import build_worker

HERE = Path(__file__).parent / "histories"


async def plain(tl: Threadline) -> str:
    chat = tl.conversation("tutor", id="kept-plain")
    first = await chat.predict("one")
    await chat.predict("two", request_id="r-2")
    await chat.predict("two", request_id="r-2")
    await chat.continue_from(first.id).predict("beside")
    await chat.head(first.id)
    await chat.stop()
    with contextlib.suppress(ThreadlineError):
        await chat.send(wrong="input")
    return chat.id


async def with_context(tl: Threadline) -> str:
    context = {"summary": {"after": 2, "keep": 1}, "topics": "branch", "window": 4}
    chat = tl.conversation("tutor", id="kept-context", context=context)
    for i in range(5):
        await chat.predict(f"message {i}")
    return chat.id


async def with_flow(tl: Threadline) -> str:
    chat = tl.conversation("chat", id="kept-flow")
    await chat.setup("Be brief.", metadata={"shop": "north"})
    await chat.add_messages([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}])
    await chat.start_flow("order")
    for text in ("Soup.", "many", "2"):
        await chat.message(text)
    await chat.stop_flow()
    await chat.message("Thanks")
    return chat.id


async def one_round_trip(tl: Threadline) -> str:
    """The sends of 0.2: `send` and `place` updates with start, beside a signal and its `wait`."""
    chat = tl.conversation("tutor", id="kept-sends")
    first = await chat.predict("one", request_id="r-1")
    await chat.deliver("one", request_id="r-1")
    placed = await chat.send("two")
    await placed.result()
    await chat.signal(chat.sent({"message": "three"}, SendOptions(request_id="r-3")))
    await chat.outcome("r-3")
    await chat.continue_from(first.id).deliver("beside")
    return chat.id


MAKERS = [
    ("conversation-0.1", plain),
    ("conversation-context-0.1", with_context),
    ("conversation-flows-0.1", with_flow),
    ("conversation-sends-0.2", one_round_trip),
]


async def main(only: set[str] | None = None) -> None:
    binary = find_temporal_binary()
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=binary, data_converter=pydantic_data_converter, ip="127.0.0.1"
    ) as env:
        data = Path(tempfile.mkdtemp())
        address = env.client.service_client.config.target_host
        settings = dataclasses.replace(
            Settings.from_env({}), data=data, stores={"default": data / "store"}, address=address, task_queue="kept"
        )
        async with build_worker(env.client, settings):
            tl = await connect(settings, client=env.client)
            for name, make in [(name, make) for name, make in MAKERS if only is None or name in only]:
                conversation = await make(tl)
                history = await env.client.get_workflow_handle(workflow_id("default", conversation)).fetch_history()
                (HERE / f"{name}.json").write_text(history.to_json())


if __name__ == "__main__":
    # `python -m tests.make_histories NAME...` records only those (a history kept from a release stays as it is).
    asyncio.run(main(set(sys.argv[1:]) or None))
