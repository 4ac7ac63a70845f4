"""A worker with another data folder on the same task queue must not split conversations: every
record lands in the conversation's own store, and the stray worker says why it refuses."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from structlog.testing import capture_logs
from temporalio.client import Client

from core.settings import Settings
from core.temporal import connect_temporal
from store.backends.blobs import FolderBlobs
from store.backends.folder import FolderStore
from tests.chaos.invariants import check_ended_once, check_log
from threadline.client import Threadline
from worker import build_worker

CONVERSATIONS = 12
SENDS = 3


@pytest.mark.slow
async def test_a_stray_worker_with_another_store_writes_nothing(
    tl: Threadline, client: Client, settings: Settings, tmp_path: Path, cid: str
) -> None:
    """Two workers share a task queue, one with another store folder: every turn of every conversation
    is in the right store, each branch a single chain, the stray store empty, its refusals logged."""
    stray = dataclasses.replace(settings, data=tmp_path / "stray", stores={"default": tmp_path / "stray" / "store"})
    ids = [f"{cid}-{k}" for k in range(CONVERSATIONS)]
    other = await connect_temporal(stray, FolderBlobs(settings.payload_folder))  # one worker per client and queue
    with capture_logs() as logs:
        async with build_worker(client, settings), build_worker(other, stray):

            async def talk(conversation: str) -> list[str]:
                chat = tl.conversation("tutor", id=conversation)
                return [(await chat.predict(f"message {k}")).id for k in range(SENDS)]

            turns = await asyncio.gather(*(talk(conversation) for conversation in ids))

    folder = settings.store_folder("default")
    for conversation, made in zip(ids, turns, strict=True):
        log = check_log(folder, conversation)
        check_ended_once(log, made)
        assert made == [t.id for t in log.branch(made[-1])]  # one chain: no turn started a new root
    assert [] == FolderStore(stray.store_folder("default")).conversations()
    assert any(e["event"] == "store.mismatch" for e in logs)
