"""A worker frozen (SIGSTOP) near the end of a turn's model call, a healthy second worker on the queue,
then thawed (SIGCONT): the healthy worker finishes the turn; the frozen one, waking up with the try
Temporal gave up on (and perhaps a retry's task it took while frozen), writes nothing more.

The fault: the thawed worker started a third stream run after the turn ended, the model was asked
three times, and the turn's events ended with that run's first word, "(offline)", while the result
was the whole answer.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from core.settings import Settings
from store.backends.folder import FolderStore
from store.backends.streams import StreamLog, StreamReader
from tests.chaos.invariants import check_log
from tests.support.processes import WorkerProcess, model_requests
from threadline.client import Conversation, Threadline

DELAY_S = 3.0
"""How long the offline model takes to answer, streamed word by word."""
FREEZE_AT_S = 2.5
"""How far into the model call the worker is frozen: most of the answer streamed."""
FROZEN_S = 8.0
"""How long it stays frozen: past the 3 s heartbeat timeout, so Temporal retries the turn."""


def asking(workers: list[WorkerProcess], turn: str) -> WorkerProcess | None:
    """The worker that asked the model for `turn`, once one did."""
    return next((w for w in workers if model_requests(w.log, turn)), None)


async def watched_text(chat: Conversation, turn: str) -> str:
    """The turn's text as a watcher (the HTTP events route's reader) ends up showing it."""
    pieces: list[str] = []
    async for piece in chat.watch(turn):
        if piece.text is None:
            pieces.clear()
        else:
            pieces.append(piece.text)
    return "".join(pieces)


@pytest.mark.slow
@pytest.mark.timeout(150)
async def test_a_thawed_worker_writes_nothing_after_the_turn_ended(
    tl: Threadline, settings: Settings, tmp_path: Path, cid: str
) -> None:
    """The turn ends once, done, with the model asked at most twice; its stream's text (and what a
    watcher shows) is the answer, and nothing of the turn is appended after its `ended` record."""
    folder = settings.store_folder("default")
    workers = [WorkerProcess(settings, tmp_path / f"w{k}.log", delay=DELAY_S) for k in range(2)]
    frozen: WorkerProcess | None = None
    try:
        for worker in workers:
            worker.wait_ready(60)
        chat = tl.conversation("tutor", id=cid)
        await chat.deliver("warm up")
        handle = await chat.send("the turn to freeze")
        assert handle.id is not None
        deadline = time.monotonic() + 30
        while (frozen := asking(workers, handle.id)) is None:
            assert time.monotonic() < deadline, "no worker asked the model"
            await asyncio.sleep(0.02)
        await asyncio.sleep(FREEZE_AT_S)
        os.kill(frozen.process.pid, signal.SIGSTOP)
        await asyncio.sleep(FROZEN_S)
        os.kill(frozen.process.pid, signal.SIGCONT)
        turn = await asyncio.wait_for(handle.result(), 60)
        await asyncio.sleep(5)  # whatever the thawed worker does, it has done by now
        nxt = await asyncio.wait_for(chat.deliver("next"), 60)
        shown = await asyncio.wait_for(watched_text(chat, handle.id), 30)
    finally:
        if frozen is not None and frozen.process.poll() is None:
            os.kill(frozen.process.pid, signal.SIGCONT)
        for worker in workers:
            worker.stop()

    log = check_log(folder, cid)
    records = [r for r in FolderStore(folder).read(cid) if r.get("turn") == handle.id]
    kinds = [r["kind"] for r in records]
    reader = StreamReader()
    reader.feed([event for _, event in StreamLog(folder).read(handle.id)])
    asked = sum(model_requests(w.log, handle.id) for w in workers)
    assert ("done", "done") == (turn.state, nxt.state)
    assert "ended" == kinds[-1], kinds
    assert 1 == kinds.count("ended")
    assert asked <= 2, asked
    assert ("done", turn.result) == (reader.ended, reader.text)
    assert turn.result == shown
    assert "done" == log.turns[handle.id].state(0)
