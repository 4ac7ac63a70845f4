"""kill -9 of the Temporal server in the middle of a burst of sends over many conversations, then a new
server on the same database: a workflow task that placed a send can die with the server after its
turn was appended (`test_orphaned_turns.py` has the exact cases). Whatever each caller was told,
every turn in every log ends exactly once, the conversation stays one chain (nothing placed beside
a lost turn), no request id makes two turns, and no head is left interrupted."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from pathlib import Path

import pytest

from activities.language_model import OfflineModel
from core.errors import ThreadlineError
from core.settings import Settings
from core.temporal import connect_temporal
from store.backends.blobs import FolderBlobs
from store.backends.folder import FolderStore
from store.log.state import Log
from store.records import uuid7
from tests.chaos import test_server_kill as kill
from tests.chaos.invariants import check_log
from threadline.client import Conversation, connect
from threadline.devserver import DevServer, free_port
from worker import build_worker

CONVERSATIONS, SENDS = 12, 8
KILL_AT = CONVERSATIONS * SENDS // 3
"""The server dies once this many turns ended (progress, not time: the machine may be loaded)."""
DOWN_S = 8.0
IDLE_S = 4.0
"""A conversation whose last send was lost runs that turn before it closes, this long after."""

Told = dict[str, str | None]
"""Each send of a conversation: its turn as its caller was told (None: an error, coded or not, or no answer in time)."""


async def converse(chat: Conversation, cid: str, told: Told) -> None:
    """Send one message after another, whatever each caller is told."""
    for i in range(SENDS):
        rid = uuid7()
        try:
            outcome = await asyncio.wait_for(chat.deliver(f"{cid} send {i}", request_id=rid), 60)
            told[rid] = outcome.turn
        except (ThreadlineError, TimeoutError):
            told[rid] = None
        except Exception:  # noqa: BLE001 - raw SDK errors during the outage are another defect's test
            told[rid] = None


def ended_turns(folder: Path, cids: list[str]) -> int:
    store = FolderStore(folder)
    return sum(sum(r.get("kind") == "ended" for r in store.read(cid)) for cid in cids)


async def until_ended_count(folder: Path, cids: list[str], count: int) -> None:
    deadline = time.monotonic() + 60
    while ended_turns(folder, cids) < count:
        assert time.monotonic() < deadline, "the burst did not get going"
        await asyncio.sleep(0.05)


async def until_all_ended(folder: Path, cids: list[str], patience: float) -> None:
    deadline = time.monotonic() + patience
    while any(turn.ended is None for cid in cids for turn in Log(FolderStore(folder).read(cid)).turns.values()):
        assert time.monotonic() < deadline, "turns left open"
        await asyncio.sleep(0.5)


def check_owned(folder: Path, cid: str, told: Told) -> int:
    """One chain, every turn ended once and sent by someone, the head not interrupted; its turns."""
    log = check_log(folder, cid)
    assert {} == {tid: t.state(time.time()) for tid, t in log.turns.items() if t.ended is None}
    assert [] == [parent for parent, n in Counter(t.parent for t in log.turns.values()).items() if n > 1]
    assert set() == set(log.request_ids) - set(told)
    assert {} == {rid: turn for rid, turn in told.items() if turn is not None and log.request_ids.get(rid) != turn}
    return len(log.turns)


@pytest.mark.slow
async def test_every_placed_turn_ends_once_after_a_server_kill_mid_burst(settings: Settings, tmp_path: Path) -> None:
    data, port = tmp_path / "temporal", free_port()
    own = dataclasses.replace(settings, address=f"127.0.0.1:{port}", idle_timeout_s=IDLE_S)
    folder, run = own.store_folder("default"), uuid7()[-8:]
    cids = [f"burst-{run}-{i}" for i in range(CONVERSATIONS)]
    told: dict[str, Told] = {cid: {} for cid in cids}
    server = DevServer(data, port=port, ui_port=None)
    await server.start()
    try:
        client = await connect_temporal(own, FolderBlobs(own.payload_folder))
        tl = await connect(own, client=client)
        async with build_worker(client, own, providers={"offline": OfflineModel(delay=0.3)}):
            burst = asyncio.gather(*(converse(tl.conversation("tutor", id=cid), cid, told[cid]) for cid in cids))
            await until_ended_count(folder, cids, KILL_AT)
            server = await kill.killed_and_restarted(server, data, port, down_s=DOWN_S)
            await burst
            await until_all_ended(folder, cids, patience=60)
    finally:
        await server.stop()
    assert [SENDS] * CONVERSATIONS == [len(told[cid]) for cid in cids]
    assert sum(check_owned(folder, cid, told[cid]) for cid in cids) >= KILL_AT
