"""Crashes, stops, takeovers and other writers: the turn always ends once, and nothing is paid twice."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from core.settings import Settings
from store.backends.folder import FolderStore
from store.log.state import Log
from tests.support.functai_kit import offline, reply, tutor
from tests.support.kit import lease_ran_out, slow
from tests.support.processes import WorkerProcess, model_requests
from threadline.client import Threadline
from threadline.reading import Turn
from threadline.turnstream import TurnHandle
from worker import build_worker


def kinds_of(folder: Path, conversation: str, turn: str) -> Counter[str]:
    return Counter(str(r["kind"]) for r in FolderStore(folder).read(conversation) if r.get("turn") == turn)


async def until_running(folder: Path, conversation: str, turn: str | None) -> None:
    """Wait until the turn's model call is under way (its turn record and lease are in the log)."""
    for _ in range(200):
        log = Log(FolderStore(folder).read(conversation))
        if turn in log.turns and log.turns[turn].state(time.time()) == "running":
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"turn {turn} never ran")


async def until_asking(folder: Path, conversation: str, turn: str | None) -> None:
    """Wait until the turn runs, then half a second more: its worker is inside the model call."""
    await until_running(folder, conversation, turn)
    await asyncio.sleep(0.5)


async def finished_by(worker: WorkerProcess, running: TurnHandle) -> Turn:
    """Let `worker` take over: wait for the turn to end, then stop the worker."""
    try:
        worker.wait_ready()
        return await asyncio.wait_for(running.result(), timeout=60)
    finally:
        worker.stop()


async def test_a_killed_worker_turn_finishes_on_another(
    tl: Threadline, settings: Settings, tmp_path: Path, cid: str
) -> None:
    """kill -9 during a slow model call: a new worker finishes the turn; one turn and one ended record,
    and the completed earlier reply is not asked for again."""
    logs = tmp_path / "workers.log"
    first = WorkerProcess(settings, logs, delay=2.0)
    first.wait_ready()
    chat = tl.conversation("tutor", id=cid)
    earlier = await chat.predict("before the crash")
    running = await chat.send("during the crash")
    await until_asking(settings.store_folder("default"), cid, running.id)

    first.kill()
    turn = await finished_by(WorkerProcess(settings, logs, delay=2.0), running)

    assert "done" == turn.state
    assert earlier.id == turn.parent
    kinds = kinds_of(settings.store_folder("default"), cid, turn.id)
    assert (1, 1) == (kinds["turn"], kinds["ended"])
    assert 1 == model_requests(logs, earlier.id)
    assert 2 == model_requests(logs, turn.id)


async def test_stop_by_signal_ends_the_turn_stopped(
    tl: Threadline, client: Client, settings: Settings, cid: str
) -> None:
    """A stop signal ends a 30-second model call as `stopped`, long before it would have answered."""
    async with build_worker(client, slow(settings, 30.0)):
        chat = tl.conversation("tutor", id=cid)
        running = await chat.send("a long answer, please")
        await until_running(settings.store_folder("default"), cid, running.id)
        started = time.monotonic()

        await chat.stop(running.id)
        turn = await asyncio.wait_for(running.result(), timeout=10)

    assert "stopped" == turn.state
    assert {"type": "Cancelled", "message": "the stream was closed"} == turn.error
    assert time.monotonic() - started < 10  # the model would have taken 30 s
    kinds = kinds_of(settings.store_folder("default"), cid, turn.id)
    assert (1, 1) == (kinds["stop"], kinds["ended"])


async def test_a_stop_record_from_functai_stops_the_turn(
    tl: Threadline, client: Client, settings: Settings, cid: str
) -> None:
    """functai's `chat.stop(turn)` on the same folder stops Threadline's running turn."""
    folder = settings.store_folder("default")
    async with build_worker(client, slow(settings, 30.0)):
        running = await tl.conversation("tutor", id=cid).send("a long answer, please")
        await until_running(folder, cid, running.id)

        with offline([]):
            tutor.conversation(cid, store=str(folder)).stop(running.id)
        turn = await asyncio.wait_for(running.result(), timeout=10)

    assert "stopped" == turn.state
    assert 1 == kinds_of(folder, cid, turn.id)["ended"]


async def test_functai_continues_between_threadline_turns(
    tl: Threadline, worker: Worker, folder: Path, cid: str
) -> None:
    """Threadline, then functai, then Threadline: parents and saw follow the one log."""
    chat = tl.conversation("tutor", id=cid)
    ours = await chat.predict("Hi, I'm Alex.")
    with offline([reply("Welcome back.")]):
        tutor.conversation(cid, store=str(folder))("I'm back.")
    theirs = Log(FolderStore(folder).read(cid)).head

    after = await tl.conversation("tutor", id=cid).predict("Where were we?")

    assert theirs is not None
    assert theirs == after.parent
    assert [ours.id, theirs] == after.saw
    ended = [r for r in FolderStore(folder).read(cid) if r.get("kind") == "ended"][-1]
    assert [{"saw_of": theirs}, {"call": theirs, "steps": True}] == ended["saw"]


async def test_a_queued_send_waits_for_a_functai_turn(tl: Threadline, worker: Worker, folder: Path, cid: str) -> None:
    """A turn running in a functai process makes a queued Threadline send wait, then continue from it."""

    def functai_turn() -> None:
        with offline([reply("slow answer")], delay=2.0):
            tutor.conversation(cid, store=str(folder))("slow question")

    thread = threading.Thread(target=functai_turn)
    thread.start()
    for _ in range(100):
        if Log(FolderStore(folder).read(cid)).order:
            break
        await asyncio.sleep(0.02)
    turn = await tl.conversation("tutor", id=cid).predict("after it")
    thread.join()

    log = Log(FolderStore(folder).read(cid))
    foreign = log.order[0]
    assert foreign == turn.parent
    foreign_ended = log.turns[foreign].ended
    assert foreign_ended is not None
    assert foreign_ended["seq"] < log.turns[turn.id].record["seq"]


@pytest.mark.slow
async def test_after_a_long_outage_threadline_yields_to_functai(
    tl: Threadline, settings: Settings, tmp_path: Path, cid: str
) -> None:
    """No worker for longer than the log lease: functai resumes the interrupted turn, and the
    Threadline worker that comes back follows it instead of running or ending it again."""
    folder = settings.store_folder("default")
    first = WorkerProcess(settings, tmp_path / "first.log", delay=5.0)
    first.wait_ready()
    running = await tl.conversation("tutor", id=cid).send("during the outage")
    await until_asking(folder, cid, running.id)
    first.kill()
    for _ in range(550):  # the lease written at the start lasts 40 s
        if lease_ran_out(folder, cid, str(running.id)):
            break
        await asyncio.sleep(0.1)

    def resume() -> None:
        with offline([reply("resumed by functai")], delay=3.0):
            tutor.conversation(cid, store=str(folder)).turn(running.id).resume()

    thread = threading.Thread(target=resume)
    thread.start()
    for _ in range(200):
        if Log(FolderStore(folder).read(cid)).turns[str(running.id)].attempt == 2:
            break  # functai claimed it
        await asyncio.sleep(0.05)
    second = WorkerProcess(settings, tmp_path / "second.log", delay=5.0)
    turn = await finished_by(second, running)
    thread.join()

    assert ("done", 2, "resumed by functai") == (turn.state, turn.attempt, turn.result)
    assert 1 == kinds_of(folder, cid, turn.id)["ended"]
    assert 1 == model_requests(first.log, turn.id)
    assert 0 == model_requests(second.log, turn.id)


async def test_a_gracefully_stopped_worker_hands_its_turn_on(
    tl: Threadline, settings: Settings, tmp_path: Path, cid: str
) -> None:
    """SIGTERM during a model call longer than the worker's 5 s grace is a shutdown, not a stop:
    the turn is not ended `stopped`, and another worker finishes it."""
    folder = settings.store_folder("default")
    first = WorkerProcess(settings, tmp_path / "first.log", delay=8.0)
    first.wait_ready()
    running = await tl.conversation("tutor", id=cid).send("during a deploy")
    await until_asking(folder, cid, running.id)

    assert 0 == first.stop()
    second = WorkerProcess(settings, tmp_path / "second.log", delay=1.0)
    turn = await finished_by(second, running)

    assert "done" == turn.state
    assert (1, 1) == (model_requests(first.log, turn.id), model_requests(second.log, turn.id))
    assert 1 == kinds_of(folder, cid, turn.id)["ended"]
