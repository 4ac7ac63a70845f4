"""kill -9 of the worker at each step of a turn: while the send is placed, during the model call,
right after the `ended` record is written, and while the turn ends (its whole answer streamed).
Another worker finishes the turn: it ends exactly once, the model is asked at most once more, and
the conversation takes the next send."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from core.models import TurnSend
from core.settings import Settings
from store.backends.folder import FolderStore
from store.backends.streams import StreamLog, StreamReader
from store.log.state import Log
from store.records import uuid7
from tests.chaos.invariants import Ledger, until_ended
from tests.support.processes import WorkerProcess, model_requests
from threadline.client import Conversation, Threadline

DELAY_S = 1.0
"""How long the offline model takes to answer: long enough to kill the worker inside the call."""
POLL_S = 0.005

Moment = Callable[[Path, str, str], bool]
"""Whether the turn of a request id (in a conversation of a store folder) reached the step to kill at."""


def _turn(folder: Path, conversation: str, request_id: str) -> tuple[Log, str | None]:
    log = Log(FolderStore(folder).read(conversation))
    return log, log.request_ids.get(request_id)


def placing(folder: Path, conversation: str, request_id: str) -> bool:
    """At once: the send was just signalled, the worker is about to place it (or placing it)."""
    return True


def asking(folder: Path, conversation: str, request_id: str) -> bool:
    """The turn is placed and its model call streams its first words."""
    _, turn = _turn(folder, conversation, request_id)
    if turn is None:
        return False
    reader = StreamReader()
    reader.feed([event for _, event in StreamLog(folder).read(turn)])
    return bool(reader.text)


def ending(folder: Path, conversation: str, request_id: str) -> bool:
    """The model's whole answer is streamed: the worker is writing (or about to write) the turn's end."""
    _, turn = _turn(folder, conversation, request_id)
    if turn is None:
        return False
    reader = StreamReader()
    reader.feed([event for _, event in StreamLog(folder).read(turn)])
    return reader.text.endswith("turn(s).")


def ended(folder: Path, conversation: str, request_id: str) -> bool:
    """The turn's `ended` record was just written: the reply is in, the workflow does not know yet."""
    log, turn = _turn(folder, conversation, request_id)
    return turn is not None and log.turns[turn].ended is not None


async def kill_at(moment: Moment, worker: WorkerProcess, folder: Path, cid: str, rid: str) -> None:
    """Kill `worker` as soon as the turn of `rid` reaches `moment` (within a few milliseconds)."""
    deadline = time.monotonic() + 30
    while not moment(folder, cid, rid):
        assert time.monotonic() < deadline, f"the turn never reached {moment.__name__}"
        await asyncio.sleep(POLL_S)
    worker.kill()


async def send_and_kill(chat: Conversation, rid: str, kill: Callable[[], Awaitable[None]]) -> None:
    """Signal the send, then kill as `kill` decides (the signal is durable: nothing waits for it)."""
    await chat.signal(TurnSend(request_id=rid, inputs={"message": "through the crash"}, program="tutor"))
    await kill()


@pytest.mark.slow
@pytest.mark.parametrize("moment", [placing, asking, ending, ended], ids=lambda m: m.__name__)
async def test_a_worker_killed_at_each_step_of_a_turn(
    tl: Threadline, settings: Settings, tmp_path: Path, cid: str, moment: Moment
) -> None:
    """Whatever step the worker dies at, another finishes the turn: one `turn` and one `ended` record,
    at most one more model call, and the next send is answered."""
    folder, logs, ledger = settings.store_folder("default"), tmp_path / "workers.log", Ledger()
    chat = tl.conversation("tutor", id=cid)
    first = WorkerProcess(settings, logs, delay=DELAY_S)
    try:
        first.wait_ready()
        await ledger.predict(chat, "before the crash")
        rid = uuid7()
        await send_and_kill(chat, rid, lambda: kill_at(moment, first, folder, cid, rid))
    finally:
        first.stop()
    second = WorkerProcess(settings, logs, delay=DELAY_S)
    try:
        second.wait_ready()
        await until_ended(folder, cid, [rid])
        ledger.answers[rid] = Log(FolderStore(folder).read(cid)).request_ids[rid]
        await ledger.predict(chat, "after the crash")
    finally:
        second.stop()

    log = ledger.check(folder, cid)
    turn = log.turns[log.request_ids[rid]]
    assert "done" == turn.state(0)
    assert model_requests(logs, turn.id) <= 2
