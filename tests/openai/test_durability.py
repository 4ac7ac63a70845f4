"""What the protocol promises nowhere else, through the official client: a streamed response resumed
after its connection was cut, with no gap; a background response that completes once although its
worker was killed (`kill -9`); a cancelled response that ends stopped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from openai import AsyncOpenAI
from openai.types.responses import Response
from temporalio.client import Client

from core.settings import Settings
from store.backends.folder import FolderStore
from store.backends.streams import StreamLog, StreamReader
from tests.openai.kit import protocol_client, turn_of
from tests.support.kit import slow
from tests.support.processes import WorkerProcess
from threadline.client import Threadline
from worker import build_worker


async def finished(client: AsyncOpenAI, response_id: str) -> Response:
    """The response once it is no longer queued or in progress (or as it is after a minute)."""
    deadline = time.monotonic() + 60
    while True:
        found = await client.responses.retrieve(response_id)
        if found.status not in ("queued", "in_progress") or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.1)


async def test_a_cut_stream_resumes_after_its_last_event_with_no_gap(
    tl: Threadline, client: Client, settings: Settings
) -> None:
    """Five deltas, the connection dropped, then `retrieve(stream=True, starting_after=N)`: the events go
    on at N + 1 and the deltas together are the answer the log holds."""
    async with build_worker(client, slow(settings, 2.0)), protocol_client(tl) as protocol:
        stream = await protocol.responses.create(input="Tell me about fractions", stream=True)
        response_id, deltas, last = "", [], -1
        async for event in stream:
            last = event.sequence_number
            if event.type == "response.created":
                response_id = event.response.id
            elif event.type == "response.output_text.delta":
                deltas.append(event.delta)
                if len(deltas) == 5:
                    break
        await stream.close()
        resumed = await protocol.responses.retrieve(response_id, stream=True, starting_after=last)
        numbers, ends = [], []
        async for event in resumed:
            numbers.append(event.sequence_number)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            ends.append(event.type)
        stored = await protocol.responses.retrieve(response_id)

    assert list(range(last + 1, last + 1 + len(numbers))) == numbers
    assert "response.completed" == ends[-1]
    assert stored.output_text == "".join(deltas)
    assert stored.output_text.startswith("(offline) You said: Tell me about fractions.")


async def test_a_background_response_completes_once_though_its_worker_was_killed(
    tl: Threadline, settings: Settings, folder: Path, tmp_path: Path
) -> None:
    """`background: true` answers at once; the worker is killed while the model answers, another
    finishes the turn, and the turn ended exactly once."""
    first = WorkerProcess(settings, tmp_path / "worker.log", delay=3.0)
    second: WorkerProcess | None = None
    try:
        first.wait_ready()
        async with protocol_client(tl) as protocol:
            queued = await protocol.responses.create(input="through the crash", background=True)
            turn = turn_of(queued.id)
            assert queued.conversation is not None
            await until(lambda: bool(streamed(folder, turn)))
            first.kill()
            second = WorkerProcess(settings, tmp_path / "worker.log", delay=0.1)
            done = await finished(protocol, queued.id)
    finally:
        for process in (first, second):
            if process is not None and process.process.poll() is None:
                process.stop()

    records = FolderStore(folder).read(queued.conversation.id)
    ends = [r for r in records if r.get("kind") == "ended" and r.get("turn") == turn]
    assert queued.status in ("queued", "in_progress")
    assert (True, "completed") == (queued.background, done.status)
    assert 1 == len(ends)
    assert done.output_text.startswith("(offline) You said: through the crash.")


def streamed(folder: Path, turn: str) -> str:
    """The text the turn's current try has streamed so far."""
    reader = StreamReader()
    reader.feed([event for _, event in StreamLog(folder).read(turn)])
    return reader.text


async def until(condition: Callable[[], bool]) -> None:
    """Wait until `condition()` holds (at most 30 s)."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


async def test_a_cancelled_response_ends_stopped(tl: Threadline, client: Client, settings: Settings) -> None:
    """`responses.cancel` stops the turn: the response is `cancelled`, and the turn ended `stopped`."""
    async with build_worker(client, slow(settings, 10.0)), protocol_client(tl) as protocol:
        queued = await protocol.responses.create(input="a long answer", background=True)
        cancelled = await protocol.responses.cancel(queued.id)
        again = await protocol.responses.retrieve(queued.id)
    assert queued.conversation is not None

    turn = await tl.conversation("chat", id=queued.conversation.id).turn(turn_of(queued.id))
    assert ("cancelled", "cancelled") == (cancelled.status, again.status)
    assert "stopped" == turn.state
