"""kill -9 of the Temporal server in the middle of a turn, then a restart on the same database: the
worker reconnects by itself, the turn completes (once), and the conversation takes new sends."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import signal
import time
from pathlib import Path

import pytest

from activities.language_model import OfflineModel
from core.errors import ThreadlineError
from core.models import TurnSend
from core.settings import Settings
from core.temporal import connect_temporal
from store.backends.blobs import FolderBlobs
from store.backends.folder import FolderStore
from store.log.state import Log
from store.records import uuid7
from tests.chaos.invariants import Ledger, until_ended
from threadline.client import connect
from threadline.devserver import DevServer, free_port
from worker import build_worker

DELAY_S = 3.0
"""The model call the server dies in."""


async def until_running(folder: Path, conversation: str, request_id: str) -> None:
    """Wait until the send's turn is placed and its lease says it runs."""
    deadline = time.monotonic() + 20
    while True:
        log = Log(FolderStore(folder).read(conversation))
        turn = log.turns.get(log.request_ids.get(request_id, ""))
        if turn is not None and turn.state(time.time()) == "running":
            return
        assert time.monotonic() < deadline, "the turn never ran"
        await asyncio.sleep(0.05)


async def own_server(settings: Settings, tmp_path: Path) -> tuple[Settings, DevServer, Path, int]:
    """A started dev server of the test's own (its database under `tmp_path`, a free port), settings
    that use it, its database and its port."""
    data, port = tmp_path / "temporal", free_port()
    server = DevServer(data, port=port, ui_port=None)
    await server.start()
    return dataclasses.replace(settings, address=f"127.0.0.1:{port}"), server, data, port


async def killed_and_restarted(server: DevServer, data: Path, port: int, *, down_s: float = 0.0) -> DevServer:
    """kill -9 of the server's process group, then (`down_s` later) a new server on its database and port."""
    assert server.pid is not None
    os.killpg(server.pid, signal.SIGKILL)
    await server.stop()  # reaps it; it is dead already
    await asyncio.sleep(down_s)
    restarted = DevServer(data, port=port, ui_port=None)
    await restarted.start()
    return restarted


@pytest.mark.slow
async def test_a_killed_temporal_server_restarts_and_the_turn_completes(
    settings: Settings, tmp_path: Path, cid: str
) -> None:
    """The server dies (SIGKILL, no goodbye) during a model call and comes back on its database: the
    turn ends done exactly once, and the next send is answered."""
    ledger = Ledger()
    own, server, data, port = await own_server(settings, tmp_path)
    folder, rid = own.store_folder("default"), uuid7()
    try:
        client = await connect_temporal(own, FolderBlobs(own.payload_folder))
        tl = await connect(own, client=client)
        chat = tl.conversation("tutor", id=cid)
        async with build_worker(client, own, providers={"offline": OfflineModel(delay=DELAY_S)}):
            await ledger.predict(chat, "before the crash")
            await chat.signal(TurnSend(request_id=rid, inputs={"message": "while the server dies"}, program="tutor"))
            await until_running(folder, cid, rid)
            server = await killed_and_restarted(server, data, port)
            await until_ended(folder, cid, [rid], patience=90)
            ledger.answers[rid] = Log(FolderStore(folder).read(cid)).request_ids[rid]
            await ledger.predict(chat, "after the restart")
    finally:
        await server.stop()

    log = ledger.check(folder, cid)
    assert "done" == log.turns[log.request_ids[rid]].state(0)


@pytest.mark.slow
async def test_a_send_cut_off_by_a_server_kill_leaves_no_error_unretrieved(
    settings: Settings, tmp_path: Path, cid: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The server dies while a worker runs an accepted send: its caller is told `server-unavailable`, and the
    update-with-start's start, which failed with it, leaves no error behind (asyncio logs such an error
    with its traceback when the future is collected, at any moment of any later code)."""
    own, server, data, port = await own_server(settings, tmp_path)
    folder, rid = own.store_folder("default"), uuid7()
    try:
        client = await connect_temporal(own, FolderBlobs(own.payload_folder))
        chat = (await connect(own, client=client)).conversation("tutor", id=cid)
        async with build_worker(client, own, providers={"offline": OfflineModel(delay=DELAY_S)}):
            await chat.deliver("before the crash")
            sent = asyncio.ensure_future(chat.deliver("while the server dies", request_id=rid))
            await until_running(folder, cid, rid)
            assert server.pid is not None
            os.killpg(server.pid, signal.SIGKILL)
            code = None
            try:
                await sent
            except ThreadlineError as err:
                code = err.code  # the error and its frames are let go of here
            assert code == "server-unavailable"
            del sent
            server = await killed_and_restarted(server, data, port)
            await until_ended(folder, cid, [rid], patience=90)
    finally:
        await server.stop()
    gc.collect()

    left = [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]
    assert left == []
