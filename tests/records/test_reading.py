"""The read side under concurrency: one `ConversationLog` per conversation, shared by every caller,
applies each record exactly once however many reads overlap while another process appends."""

from __future__ import annotations

import asyncio
import fcntl
import os
import sys
import threading
import time
from pathlib import Path

from core.errors import ThreadlineError
from core.settings import Settings
from store.backends.folder import FolderStore
from store.backends.reader import ConversationLog, Threaded
from store.log.state import Log, Turn
from store.records import Record, stop_record, turn_record
from tests.support.processes import ROOT
from threadline.client import Threadline


def _summary(log: Log) -> tuple[object, ...]:
    turns = [(tid, log.turns[tid].stops, bool(log.turns[tid].ended), log.turns[tid].attempt) for tid in log.order]
    return log.n, log.head, len(log.entries), turns


async def test_concurrent_reads_while_another_process_appends_equal_a_fresh_read(
    settings: Settings, folder: Path, cid: str
) -> None:
    """Many overlapping turns()/history()/turn() calls while a writer appends turns, stops and entries:
    every list is a prefix of the final one, and the shared log ends equal to a fresh read."""
    tl = Threadline(None, settings)
    chat = tl.conversation("tutor", id=cid)
    FolderStore(folder)  # the folder exists before the writer waits in it
    agent = ["-m", "tests.support.agents", "mixed", str(folder), cid, "60", "w"]
    writer = await asyncio.create_subprocess_exec(sys.executable, *agent, cwd=ROOT)
    (folder / "go").touch()
    answers: list[list[str]] = []

    async def reader() -> None:
        while writer.returncode is None:
            turns = await chat.turns(all=True)
            answers.append([t.id for t in turns])
            await chat.history()
            if turns:
                await chat.turn(turns[-1].id)

    await asyncio.gather(*(reader() for _ in range(16)))
    assert 0 == await asyncio.wait_for(writer.wait(), 30)
    final = await chat.turns(all=True)

    fresh = Log(FolderStore(folder).read(cid))
    assert _summary(fresh) == _summary(tl.log("default", cid).log)
    assert 60 == len(final) == len(fresh.entries)
    assert all(ids == [t.id for t in final][: len(ids)] for ids in answers)
    assert len(answers) > 16  # the reads did overlap the appends


async def test_own_appends_overlapping_reads_and_another_writer_equal_a_fresh_read(folder: Path, cid: str) -> None:
    """Appends through the shared log (applied without reading them back) race reads of it and another
    process's appends: every record is applied once, in place, and the log equals a fresh read."""
    log = ConversationLog(Threaded(FolderStore(folder)), cid)
    agent = ["-m", "tests.support.agents", "mixed", str(folder), cid, "40", "w"]
    writer = await asyncio.create_subprocess_exec(sys.executable, *agent, cwd=ROOT)
    (folder / "go").touch()

    def stopped(_: Log, turn: Turn) -> list[Record] | None:
        return None if turn.stops else [stop_record(turn.id)]

    async def sender(k: int) -> None:
        for i in range(15):
            tid = f"t{k}-{i}"
            while True:
                await log.read()
                try:
                    await log.append([turn_record(tid, parent=None, program="p", inputs={})], expect=log.log.n)
                    break
                except ThreadlineError as err:
                    if err.code != "store-conflict":
                        raise
            assert (await log.append_if(tid, stopped)).stops

    async def reader() -> None:
        while writer.returncode is None:
            await log.read()

    await asyncio.gather(*(sender(k) for k in range(4)), *(reader() for _ in range(4)))
    assert 0 == await asyncio.wait_for(writer.wait(), 30)
    await log.read()

    fresh = Log(FolderStore(folder).read(cid))
    assert _summary(fresh) == _summary(log.log)
    assert 60 == sum(tid.startswith("t") and log.log.turns[tid].stops == 1 for tid in log.log.order)


class _NotedStore(FolderStore):
    """A folder store that notes which thread each read ran on."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.threads: list[int] = []

    def read_nowait(self, conversation: str, after: int = 0, *, limit: int | None = None) -> list[Record] | None:
        self.threads.append(threading.get_ident())
        return super().read_nowait(conversation, after, limit=limit)


async def test_a_read_runs_on_the_loop_unless_an_append_holds_the_conversation(folder: Path, cid: str) -> None:
    """A read is made on the event loop's own thread. While an append of this process holds the
    conversation (here blocked behind another writer's flock, as functai takes it), `read_nowait`
    answers None at once and the read waits in a thread: the loop runs on meanwhile."""
    store = _NotedStore(folder)
    threaded = Threaded(store)
    await threaded.append(cid, [turn_record("t1", parent=None, program="p", inputs={})])
    assert ["t1"] == [r["turn"] for r in await threaded.read(cid)]
    assert [threading.get_ident()] == store.threads

    lock = os.open(folder / "conversations" / f"{cid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        appending = asyncio.create_task(threaded.append(cid, [stop_record("t1")], expect=1))
        deadline = time.monotonic() + 10
        while store.read_nowait(cid) is not None:  # the append holds the conversation, waiting on the flock
            assert time.monotonic() < deadline, "the append never took the conversation"
            await asyncio.sleep(0.01)
        reading = asyncio.create_task(threaded.read(cid))
        began = time.monotonic()
        await asyncio.sleep(0.3)
        assert time.monotonic() - began < 2.0  # the loop was not held by the waiting read
        assert not reading.done()
        assert not appending.done()
    finally:
        os.close(lock)  # releases the flock: the append, then the read, go on
    assert 2 == await appending
    assert ["turn", "stop"] == [r["kind"] for r in await reading]
