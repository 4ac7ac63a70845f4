"""The read side under concurrency: one `ConversationLog` per conversation, shared by every caller,
applies each record exactly once however many reads overlap while another process appends."""

from __future__ import annotations

import asyncio
import sys
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
